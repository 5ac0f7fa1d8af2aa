"""When to cut an utterance's audio into phrases, and when not to.

A sentence decoded in one pass is normalised over all of it, as Kokoro does (over its
silences too, which is why the synthesizer decodes them: docs/streaming.md). Decoded in
parts, each part's InstanceNorm statistics are its own (pooled with the parts before
it), which sounds natural only when the part is a phrase bounded by silence; so parts
are cut inside pauses the model itself predicts, and only when waiting for the whole
rest would leave the listener in silence. Where no pause comes soon enough, a part may
end anywhere as a *window*: the part after it keeps its statistics
(``PooledStatistics.hold``), so the two join as one decode would, with no seam. Each
decision is a ``Cut``, which says which of these it is. It compares two things:

* how much audio the listener still has queued (``ahead``, given: the ``Playhead`` of
  the one decoding, a virtual playhead that starts playing at the first chunk and never
  pauses; the device starts later and may pause, so the real queue is never shorter);
* ``CostModel``: how long decoding takes on this machine, now (a real-time factor
  learned from every part decoded, so that a busy CPU, say one shared with an LLM,
  makes the next parts smaller).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from voicecli.frames import SAMPLE_RATE

# Kokoro's generator frame: half an alignment frame of the duration predictor.
GENERATOR_FRAME_SAMPLES = 300
GENERATOR_FRAME_SECONDS = GENERATOR_FRAME_SAMPLES / SAMPLE_RATE
# Shortest phrase worth a cut (24 generator frames, about "Sure,"): parts that short
# sound as whole sentences do (docs/streaming.md).
MIN_PART_FRAMES = 24
SAFETY = 0.7  # plan for decoding to take this much of the queued audio, at most
# A listener waiting for a long first phrase gets a window of it first: 32 frames
# normalised over themselves, the rest of the phrase held to them. That sounds a little
# further from the whole render than whole phrases do, and halves the worst wait for the
# first chunk (docs/streaming.md), so only where it saves this much waiting.
FIRST_WINDOW_FRAMES = 32
WINDOW_GAIN = 0.15  # seconds


@dataclass
class CostModel:
    """Seconds to decode ``n`` generator frames: a fixed cost per call plus a real-time
    factor learned from measurements. Starts pessimistic: a first guess that is too low
    would leave a gap, one that is too high only cuts a little early. The first
    measurement replaces the guess; later ones are averaged in, the newest weighing
    ``alpha``."""

    rtf: float = 1.0
    per_call: float = 0.05
    alpha: float = 0.5  # weight of the newest measurement
    _measured: bool = field(default=False, repr=False)

    def predict(self, frames: int, context: int = 0) -> float:
        return self.per_call + self.rtf * (frames + context) * GENERATOR_FRAME_SECONDS

    def observe(self, frames: int, context: int, seconds: float) -> None:
        audio = (frames + context) * GENERATOR_FRAME_SECONDS
        if audio <= 0:
            return
        rtf = max(0.01, (seconds - self.per_call) / audio)
        self.rtf += (self.alpha if self._measured else 1.0) * (rtf - self.rtf)
        self._measured = True


@dataclass
class Playhead:
    """A listener who starts playing at the first chunk of a turn and plays at 1x."""

    started: float | None = None
    emitted: float = 0.0  # seconds of audio handed out

    def emit(self, seconds: float, now: float | None = None) -> None:
        if self.started is None:
            self.started = time.monotonic() if now is None else now
        self.emitted += seconds

    def ahead(self, now: float | None = None) -> float:
        """Seconds of audio the listener has queued and not yet heard."""
        if self.started is None:
            return 0.0
        now = time.monotonic() if now is None else now
        return max(0.0, self.emitted - (now - self.started))


class CutKind(Enum):
    """What kind of end a part has, which decides how the part after it is decoded."""

    PAUSE = "pause"  # in a pause the model predicts: the next part is a phrase of its own
    WINDOW = "window"  # anywhere: the next part holds this one's statistics, no seam
    SPEECH_END = "speech end"  # where the speech ends: the silence after it is zeros
    END = "end"  # the end of the utterance


@dataclass(frozen=True)
class Cut:
    end: int  # generator frame
    kind: CutKind


@dataclass
class PhrasePlan:
    """Chooses the end of the next part of an utterance: a pure function of the
    utterance, of the audio the listener has queued and of the machine's speed (the
    cost model, which the one decoding teaches)."""

    cost: CostModel = field(default_factory=CostModel)
    context: int = 0  # extra frames each decode pays for, outside the part
    min_part: int = MIN_PART_FRAMES
    first_window: int = FIRST_WINDOW_FRAMES
    # Seconds of decoding one part may take, at most, where possible: a server sets it
    # while other clients wait for their turn, so that no part of one keeps them long.
    max_seconds: float | None = None

    def next_cut(
        self,
        start: int,
        frames: int,
        pauses: Sequence[int],
        *,
        ahead: float,
        inside: bool = False,
        speech_end: int | None = None,
    ) -> Cut:
        """Where the part beginning at ``start`` should end (``frames`` = the end), with
        ``ahead`` seconds of audio queued for the listener. ``inside``: the part before
        was cut at a window, so this one begins inside a word. Frames from
        ``speech_end`` on are silence: worth decoding only in one pass with the whole
        rest (the norms average over them), so where that does not fit the plan is for
        the speech alone, and a part ending at ``speech_end`` is the last.

        The whole rest if its decoding fits in the queued audio; otherwise the farthest
        pause whose part still fits; ``inside`` a word, where a stall must never fall,
        else the farthest window that fits. With nothing queued (the start of a turn) or nothing
        fitting, the pause that keeps the listener waiting least in all: the wait for
        this part plus the stall, if any, while the part after it is decoded. Where that
        is silence of more than ``WINDOW_GAIN``, a window saving that much instead: the
        longest that fits in the queued audio, or else a first window. Under
        ``max_seconds``, a part longer than that is cut at its first usable pause.
        """
        end = self._end(start, frames, pauses, ahead, inside, speech_end)
        if end == frames:
            return Cut(end, CutKind.END)
        if end == speech_end:
            return Cut(end, CutKind.SPEECH_END)
        return Cut(end, CutKind.PAUSE if end in pauses else CutKind.WINDOW)

    def _end(
        self,
        start: int,
        frames: int,
        pauses: Sequence[int],
        ahead: float,
        inside: bool,
        speech_end: int | None,
    ) -> int:
        limit = self._limit(ahead)
        # A cut would not help the next sentence: its text stages wait for all of this
        # one's parts either way, and a cut adds a pass and changes the normalisation.
        if self.cost.predict(frames - start, self.context) <= limit:
            return frames
        if speech_end is not None and speech_end < frames:
            return self._end(start, speech_end, pauses, ahead, inside, None)
        usable = [p for p in pauses if p - start >= self.min_part and frames - p >= self.min_part]
        fitting = [p for p in usable if self.cost.predict(p - start, self.context) <= limit]
        if fitting:
            return fitting[-1]
        window = self._window(start, frames, usable, limit, ahead)
        if inside and window is not None:
            return window
        best = min(
            [*usable, frames], key=lambda end: self._silence(start, end, frames, usable, ahead)
        )
        silence = self._silence(start, best, frames, usable, ahead)
        if silence > WINDOW_GAIN:
            window = window or self._first_window(start, frames, usable, ahead)
            if window is not None:
                waits = max(0.0, self.cost.predict(window - start, self.context) - ahead)
                if waits < silence - WINDOW_GAIN:
                    return window
        if self.cost.predict(best - start, self.context) > self._cap and usable:
            return usable[0]
        return best

    def _limit(self, ahead: float) -> float:
        """Seconds one part may take to decode without leaving the listener in silence
        (nor, under ``max_seconds``, other clients waiting long)."""
        return min(SAFETY * ahead, self._cap)

    @property
    def _cap(self) -> float:
        return math.inf if self.max_seconds is None else self.max_seconds

    def pause_for(self, frames: int, ahead: float) -> float:
        """Seconds of silence to add to the ``ahead`` seconds queued so that a part of
        ``frames`` is decoded within SAFETY of them, the margin every part is planned
        with: decoding times vary by a fifth from pass to pass on a shared machine."""
        return max(0.0, self.cost.predict(frames, self.context) / SAFETY - ahead)

    def fits(self, frames: int, ahead: float) -> bool:
        """Whether ``frames`` decoded in one part fit in ``ahead`` seconds of queued
        audio (and in ``max_seconds``)."""
        return self.cost.predict(frames, self.context) <= self._limit(ahead)

    def _window(
        self, start: int, frames: int, pauses: list[int], limit: float, ahead: float
    ) -> int | None:
        """The end of the longest window from ``start`` whose decoding fits in ``limit``
        seconds, if the parts after it keep up."""
        end = start + self._longest(limit, frames - start - self.min_part)
        if end - start < self.min_part or not self._kept_up(start, end, frames, pauses, ahead):
            return None
        return end

    def _first_window(self, start: int, frames: int, pauses: list[int], ahead: float) -> int | None:
        """The end of a first window from ``start``, if the parts after it keep up."""
        end = start + self.first_window
        if frames - end < self.min_part or not self._kept_up(start, end, frames, pauses, ahead):
            return None
        return end

    def _kept_up(self, start: int, end: int, frames: int, pauses: list[int], ahead: float) -> bool:
        """Whether, after a window [``start``, ``end``), parts to the next pause (or to
        ``frames``), each decoded while SAFETY of the audio queued before it plays, leave
        the listener no silence. A window ends inside a word, where a stall must never
        fall: a machine too slow for that gets its stalls in pauses instead."""
        window = end - start
        queued = max(0.0, ahead - self.cost.predict(window, self.context))
        queued += window * GENERATOR_FRAME_SECONDS
        position = end
        target = next((p for p in pauses if p - end >= self.min_part), frames)
        while position < target:
            n = self._longest(SAFETY * queued, target - position)
            if n < min(self.min_part, target - position):
                return False
            queued += n * GENERATOR_FRAME_SECONDS - self.cost.predict(n, self.context)
            position += n
        return True

    def _longest(self, limit: float, most: int) -> int:
        """The most frames, up to ``most``, whose decoding fits in ``limit`` seconds."""
        lo, hi = 0, max(0, most)
        while lo < hi:  # predict grows with the frames
            mid = (lo + hi + 1) // 2
            if self.cost.predict(mid, self.context) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _silence(self, start: int, end: int, frames: int, pauses: list[int], ahead: float) -> float:
        """Seconds the listener waits if the next part ends at ``end``: for it to be
        decoded, then for the one after it (to the next pause or the end) once this
        one's audio has run out."""
        wait = max(0.0, self.cost.predict(end - start, self.context) - ahead)
        if end == frames:
            return wait
        following = next((p for p in pauses if p - end >= self.min_part), frames)
        queued = (
            ahead
            + (end - start) * GENERATOR_FRAME_SECONDS
            - self.cost.predict(end - start, self.context)
        )
        return wait + max(0.0, self.cost.predict(following - end, self.context) - max(0.0, queued))
