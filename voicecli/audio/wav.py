"""WAV output: float32 inside the pipeline, 16-bit PCM in the file."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from voicecli.errors import VoiceCliError


def to_int16(samples: np.ndarray) -> np.ndarray:
    clipped = np.clip(np.nan_to_num(samples, nan=0.0), -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2")


class WavWriter:
    def __init__(self, path: Path, sample_rate: int) -> None:
        self.path = Path(path)
        try:
            self._file = wave.open(str(self.path), "wb")
        except OSError as exc:
            raise VoiceCliError(f"Cannot write {self.path}: {exc.strerror or exc}.") from None
        self._file.setnchannels(1)
        self._file.setsampwidth(2)
        self._file.setframerate(sample_rate)
        self.frames = 0

    def write(self, samples: np.ndarray) -> None:
        self._file.writeframes(to_int16(samples).tobytes())
        self.frames += len(samples)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples and rate of a 16-bit WAV (the format voicecli writes)."""
    with wave.open(str(path), "rb") as f:
        rate, width, channels = f.getframerate(), f.getsampwidth(), f.getnchannels()
        raw = f.readframes(f.getnframes())
    if width != 2:
        raise VoiceCliError(f"{path} is not 16-bit PCM.")
    data = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1)
    return data, rate
