"""The microphone: a sounddevice InputStream whose callback hands hearing frames (16 kHz
mono float32, ``HEARING_FRAME`` samples) to a bounded queue, with each frame's level for a
meter.

PortAudio is asked for 16 kHz first; a device that only takes its own rate is opened at
that rate and resampled with FFmpeg's resampler (PyAV), on the reading thread, never in
the callback.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from voicecli.audio.devices import NO_INPUT_HINT, resolve_device, sounddevice_module
from voicecli.audio.resample import Resampler
from voicecli.errors import VoiceCliError
from voicecli.frames import HEARING_FRAME, HEARING_RATE

log = logging.getLogger(__name__)

# Frames the reader may fall behind before the oldest are dropped (and counted): 10 s.
MAX_BACKLOG = 312
SILENT_DB = -100.0


@dataclass(frozen=True)
class MicFrame:
    samples: np.ndarray  # HEARING_FRAME samples, 16 kHz mono float32
    at: float  # time.monotonic() when its first sample was captured
    level_db: float  # RMS in dBFS


def level_db(samples: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if len(samples) else 0.0
    return max(SILENT_DB, 20.0 * np.log10(rms)) if rms > 0 else SILENT_DB


class Microphone:
    """Opened at once; ``read`` returns frames in order; ``close`` ends the stream."""

    def __init__(self, device: str | int | None = None, *, capture_rate: int | None = None):
        self.device = resolve_device(device, "input")
        self.dropped = 0  # frames lost because the reader fell behind
        self._queue: queue.Queue[tuple[np.ndarray, float]] = queue.Queue(MAX_BACKLOG)
        self._pending = np.zeros(0, np.float32)
        self._at = 0.0  # when the first of the pending samples was captured
        self._closed = threading.Event()
        self._stream, self.capture_rate = self._open(capture_rate)
        try:
            self.name = str(sounddevice_module().query_devices(self.device)["name"])
            self._resampler = (
                None
                if self.capture_rate == HEARING_RATE
                else Resampler(
                    self.capture_rate, HEARING_RATE, f"The microphone at {self.capture_rate} Hz"
                )
            )
        except BaseException:
            self.close()
            raise

    def _open(self, capture_rate: int | None):  # noqa: ANN202
        sd = sounddevice_module()
        rates = [capture_rate] if capture_rate else [HEARING_RATE]
        if not capture_rate:
            try:
                native = int(sd.query_devices(self.device)["default_samplerate"])
            except Exception:  # noqa: BLE001
                native = 0
            if native and native != HEARING_RATE:
                rates.append(native)
        error: Exception | None = None
        for rate in rates:
            try:
                sd.check_input_settings(
                    device=self.device, channels=1, dtype="float32", samplerate=rate
                )
                self.capture_rate = rate  # for the callback, from its first call
                stream = sd.InputStream(
                    samplerate=rate,
                    blocksize=round(HEARING_FRAME * rate / HEARING_RATE),
                    device=self.device,
                    channels=1,
                    dtype="float32",
                    latency="low",
                    callback=self._callback,
                )
                stream.start()
                return stream, rate
            except Exception as exc:  # noqa: BLE001 - PortAudioError, ValueError
                error = exc
        text = str(error).splitlines()[0] if error else "unknown error"
        raise VoiceCliError(
            f"Cannot open the microphone (input device {self.device}): {text}. {NO_INPUT_HINT}"
        )

    def _callback(self, indata, frames, time_info, status) -> None:  # noqa: ANN001
        now = time.monotonic()
        block = indata[:, 0].copy()
        # When the first sample was captured, for the echo canceller to line it up with
        # what the speakers played then: a block before it arrived. (PortAudio's
        # inputBufferAdcTime would say, but through ALSA's pulse plugin it is 0.6 s off.)
        try:
            self._queue.put_nowait((block, now - frames / self.capture_rate))
        except queue.Full:
            self.dropped += 1

    def read(self, timeout: float = 0.5) -> MicFrame | None:
        """The next frame, or None if none came within ``timeout`` (or once closed)."""
        while len(self._pending) < HEARING_FRAME:
            if self._closed.is_set():
                return None
            try:
                block, at = self._queue.get(timeout=timeout)
            except queue.Empty:
                if self._stream is not None and not self._stream.active:
                    raise VoiceCliError(f"The microphone stopped. {NO_INPUT_HINT}") from None
                return None
            if self._resampler is not None:
                block = self._resampler(block)
            if not len(self._pending):
                self._at = at
            self._pending = np.concatenate([self._pending, block])
        samples, self._pending = self._pending[:HEARING_FRAME], self._pending[HEARING_FRAME:]
        at = self._at
        self._at = at + HEARING_FRAME / HEARING_RATE
        return MicFrame(samples, at, level_db(samples))

    def close(self) -> None:
        self._closed.set()
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except Exception as exc:  # noqa: BLE001 - a device already gone
                log.debug("closing the microphone: %r", exc)

    def __enter__(self) -> Microphone:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
