"""Reading back the WAV files voicecli writes (16-bit mono PCM)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from voicecli.protocol import from_pcm16


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples and the sample rate."""
    with wave.open(str(path), "rb") as f:
        assert f.getsampwidth() == 2 and f.getnchannels() == 1, "not voicecli's WAV format"
        return from_pcm16(f.readframes(f.getnframes())), f.getframerate()
