"""Echo cancellation, so that the user can talk over a reply played on speakers: WebRTC's
AEC3 (the audio processing module in livekit's wheel) removes from the microphone what
the speakers played, and what is left is the user.

The far end is every block the player sends to the device, with the time its first
sample reaches the DAC (``AudioSink.monitor``); the near end is the microphone's frames,
with the time their first sample was captured. AEC3 takes one far frame (a hundredth of
a second) before each near frame and finds the delay between them itself, within a few
tenths of a second.
The two are paired here by those timestamps, not by arrival, so that a microphone reader
that falls behind (a busy CPU) does not stretch the delay past what AEC3 can find.

AEC3 still leaks now and then (its delay moves, a reply starts after a flush), and what
leaks is the assistant's voice, which a VAD takes for the user's. So the canceller also
says whether the microphone heard anything louder than the echo it expects of what just
played (``only_echo``): how loud the room returns the speakers is learnt from what AEC3
took out, and the user, nearer the microphone than the speakers are, is louder than that.
This is the level test of a double-talk detector (Geigel's, on energies), and it does
not depend on AEC3 having got the delay right. The other way round, AEC3's suppressor
takes the first tens of ms of speech over a reply for echo: where the microphone is far
louder than any echo could be, the user is what it heard, and its own samples are
returned instead (a VAD sees the speech sooner, and Whisper hears its first syllable).
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections import deque

import numpy as np

from voicecli.audio.resample import Resampler
from voicecli.errors import VoiceCliError
from voicecli.frames import HEARING_RATE

log = logging.getLogger(__name__)

AEC_FRAME = HEARING_RATE // 100  # AEC3 works on frames of a hundredth of a second
# Both streams are timed by counting their samples from a first timestamp: the times a
# callback gives are late by however long the scheduler kept it waiting (more on a busy
# machine, and a restarted output stream reports less delay for its first blocks), and
# AEC3 loses the echo each time its delay moves. So the count moves
# only when the median of the last DRIFT_READINGS timestamps says it is more than JUMP off
# (samples lost, a stream restarted by a flush), and starts again past MAX_GAP.
JUMP = 0.008
DRIFT_READINGS = 16
MAX_GAP = 2.0
# Until AEC3 has adapted to the room (a few seconds of a first reply), the echo passes
# through. The canceller vouches for what it returns (``settled``) only once it has taken
# at least SETTLED_ERLE dB out of what the speakers played, or left less than INAUDIBLE,
# over two windows of WINDOW seconds of playing in a row; or when nothing has played for
# TAIL (a room's echo dies away by then).
SETTLED_ERLE = 15.0
INAUDIBLE = -60.0  # dBFS
WINDOW = 0.5
TAIL = 0.3
PLAYING = -50.0  # dBFS: a far frame louder than this is the speakers playing
KEEP_PLAYED = 1000  # far blocks waiting for the microphone at most (seconds of them)
# Only echo: a near frame no louder than the loudest far frame of the last ECHO_SPAN
# seconds (the room's delay and reverberation are within it), times the room's echo
# return (learnt: a high percentile of near over far, over the last ERL_FRAMES frames
# that AEC3 took at least SETTLED_ERLE out of, so they held no user), plus USER_MARGIN.
ECHO_SPAN = 0.3
ERL_FRAMES = 500
ERL_MIN_FRAMES = 20
ERL_PERCENTILE = 75
USER_MARGIN = 3.0  # dB
LEARN_SPAN = 6.0  # dB over the echo return learnt so far that a frame may still teach
USER_DOMINANT = 10.0  # dB over the echo expected: the microphone's own samples are the user
INSTALL = "Echo cancellation needs livekit: pip install 'voicecli[listen]'."


class EchoCanceller:
    def __init__(self, far_rate: int) -> None:
        """``far_rate``: the player's sample rate. Raises VoiceCliError when the
        canceller cannot be loaded."""
        try:
            from livekit import rtc
        except ImportError:
            raise VoiceCliError(INSTALL) from None
        self._rtc = rtc
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)
        self._resample = (
            None
            if far_rate == HEARING_RATE
            else Resampler(far_rate, HEARING_RATE, "Echo cancellation")
        )
        # Filled on the audio thread, drained on the microphone's.
        self._played: deque[tuple[np.ndarray, float]] = deque(maxlen=KEEP_PLAYED)
        self._lock = threading.Lock()  # one caller of __call__ at a time
        self._far = np.zeros(0, np.float32)  # 16 kHz, not yet given to AEC3
        self._far_at: float | None = None  # when _far[0] plays
        self._near = np.zeros(0, np.float32)  # captured, waiting for a whole AEC frame
        self._near_at: float | None = None  # when _near[0] was captured
        self._far_offsets: deque[float] = deque(maxlen=DRIFT_READINGS)
        self._near_offsets: deque[float] = deque(maxlen=DRIFT_READINGS)
        # Near frames come out one AEC frame late, so that every call returns as many as it got
        # (cleaned, and as they were).
        self._out = np.zeros(AEC_FRAME, np.float32)
        self._raw = np.zeros(AEC_FRAME, np.float32)
        self.converged = False  # AEC3 has adapted to the room (stays so)
        self.converged_at: float | None = None  # the near time it did
        self.settled = True  # what the last call returned carries no echo to fear
        self._window = [0.0, 0.0, 0]  # energy in and out, frames: while playing, unconverged
        self._good_windows = 0
        self._loud_until = float("-inf")  # when the speakers last played something
        self._far_energy: deque[float] = deque(maxlen=round(ECHO_SPAN * 100))
        self._returns: deque[float] = deque(maxlen=ERL_FRAMES)  # dB, near over far
        self._echo_return: float | None = None  # dB: the room's, once learnt
        self._learnt = 0  # frames it was learnt from
        self.only_echo = False  # the last call's frames held nothing louder than the echo
        # (nothing of the user's: a frame for a VAD to hear as silence)

    def played(self, block: np.ndarray, at: float) -> None:
        """A block the speakers play from ``at`` on (called on the audio thread)."""
        self._played.append((block.copy(), at))

    def __call__(self, samples: np.ndarray, at: float) -> np.ndarray:
        """The microphone's ``samples`` (16 kHz, the first captured at ``at``) without
        the speakers' echo, one AEC frame late (as they were where there is no echo, or the user
        drowns it)."""
        with self._lock:
            self._take_played()
            if self._near_at is None:
                self._near_at = at
            else:
                self._near_at += _drift(self._near_offsets, at - self._near_end())
            self._near = np.concatenate([self._near, samples])
            cleaned, raw = [self._out], [self._raw]
            near_energy, loudest_far, frames = 0.0, 0.0, 0
            while len(self._near) >= AEC_FRAME:
                chunk, self._near = self._near[:AEC_FRAME], self._near[AEC_FRAME:]
                far = self._far_frame(self._near_at)
                self._apm.process_reverse_stream(self._frame(far))
                near = self._frame(chunk)
                self._apm.process_stream(near)
                out = np.frombuffer(near.data, np.int16).astype(np.float32) / 32768
                self._judge(far, chunk, out)
                near_energy += float(np.mean(np.square(chunk, dtype=np.float64)))
                loudest_far = max(loudest_far, max(self._far_energy))
                frames += 1
                cleaned.append(out)
                raw.append(chunk)
                self._near_at += AEC_FRAME / HEARING_RATE
            self.settled = self.converged or self._near_at - self._loud_until > TAIL
            over = self._over_echo(near_energy / frames, loudest_far) if frames else None
            if frames:
                self.only_echo = over is not None and over <= USER_MARGIN
            out, mic = np.concatenate(cleaned), np.concatenate(raw)
            self._out, self._raw = out[len(samples) :], mic[len(samples) :]
            # Nothing played within ECHO_SPAN: no echo to take out, and AEC3's output
            # (high-pass, comfort noise) would only move where a VAD hears speech end.
            quiet = _db(loudest_far) <= PLAYING
            if quiet or (over is not None and over >= USER_DOMINANT):
                return mic[: len(samples)]
            return out[: len(samples)]

    def _over_echo(self, near_energy: float, loudest_far: float) -> float | None:
        """How many dB the microphone was louder than the echo expected of what the
        speakers just played; None if they played nothing, or the room is not learnt."""
        if self._echo_return is None or _db(loudest_far) <= PLAYING:
            return None
        return _db(near_energy) - _db(loudest_far) - self._echo_return

    def _judge(self, far: np.ndarray, near: np.ndarray, out: np.ndarray) -> None:
        """Whether AEC3 has adapted yet, and how loud the room returns the speakers, from
        what it made of a frame played aloud."""
        far_energy = float(np.mean(np.square(far, dtype=np.float64)))
        self._far_energy.append(far_energy)
        if _db(far_energy) <= PLAYING:
            return
        self._loud_until = self._near_at + AEC_FRAME / HEARING_RATE
        near_energy = float(np.mean(np.square(near, dtype=np.float64)))
        taken_out = _db(near_energy) - _db(float(np.mean(np.square(out, dtype=np.float64))))
        returned = _db(near_energy) - _db(max(self._far_energy))
        # Not from a frame far louder than the echo learnt so far: AEC3 also takes the
        # onset of the user's speech over a reply out, and learning from that would
        # raise the echo expected until the user is judged echo.
        if taken_out >= SETTLED_ERLE and (
            self._echo_return is None or returned <= self._echo_return + LEARN_SPAN
        ):
            self._returns.append(returned)
            self._learnt += 1
            if len(self._returns) >= ERL_MIN_FRAMES and self._learnt % 10 == 0:
                self._echo_return = float(np.percentile(self._returns, ERL_PERCENTILE))
        if self.converged:
            return
        window = self._window
        window[0] += float(np.sum(np.square(near, dtype=np.float64)))
        window[1] += float(np.sum(np.square(out, dtype=np.float64)))
        window[2] += 1
        if window[2] < WINDOW * 100:
            return
        erle = _db(window[0]) - _db(window[1])
        left = _db(window[1] / (window[2] * AEC_FRAME))
        good = erle >= SETTLED_ERLE or left < INAUDIBLE
        self._good_windows = self._good_windows + 1 if good else 0
        self.converged = self._good_windows >= 2
        if self.converged:
            self.converged_at = self._near_at
            # Until now a reply could not be talked over: say when that changed.
            log.debug("echo canceller converged: replies can be talked over")
        self._window = [0.0, 0.0, 0]

    def _near_end(self) -> float:
        return self._near_at + len(self._near) / HEARING_RATE

    def _take_played(self) -> None:
        while self._played:
            block, at = self._played.popleft()
            if self._resample is not None:
                block = self._resample(block)
            end = None if self._far_at is None else self._far_at + len(self._far) / HEARING_RATE
            if end is None or abs(at - end) > MAX_GAP:  # the first, or a new timeline
                self._far, self._far_at = block, at
                self._far_offsets.clear()
                continue
            shift = _drift(self._far_offsets, at - end)
            if shift > 0:  # a gap: silence played meanwhile
                gap = np.zeros(round(shift * HEARING_RATE), np.float32)
                self._far = np.concatenate([self._far, gap])
            elif shift < 0:  # restarted: what was queued never played
                self._far = self._far[: max(0, len(self._far) + round(shift * HEARING_RATE))]
            self._far = np.concatenate([self._far, block])

    def _far_frame(self, at: float) -> np.ndarray:
        """What the speakers played over the AEC frame from ``at``."""
        frame = np.zeros(AEC_FRAME, np.float32)
        if self._far_at is None:
            return frame
        late = round((at - self._far_at) * HEARING_RATE)
        if late > len(self._far):  # all played before this frame: too old to matter now
            self._far_at += len(self._far) / HEARING_RATE
            self._far = self._far[:0]
            return frame
        if late > 0:
            self._far = self._far[late:]
            self._far_at += late / HEARING_RATE
        lead = round((self._far_at - at) * HEARING_RATE)
        if lead < AEC_FRAME and len(self._far):
            lead = max(0, lead)
            n = min(AEC_FRAME - lead, len(self._far))
            frame[lead : lead + n] = self._far[:n]
            self._far = self._far[n:]
            self._far_at += n / HEARING_RATE
        return frame

    def _frame(self, samples: np.ndarray):  # noqa: ANN202 - rtc.AudioFrame
        pcm = np.clip(samples * 32768, -32768, 32767).astype(np.int16)
        return self._rtc.AudioFrame(pcm.tobytes(), HEARING_RATE, 1, AEC_FRAME)


def _drift(offsets: deque[float], offset: float) -> float:
    """How far to move a stream's sample count, given how far off the latest timestamp
    says it is (``offsets`` keeps the recent ones)."""
    if abs(offset) > MAX_GAP:
        offsets.clear()
        return offset
    offsets.append(offset)
    if len(offsets) < DRIFT_READINGS:
        return 0.0
    shift = statistics.median(offsets)
    if abs(shift) <= JUMP:
        return 0.0
    offsets.clear()
    return shift


def _db(energy: float) -> float:
    return 10.0 * float(np.log10(energy)) if energy > 0 else -200.0
