"""WAV output: float32 inside the pipeline, 16-bit PCM in the file."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from voicecli.errors import VoiceCliError
from voicecli.protocol import to_pcm16


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
        self._file.writeframes(to_pcm16(samples))
        self.frames += len(samples)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
