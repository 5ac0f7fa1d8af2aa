"""Mono float32 from one rate to another, as a stream (FFmpeg's swresample, via PyAV):
the microphone when its device refuses 16 kHz, and the speakers' signal for the echo
canceller."""

from __future__ import annotations

import numpy as np

from voicecli.errors import VoiceCliError


class Resampler:
    def __init__(self, rate: int, to_rate: int, why: str) -> None:
        """``why``: what needs it, for the error when PyAV is missing."""
        try:
            import av
        except ImportError:
            raise VoiceCliError(f"{why} needs PyAV: pip install 'voicecli[listen]'.") from None
        self._av = av
        self.rate = rate
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=to_rate)
        self._pts = 0

    def __call__(self, block: np.ndarray) -> np.ndarray:
        frame = self._av.AudioFrame.from_ndarray(
            np.ascontiguousarray(block, np.float32).reshape(1, -1), format="flt", layout="mono"
        )
        frame.sample_rate = self.rate
        frame.pts = self._pts
        self._pts += len(block)
        out = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)
