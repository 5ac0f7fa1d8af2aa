"""Hands-free input for ``chat --listen``: the microphone's frames go through the echo
canceller, the VAD and the turn detector (``Turns``) on one thread, and each finished
utterance is transcribed on another (so the microphone is never left unread while
Whisper works). Transcription starts when the user pauses, while the hangover runs, and
is kept if the turn ends there: the user waits for the hangover, not for the hangover and
then Whisper. What was said comes out of ``events`` as ``UserTurn``s; silence and noise
that Whisper makes no words of never do.

While the assistant speaks, the microphone also hears the speakers. On speakers an echo
canceller (``echo``) takes them out of what the microphone hears, and a frame no louder
than their echo is heard as silence, whatever AEC3 leaked of it; with headphones there
is no echo to take out. Either way speech that starts while a reply plays is a barge-in
(``barge_in``): its onset holds the reply, which is cut once the speech lasts long
enough to be a turn, or goes on if it was not. With neither, the input is muted for the
turn and a short tail after it (``mute``).
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from voicecli.errors import VoiceCliError
from voicecli.frames import (
    HEARING_FRAME_SECONDS,
    Guess,
    InputFailed,
    Pausing,
    Resumed,
    SpeechDropped,
    SpeechEvent,
    SpeechOnset,
    SpeechStarted,
    SpokeOn,
    TurnDropped,
    UserSpeech,
    UserTurn,
    VoiceEvent,
)
from voicecli.listen.asr import Transcriber, Transcript
from voicecli.listen.echo import EchoCanceller
from voicecli.listen.mic import SILENT_DB, Microphone, level_db
from voicecli.listen.turns import TurnDetector, Turns
from voicecli.listen.vad import VoiceActivity

log = logging.getLogger(__name__)

WORD = re.compile(r"\w")
# Speech after the speakers stop still echoes in a room for a moment.
ECHO_TAIL = 0.3
# Push-to-talk: a terminal reports no key releases, only the repeats of a held key. The
# first repeat comes after the keyboard's repeat delay (X11's default is two thirds of a
# second), so the key counts as held until this long after the last one came.
HOLD_RELEASE = 0.7
TRANSCRIPTIONS_AHEAD = 8  # utterances waiting for Whisper at most


class BargeIn(Protocol):
    """What speech does to a reply that is playing (called on the microphone's thread;
    each must return at once)."""

    def onset(self) -> None:
        """Maybe speech: hold the reply."""

    def confirmed(self) -> None:
        """Speech: cut the reply, as a key does."""

    def dropped(self) -> None:
        """Not speech after all: let a held reply go on."""


@dataclass(frozen=True)
class _Transcription:
    """Speech for Whisper: a finished turn (``final``), or a pause's, transcribed while
    the hangover runs and reused if the turn ends as it was."""

    speech: UserSpeech
    final: bool
    ended: float = 0.0  # time.monotonic() when the speech ended
    turned: float = 0.0  # ...and when its turn did


class _Pause:
    """The pause whose transcript may still become a ``Guess``, whether one did, and the
    last pause's transcript: the two threads decide under one lock, so that ``SpokeOn``
    never comes before its ``Guess``."""

    def __init__(self, events: queue.Queue[VoiceEvent]) -> None:
        self._events = events
        self._lock = threading.Lock()
        self._key: tuple[float, float] | None = None
        self._guessed = False
        self.early: tuple[tuple[float, float], Transcript] | None = None

    def began(self, speech: UserSpeech) -> None:
        with self._lock:
            self._key = speech.key

    def current(self, speech: UserSpeech) -> bool:
        with self._lock:
            return self._key == speech.key

    def forget(self, *, spoke_on: bool) -> None:
        with self._lock:
            if spoke_on and self._guessed:
                self._events.put(SpokeOn())
            self._key, self._guessed = None, False

    def transcribed(self, speech: UserSpeech, transcript: Transcript, guesses: bool) -> None:
        """A pause's transcript: a ``Guess`` if the pause is still the last thing heard."""
        self.early = (speech.key, transcript)
        if not guesses or not WORD.search(transcript.text):
            return
        with self._lock:
            if self._key == speech.key:
                self._guessed = True
                self._events.put(Guess(transcript.text))

    def take_early(self, speech: UserSpeech) -> Transcript | None:
        """The pause's transcript if the turn ended as it was when paused."""
        early, self.early = self.early, None
        return early[1] if early is not None and early[0] == speech.key else None


class VoiceInput:
    def __init__(
        self,
        transcriber: Transcriber,
        microphone: Microphone,
        *,
        hangover: float,
        max_seconds: float,
        barge_in: BargeIn | None = None,
        push_to_talk: bool = False,
        echo: EchoCanceller | None = None,
        guesses: bool = False,
    ) -> None:
        """``push_to_talk``: only what is said while a key is held (``hold``) is heard,
        and letting go ends the turn. ``echo``: what the speakers play is taken out of
        every frame before anything else hears it. ``guesses``: ``events`` also says
        what was said at each pause (``Guess``, ``SpokeOn``)."""
        self.transcriber = transcriber
        self.mic = microphone
        self.echo = echo
        self.turns = Turns(
            VoiceActivity(),
            TurnDetector(hangover=hangover, max_seconds=max_seconds),
            push_to_talk=push_to_talk,
        )
        self.barge_in = barge_in
        self.events: queue.Queue[VoiceEvent] = queue.Queue()
        self.guesses = guesses
        self._pause = _Pause(self.events)
        self.level_db = SILENT_DB  # the last frame's (echo taken out), for a meter
        self.transcribing = 0  # utterances waiting for or in Whisper
        self._count = threading.Lock()  # transcribing changes on both threads
        self._muted_until: float | None = None  # None: not muted
        self._held_until = 0.0  # push-to-talk: the key counts as held until then
        self._dropped = 0  # microphone frames lost, as last logged
        self._work: queue.Queue[_Transcription | None] = queue.Queue(TRANSCRIPTIONS_AHEAD)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._listen, name="voicecli-mic", daemon=True),
            threading.Thread(target=self._transcribe, name="voicecli-asr", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def push_to_talk(self) -> bool:
        return self.turns.push_to_talk

    @property
    def hearing(self) -> bool:
        """The user is speaking (a turn is open)."""
        return self.turns.hearing

    def mute(self, muted: bool) -> None:
        """Muted: frames are heard by no one (the speakers' echo). Unmuting takes effect
        ``ECHO_TAIL`` later."""
        if muted:
            self._muted_until = float("inf")
        elif self._muted_until is not None:
            self._muted_until = time.monotonic() + ECHO_TAIL

    def hold(self) -> None:
        """The push-to-talk key is down (a press, or one of its repeats)."""
        self._held_until = time.monotonic() + HOLD_RELEASE

    @property
    def held(self) -> bool:
        return time.monotonic() < self._held_until

    @property
    def closed(self) -> bool:
        """Closed, or its microphone's thread has ended (``events`` says why)."""
        return self._stop.is_set() or not self._threads[0].is_alive()

    def close(self) -> None:
        self._stop.set()
        self.mic.close()
        self._work.put(None)
        for thread in self._threads:
            thread.join(2.0)

    def _listen(self) -> None:
        try:
            while not self._stop.is_set():
                frame = self.mic.read()
                if frame is None:
                    continue
                if self.mic.dropped > self._dropped:  # the reader fell 10 s behind
                    log.warning("%d microphone frames lost", self.mic.dropped - self._dropped)
                    self._dropped = self.mic.dropped
                samples = frame.samples
                if self.echo is not None:
                    samples = self.echo(samples, frame.at)
                    self.level_db = level_db(samples)
                else:
                    self.level_db = frame.level_db
                events = self.turns.hear(
                    samples,
                    muted=self._muted(frame.at),
                    held=frame.at < self._held_until,
                    # What AEC3 leaked is the assistant's voice, not the user's.
                    only_echo=self.echo is not None and self.echo.only_echo,
                )
                self._handle(events, frame.at)
        except VoiceCliError as exc:
            self.events.put(InputFailed(str(exc)))
        except Exception as exc:  # noqa: BLE001 - never die silently: typed input goes on
            log.exception("voice input failed")
            self.events.put(InputFailed(f"Voice input stopped: {type(exc).__name__}: {exc}"))

    def _muted(self, at: float) -> bool:
        """Whether the frame captured at ``at`` is heard by no one: muted by the caller
        while a reply plays, or echo a canceller has not yet learnt to take out."""
        if self.echo is not None and not self.echo.settled:
            return True
        if self._muted_until is not None:
            if at < self._muted_until:
                return True
            self._muted_until = None
        return False

    def _handle(self, events: list[SpeechEvent], at: float) -> None:
        """What the turn detector made of the frame captured at ``at``."""
        barge_in = self.barge_in
        for event in events:
            match event:
                case SpeechOnset():
                    if barge_in is not None:
                        barge_in.onset()
                case SpeechDropped():
                    if barge_in is not None:
                        barge_in.dropped()
                case SpeechStarted():
                    if barge_in is not None:
                        barge_in.confirmed()
                case Pausing(speech=speech):
                    self._pause.began(speech)
                    try:
                        self._work.put_nowait(_Transcription(speech, final=False))
                    except queue.Full:
                        pass  # only a head start: the final utterance still comes
                case Resumed() | TurnDropped():
                    self._pause.forget(spoke_on=True)  # the turn does not end there
                case UserSpeech() as speech:
                    self._pause.forget(spoke_on=False)  # the UserTurn says what it was
                    # The speech ended this long before the frame that ended the turn.
                    ended = at + HEARING_FRAME_SECONDS - (self.turns.seconds - speech.end)
                    self._hand_on(speech, ended)

    def _counted(self, change: int) -> None:
        with self._count:
            self.transcribing += change

    def _hand_on(self, speech: UserSpeech, ended: float) -> None:
        self._counted(1)
        job = _Transcription(speech, final=True, ended=ended, turned=time.monotonic())
        try:
            self._work.put_nowait(job)
        except queue.Full:  # Whisper is far behind: say so rather than queue more
            self._counted(-1)
            self.events.put(
                InputFailed("Speech came faster than it could be transcribed.", fatal=False)
            )

    def _transcribe(self) -> None:
        while (job := self._work.get()) is not None:
            if not job.final and not self._pause.current(job.speech):
                continue  # the user spoke on while it waited: a stale pause
            try:
                transcript = self._pause.take_early(job.speech) if job.final else None
                if transcript is None:
                    transcript = self.transcriber.transcribe(job.speech.audio)
            except Exception as exc:  # noqa: BLE001
                if job.final:
                    log.warning("transcription failed: %r", exc)
                    message = f"Could not transcribe what was said: {type(exc).__name__}."
                    self.events.put(InputFailed(message, fatal=False))
                continue
            finally:
                if job.final:
                    self._counted(-1)
            if not job.final:
                self._pause.transcribed(job.speech, transcript, self.guesses)
            elif WORD.search(transcript.text):
                speech = job.speech
                self.events.put(
                    UserTurn(
                        transcript.text,
                        speech.end - speech.start,
                        speech.capped,
                        job.ended,
                        job.turned,
                        time.monotonic(),
                    )
                )
            else:
                log.info("no words in %.1f s of sound", job.speech.seconds)
