"""The vocabulary every stage speaks: sentences in, audio chunks out, and the contracts of
the two ends, a ``Synthesizer`` and an ``AudioSink``, with what each can do declared up
front (``SynthCapabilities``, ``SinkCapabilities``) so that no caller has to probe.

Both halves are here: the output half (sentences, audio chunks, sinks) and the input
half (what the microphone's frames are found to hold, and what the user said).

This module sits below the pipeline and every backend; it imports only the wire
protocol (for the one sample rate) and the error type.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from voicecli.errors import VoiceCliError
from voicecli.protocol import SAMPLE_RATE

if TYPE_CHECKING:
    from voicecli.cancel import CancelToken
    from voicecli.timeline import Timeline

__all__ = ["SAMPLE_RATE"]

MIN_SPEED, MAX_SPEED = 0.5, 2.0  # Kokoro's usable speaking rates
# What voice input hears: 16 kHz mono (Whisper's rate), in frames of 512 samples (Silero
# VAD's window). The microphone delivers them; the listen stages take them.
HEARING_RATE = 16_000
HEARING_FRAME = 512
HEARING_FRAME_SECONDS = HEARING_FRAME / HEARING_RATE


def check_speed(speed: float, where: str = "Speed") -> float:
    """``speed`` if Kokoro can use it; a VoiceCliError naming the range otherwise."""
    if not MIN_SPEED <= speed <= MAX_SPEED:  # also false for NaN
        raise VoiceCliError(f"{where} {speed} is out of range: use {MIN_SPEED} to {MAX_SPEED}.")
    return float(speed)


@dataclass(frozen=True)
class Sentence:
    index: int  # position in the turn, from 0
    text: str  # what is spoken (normalized)
    display: str = ""  # what was shown to the user


@dataclass(frozen=True)
class Word:
    """A word of a sentence's spoken text (``Sentence.text``) and where its audio lies, in
    samples from the sentence's first: from the synthesizer's own durations."""

    text: str  # as the synthesizer read it; in order, so found again in the spoken text
    start: int
    end: int  # one past its last sample


def split_words(words: list[Word], end: int) -> tuple[tuple[Word, ...], list[Word]]:
    """``words`` (in order) cut at sample ``end``: those whose audio starts before it, for
    the chunk that ends there, and the rest, for later chunks."""
    cut = next((i for i, w in enumerate(words) if w.start >= end), len(words))
    return tuple(words[:cut]), words[cut:]


@dataclass(frozen=True)
class AudioChunk:
    """Samples of one sentence. A sentence may arrive in several chunks; ``offset`` says
    where this one starts in the sentence, so chunks tile it with no gap or overlap."""

    sentence: int  # Sentence.index this audio belongs to
    samples: np.ndarray  # float32 mono at the synthesizer's sample rate
    offset: int = 0  # samples of the sentence before this chunk
    last: bool = False  # the final chunk of that sentence
    # The whole sentence's samples, if the synthesizer can tell before its last chunk
    # (exact or estimated): what part of the sentence was heard when it is cut short.
    length: int | None = None
    # The words whose audio starts in this chunk (all of them by the sentence's last).
    words: tuple[Word, ...] = ()


@dataclass(frozen=True)
class SynthCapabilities:
    # Audio of a sentence may come in several chunks, before the whole sentence is done.
    streams_within_sentence: bool = False
    # Chunks carry the words they hold (``AudioChunk.words``); without them, what was
    # heard of a sentence cut short is estimated from its characters.
    word_timings: bool = False


class Synthesizer(Protocol):
    """Turns a stream of sentences into a stream of audio chunks.

    Takes an *iterator* of sentences rather than one sentence per call, so that a remote
    backend can send sentence N+1 while the audio of sentence N is still coming back.
    """

    sample_rate: int
    capabilities: SynthCapabilities

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        """Yield audio for each sentence, in order, as soon as it exists.

        Implementations mark SYNTH_START, SYNTH_FIRST_CHUNK and SYNTH_END on ``timeline``,
        end each sentence with a chunk whose ``last`` is set, stop at the next chunk once
        ``cancel`` is set, and raise ``VoiceCliError`` for failures users can fix.
        """
        ...

    def set_voice(self, voice: str) -> None:
        """Speak later sentences with ``voice`` (a name or blend); checked now."""
        ...

    def set_speed(self, speed: float) -> None: ...

    def warm_up(self) -> None:
        """Pay one-off start-up costs now (a process's first forward pass is slow)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What this synthesizer is, for reports: kind, model, voice, endpoint."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SinkCapabilities:
    paced: bool  # plays in real time to a listener; False: a file, "played" means written
    pause: bool = False
    skip: bool = False
    monitor: bool = False  # reports every block it sends to the listener (``monitor``)


@dataclass(frozen=True)
class Span:
    """Where one sentence lies on a sink's timeline, in samples from the turn's start."""

    sentence: int
    start: int
    end: int | None = None  # one past its last sample, once known
    skipped_at: int | None = None  # heard position when the listener skipped the rest
    length: int | None = None  # its expected samples while ``end`` is not known
    words: tuple[Word, ...] = ()  # those written so far, timed from ``start``

    def expected_end(self) -> int | None:
        """Where it ends, or is expected to."""
        if self.end is not None:
            return self.end
        return self.start + self.length if self.length is not None else None


@dataclass(frozen=True)
class Playback:
    """What a sink has delivered so far: the sentences' spans and the heard position."""

    spans: tuple[Span, ...] = ()
    position: int = 0  # samples that have reached the listener
    sample_rate: int = SAMPLE_RATE


PlayedHook = Callable[[int, float], None]  # (sentence, monotonic time its first sample played)
UnderrunHook = Callable[[float], None]
# (a block sent to the listener, silence included; monotonic time its first sample plays)
OutputHook = Callable[[np.ndarray, float], None]


class AudioSink(ABC):
    """Where a turn's audio goes: the device, a file, a browser tab.

    A sink declares what it can do in ``capabilities``; the listener's controls it lacks
    do nothing here. A sink may hand every chunk on to ``next_in_chain`` as well (a file
    written beside the device): the first of the chain paces the turn, reports it, and
    is what the listener hears.
    """

    capabilities: SinkCapabilities

    def __init__(self, next_in_chain: AudioSink | None = None) -> None:
        self.next_in_chain = next_in_chain

    def begin_turn(self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None) -> None:
        """A new turn, whose events these hooks report. Positions (``Playback``) are on
        the sink's own sample scale: only differences between them mean anything."""
        self._begin_turn(on_played, on_underrun)
        if self.next_in_chain is not None:
            self.next_in_chain.begin_turn(None, None)  # only what is heard reports

    def write(self, chunk: AudioChunk, cancel: CancelToken | None = None) -> None:
        """Queue a chunk, blocking while the sink is full (backpressure) or until cancel."""
        # The chain first: a file never blocks, while a device may wait for room.
        if self.next_in_chain is not None:
            self.next_in_chain.write(chunk, cancel)
        self._write(chunk, cancel)

    @abstractmethod
    def _begin_turn(
        self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None
    ) -> None: ...

    @abstractmethod
    def _write(self, chunk: AudioChunk, cancel: CancelToken | None) -> None: ...

    @abstractmethod
    def playback(self) -> Playback: ...

    def drain(self, cancel: CancelToken) -> bool:
        """Wait until everything queued reached the listener; False if cancelled."""
        return not cancel.cancelled

    def clear(self) -> None:  # noqa: B027 - does nothing by default
        """Silence at once: drop everything queued (called from any thread)."""

    def recording(self) -> Playback | None:
        """What was written to a file, on the file's own sample scale (positions are
        samples from the file's start, across turns); None when nothing is recorded."""
        return self.next_in_chain.recording() if self.next_in_chain is not None else None

    def monitor(self, hook: OutputHook | None) -> None:  # noqa: B027 - does nothing by default
        """Call ``hook`` from the audio thread with every block played (an echo
        canceller's far end); it must not block. Only with ``capabilities.monitor``."""

    def pause(self) -> None:  # noqa: B027 - does nothing by default
        """Only with ``capabilities.pause``."""

    def resume(self) -> None:  # noqa: B027 - does nothing by default
        """Only with ``capabilities.pause``."""

    @property
    def paused(self) -> bool:
        return False

    def skip_sentence(self) -> bool:
        """Jump to the next sentence (with ``capabilities.skip``); False when nothing
        could be skipped."""
        return False

    def describe(self) -> dict[str, Any]:
        """Where the audio goes, for reports."""
        described = self._describe()
        if self.next_in_chain is not None:
            described["next_in_chain"] = self.next_in_chain.describe()
        return described

    @abstractmethod
    def _describe(self) -> dict[str, Any]: ...

    def close(self) -> None:
        self._close()
        if self.next_in_chain is not None:
            self.next_in_chain.close()

    def _close(self) -> None:  # noqa: B027 - does nothing by default
        """What this sink holds (a stream, a file)."""


# --- The input half: what the user says ---------------------------------------------------
# The microphone's frames go through the VAD and the turn detector (``voicecli.listen``),
# which say what they make of them in ``SpeechEvent``s; voice input hands on what the user
# said as ``VoiceEvent``s. Times "into the stream" count from the stream's first frame.


@dataclass(frozen=True)
class UserSpeech:
    """One turn of the user's speech, 16 kHz mono, with a little audio either side."""

    audio: np.ndarray
    start: float  # seconds into the stream: the first frame of speech
    end: float  # ...and the last
    capped: bool = False  # cut at the longest utterance: the speaker had not paused

    @property
    def seconds(self) -> float:
        return len(self.audio) / HEARING_RATE

    @property
    def key(self) -> tuple[float, float]:
        """Which speech it holds: a pause's and the turn's are the same speech if nothing
        was said after the pause (the turn's has more silence after it)."""
        return self.start, self.end


@dataclass(frozen=True)
class SpeechOnset:
    """Maybe speech, not yet long enough to be a turn: a reply playing can be held
    meanwhile, to be cut at ``SpeechStarted`` or to go on at ``SpeechDropped``."""

    at: float  # seconds into the stream


@dataclass(frozen=True)
class SpeechDropped:
    """What began at the last ``SpeechOnset`` was no turn (a cough, a click)."""


@dataclass(frozen=True)
class SpeechStarted:
    """The user began to speak (a turn is confirmed): a barge-in, if speech is playing."""

    at: float  # seconds into the stream


@dataclass(frozen=True)
class Pausing:
    """The user paused: ``speech`` is the turn as it will be if no more comes before the
    hangover ends it (the same start and end; less silence after it), so that it can be
    transcribed meanwhile."""

    speech: UserSpeech


@dataclass(frozen=True)
class Resumed:
    """Speech again after ``Pausing``: the turn goes on (what was handed on is not it)."""


@dataclass(frozen=True)
class TurnDropped:
    """The turn in progress was forgotten, unfinished (the microphone was muted)."""


# A finished turn is its ``UserSpeech``.
SpeechEvent = (
    SpeechOnset | SpeechDropped | SpeechStarted | Pausing | Resumed | TurnDropped | UserSpeech
)


@dataclass(frozen=True)
class UserTurn:
    """What the user said in one turn, transcribed, with when each step of it happened
    (``time.monotonic()``)."""

    text: str
    seconds: float  # of speech
    capped: bool  # cut at the longest utterance while the user was still speaking
    ended: float  # when the speech ended (the hangover is after it)
    turned: float  # when the end of the turn was decided
    transcribed: float  # when its transcript was ready


@dataclass(frozen=True)
class Guess:
    """What the user said, as it stands at a pause: the turn's transcript if the hangover
    ends it there, so that a reply can be prepared meanwhile. The ``UserTurn`` that
    follows says what the turn was; ``SpokeOn`` comes first if speech went on."""

    text: str


@dataclass(frozen=True)
class SpokeOn:
    """The user spoke again after the last ``Guess``: it was not the turn."""


@dataclass(frozen=True)
class InputFailed:
    """Something the user said was lost (``fatal``: the microphone stopped, and only typed
    input works from now on)."""

    message: str
    fatal: bool = True


VoiceEvent = UserTurn | Guess | SpokeOn | InputFailed
