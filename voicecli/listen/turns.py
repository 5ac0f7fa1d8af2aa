"""Where the user's turn starts and ends, from per-frame speech probabilities.

A turn starts once speech has lasted ``min_speech`` (a cough or a click does not start
one), and ends after ``hangover`` seconds with no speech: the pause a speaker makes
inside a sentence must be shorter than that, or the sentence is cut in two
(docs/listening.md measures how often). Speech that goes on past ``max_seconds`` is
handed on at that point, marked ``capped``, and the rest is the next utterance: nothing
the user said is dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from voicecli.frames import HEARING_FRAME_SECONDS, HEARING_RATE


@dataclass(frozen=True)
class SpeechOnset:
    """Maybe speech: ``onset`` of it, not yet ``min_speech`` (a reply playing can be held
    meanwhile, to be cut by ``SpeechStarted`` or to go on at ``SpeechDropped``)."""

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
    """The user paused: ``utterance`` is the turn's speech as it will be if no more comes
    before the hangover ends it (the same start and end; less silence after it), so it
    can be transcribed meanwhile."""

    utterance: UserSpeech


@dataclass(frozen=True)
class Resumed:
    """Speech again after ``Pausing``: the turn goes on (what was handed on is not it)."""


@dataclass(frozen=True)
class UserSpeech:
    """One turn of the user's speech, 16 kHz mono, with a little audio either side."""

    audio: np.ndarray
    start: float  # seconds into the stream: the first frame of speech
    end: float  # ...and the last
    capped: bool = False  # cut at max_seconds: the speaker had not paused

    @property
    def seconds(self) -> float:
        return len(self.audio) / HEARING_RATE


Event = SpeechOnset | SpeechDropped | SpeechStarted | Pausing | Resumed | UserSpeech


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
        self.threshold = threshold
        # Hysteresis, as Silero's own segmenter does: a frame stays speech down to this.
        self.low = max(threshold - 0.15, 0.01)
        self.hangover_frames = max(1, round(hangover / HEARING_FRAME_SECONDS))
        self.max_frames = max(1, round(max_seconds / HEARING_FRAME_SECONDS))
        self.min_frames = max(1, round(min_speech / HEARING_FRAME_SECONDS))
        # A reply is held after this much speech (two frames): one frame of a click or a
        # breath would stutter it.
        self.onset_frames = min(self.min_frames, max(1, round(onset / HEARING_FRAME_SECONDS)))
        self.tail_frames = round(0.2 / HEARING_FRAME_SECONDS)  # silence kept after the speech
        # Silence after which the turn so far is handed on as Pausing, with the silence
        # heard so far (Whisper needs no more): the sooner, the sooner its transcript.
        self.early_frames = max(1, round(early / HEARING_FRAME_SECONDS))
        self._before: deque[np.ndarray] = deque(
            maxlen=max(1, round(pre_roll / HEARING_FRAME_SECONDS))
        )
        self._frames: list[np.ndarray] = []  # the turn so far, pre-roll included
        self._speech = 0  # frames of speech in the turn
        self._silence = 0  # frames since the last speech
        self._first = 0  # stream frame of the turn's first speech
        self._last = 0  # ...and of its last
        self._confirmed = False
        self._onset = False  # SpeechOnset sent for the turn in progress
        self._paused = False  # Pausing sent since the turn's last speech
        self._n = 0  # frames seen

    @property
    def seconds(self) -> float:
        """Of the stream, pushed so far."""
        return self._n * HEARING_FRAME_SECONDS

    @property
    def in_turn(self) -> bool:
        """Speech has been heard and the turn has not ended."""
        return bool(self._frames)

    def push(self, frame: np.ndarray, probability: float) -> list[Event]:
        """One frame and its speech probability; what it completes, in order."""
        n = self._n
        self._n += 1
        events: list[Event] = []
        if not self._frames:
            if probability < self.threshold:
                self._before.append(frame)
                return events
            self._frames = [*self._before, frame]
            self._before.clear()
            self._speech, self._silence, self._first, self._last = 1, 0, n, n
            self._confirmed = self.min_frames <= 1
            self._onset = self.onset_frames <= 1
            if self._onset:
                events.append(SpeechOnset(n * HEARING_FRAME_SECONDS))
            if self._confirmed:
                events.append(SpeechStarted(n * HEARING_FRAME_SECONDS))
            return events
        self._frames.append(frame)
        if probability >= (self.low if self._silence == 0 else self.threshold):
            self._speech += 1
            self._silence = 0
            self._last = n
            if self._paused:
                self._paused = False
                events.append(Resumed())
            if not self._onset and self._speech >= self.onset_frames:
                self._onset = True
                events.append(SpeechOnset(self._first * HEARING_FRAME_SECONDS))
            if not self._confirmed and self._speech >= self.min_frames:
                self._confirmed = True
                events.append(SpeechStarted(self._first * HEARING_FRAME_SECONDS))
        else:
            self._silence += 1
        keep = len(self._frames) - self._silence + self.tail_frames
        if self._silence >= self.hangover_frames:
            if self._confirmed:
                events.append(self._utterance(self._frames[:keep], capped=False))
            elif self._onset:
                events.append(SpeechDropped())
            self._reset()
        elif self._confirmed and self._silence == self.early_frames:
            self._paused = True
            events.append(Pausing(self._utterance(self._frames[:keep], capped=False)))
        elif self._confirmed and len(self._frames) >= self.max_frames:
            events.append(self._utterance(self._frames, capped=True))
            self._reset()  # the speech goes on: its next frame starts the next utterance
        return events

    def flush(self) -> list[UserSpeech | SpeechDropped]:
        """The stream ended: a confirmed turn in progress is complete."""
        events: list[UserSpeech | SpeechDropped] = []
        if self._frames and self._confirmed:
            events.append(self._utterance(self._frames, capped=False))
        elif self._frames and self._onset:
            events.append(SpeechDropped())
        self._reset()
        return events

    def reset(self) -> None:
        """Forget the turn in progress (the microphone was muted)."""
        self._reset()
        self._before.clear()

    def _reset(self) -> None:
        self._frames = []
        self._speech = self._silence = 0
        self._confirmed = self._onset = self._paused = False

    def _utterance(self, frames: list[np.ndarray], capped: bool) -> UserSpeech:
        return UserSpeech(
            np.concatenate(frames),
            self._first * HEARING_FRAME_SECONDS,
            (self._last + 1) * HEARING_FRAME_SECONDS,
            capped,
        )
