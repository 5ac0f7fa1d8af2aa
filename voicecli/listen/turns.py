"""Where the user's turn starts and ends: two small state machines over the microphone's
frames, with no clock and no audio of their own (frames are counted; what they hold is
carried along), tested as such (tests/test_turns.py).

``TurnDetector`` reads one speech probability per frame. A turn starts once speech has
lasted ``min_speech`` (a cough or a click does not start one), and ends after
``hangover`` seconds with no speech: the pause a speaker makes inside a sentence must be
shorter than that, or the sentence is cut in two (docs/listening.md). Speech that goes
on past ``max_seconds`` is handed on at that point, marked ``capped``, and the rest is
the next utterance: nothing the user said is dropped.

``Turns`` puts a gate before it: a muted microphone (a reply playing that cannot be
talked over, or echo not yet cancellable) and, with push-to-talk, a key not held, hear
nothing; the VAD starts afresh whenever the gate opens.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Protocol

import numpy as np

from voicecli.frames import (
    HEARING_FRAME_SECONDS,
    Pausing,
    Resumed,
    SpeechDropped,
    SpeechEvent,
    SpeechOnset,
    SpeechStarted,
    TurnDropped,
    UserSpeech,
)


class Phase(Enum):
    IDLE = "idle"  # no speech
    STARTING = "starting"  # speech, too short yet to hold a reply for
    ONSET = "onset"  # maybe speech (SpeechOnset sent), too short yet to be a turn
    SPEAKING = "speaking"  # a turn (SpeechStarted sent)
    PAUSED = "paused"  # a turn whose speaker paused (Pausing sent)


class TurnDetector:
    def __init__(
        self,
        hangover: float = 1.0,
        max_seconds: float = 30.0,
        min_speech: float = 0.25,
        threshold: float = 0.5,
        pre_roll: float = 0.25,
        early: float = 0.1,
        onset: float = 0.064,
    ) -> None:
        def frames(seconds: float) -> int:
            return max(1, round(seconds / HEARING_FRAME_SECONDS))

        self.threshold = threshold
        # Hysteresis, as Silero's own segmenter does: a frame stays speech down to this.
        self.low = max(threshold - 0.15, 0.01)
        self.hangover_frames = frames(hangover)
        self.max_frames = frames(max_seconds)
        self.min_frames = frames(min_speech)
        # A reply is held after a little speech (two frames): one frame of a click or a
        # breath would stutter it.
        self.onset_frames = min(self.min_frames, frames(onset))
        self.tail_frames = round(0.2 / HEARING_FRAME_SECONDS)  # silence kept after the speech
        # Silence after which the turn so far is handed on as Pausing, with the silence
        # heard so far (Whisper needs no more): the sooner, the sooner its transcript.
        self.early_frames = frames(early)
        self._before: deque[np.ndarray] = deque(maxlen=frames(pre_roll))
        self.phase = Phase.IDLE
        self._frames: list[np.ndarray] = []  # the turn so far, pre-roll included
        self._speech = 0  # frames of speech in the turn
        self._silence = 0  # frames since the last speech
        self._first = 0  # stream frame of the turn's first speech
        self._last = 0  # ...and of its last
        self._n = 0  # frames seen

    @property
    def seconds(self) -> float:
        """Of the stream, pushed so far."""
        return self._n * HEARING_FRAME_SECONDS

    @property
    def in_turn(self) -> bool:
        """Speech has been heard and the turn has not ended."""
        return self.phase is not Phase.IDLE

    def push(self, frame: np.ndarray, probability: float) -> list[SpeechEvent]:
        """One frame and its speech probability; what it completes, in order."""
        n = self._n
        self._n += 1
        events: list[SpeechEvent] = []
        if self.phase is Phase.IDLE:
            if probability < self.threshold:
                self._before.append(frame)
                return events
            self._frames = [*self._before, frame]
            self._before.clear()
            self._speech, self._silence, self._first, self._last = 1, 0, n, n
            self.phase = Phase.STARTING
            self._advance(events)
            return events
        self._frames.append(frame)
        if probability >= (self.low if self._silence == 0 else self.threshold):
            self._speech += 1
            self._silence = 0
            self._last = n
            if self.phase is Phase.PAUSED:
                self.phase = Phase.SPEAKING
                events.append(Resumed())
            self._advance(events)
        else:
            self._silence += 1
        confirmed = self.phase in (Phase.SPEAKING, Phase.PAUSED)
        keep = len(self._frames) - self._silence + self.tail_frames
        if self._silence >= self.hangover_frames:
            if confirmed:
                events.append(self._speech_of(self._frames[:keep], capped=False))
            elif self.phase is Phase.ONSET:
                events.append(SpeechDropped())
            self._reset()
        elif self.phase is Phase.SPEAKING and self._silence == self.early_frames:
            self.phase = Phase.PAUSED
            events.append(Pausing(self._speech_of(self._frames[:keep], capped=False)))
        elif confirmed and len(self._frames) >= self.max_frames:
            events.append(self._speech_of(self._frames, capped=True))
            self._reset()  # the speech goes on: its next frame starts the next utterance
        return events

    def _advance(self, events: list[SpeechEvent]) -> None:
        """Onward from STARTING or ONSET, as far as the speech heard so far reaches."""
        at = self._first * HEARING_FRAME_SECONDS
        if self.phase is Phase.STARTING and self._speech >= self.onset_frames:
            self.phase = Phase.ONSET
            events.append(SpeechOnset(at))
        if self.phase is Phase.ONSET and self._speech >= self.min_frames:
            self.phase = Phase.SPEAKING
            events.append(SpeechStarted(at))

    def flush(self) -> list[SpeechEvent]:
        """The stream ended: a turn in progress is complete."""
        events: list[SpeechEvent] = []
        if self.phase in (Phase.SPEAKING, Phase.PAUSED):
            events.append(self._speech_of(self._frames, capped=False))
        elif self.phase is Phase.ONSET:
            events.append(SpeechDropped())
        self._reset()
        return events

    def reset(self) -> list[SpeechEvent]:
        """Forget the turn in progress (the microphone was muted): what it had begun."""
        events: list[SpeechEvent] = []
        if self.phase in (Phase.SPEAKING, Phase.PAUSED):
            events.append(TurnDropped())
        elif self.phase is Phase.ONSET:
            events.append(SpeechDropped())
        self._reset()
        self._before.clear()
        return events

    def _reset(self) -> None:
        self.phase = Phase.IDLE
        self._frames = []
        self._speech = self._silence = 0

    def _speech_of(self, frames: list[np.ndarray], capped: bool) -> UserSpeech:
        return UserSpeech(
            np.concatenate(frames),
            self._first * HEARING_FRAME_SECONDS,
            (self._last + 1) * HEARING_FRAME_SECONDS,
            capped,
        )


class SpeechProbability(Protocol):
    """A VAD over one continuous stream (``voicecli.listen.vad.VoiceActivity``)."""

    def __call__(self, frame: np.ndarray) -> float: ...

    def reset(self) -> None: ...


class Gate(Enum):
    OPEN = "open"
    MUTED = "muted"  # heard by no one: the speakers' echo, as the caller says
    UNHELD = "unheld"  # push-to-talk, and the key is up


class Turns:
    """The gate, the VAD and the turn detector, for one microphone stream."""

    def __init__(
        self, vad: SpeechProbability, detector: TurnDetector, *, push_to_talk: bool = False
    ) -> None:
        self.vad = vad
        self.detector = detector
        self.push_to_talk = push_to_talk
        self.gate = Gate.UNHELD if push_to_talk else Gate.OPEN

    @property
    def hearing(self) -> bool:
        """The user is speaking: a turn is open."""
        return self.detector.phase in (Phase.SPEAKING, Phase.PAUSED)

    @property
    def seconds(self) -> float:
        return self.detector.seconds

    def hear(
        self, frame: np.ndarray, *, muted: bool, held: bool, only_echo: bool = False
    ) -> list[SpeechEvent]:
        """One frame; ``held``: the push-to-talk key is down; ``only_echo``: the frame
        holds nothing louder than the speakers' echo (speech to a VAD, but not the user's)."""
        if muted:
            self.gate = Gate.MUTED
            return self.detector.reset()
        events: list[SpeechEvent] = []
        if self.push_to_talk and not held:
            if self.gate is Gate.OPEN:  # let go: the turn ends now, not after a hangover
                events = self.detector.flush()
            self.gate = Gate.UNHELD
            return events
        if self.gate is not Gate.OPEN:
            self.vad.reset()  # what it heard before the gate closed is not this stream
            self.gate = Gate.OPEN
        probability = self.vad(frame)  # always: its state follows the stream
        if only_echo:
            probability = 0.0
        return self.detector.push(frame, probability)
