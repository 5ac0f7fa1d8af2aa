"""WAV output: float32 inside the pipeline, 16-bit PCM in the file."""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np

from voicecli.errors import VoiceCliError
from voicecli.protocol import to_pcm16


def check_writable(path: Path) -> None:
    """Fail now, before a model loads, if ``path`` cannot become a file."""
    path = Path(path)
    if path.is_dir():
        raise VoiceCliError(f"Cannot write {path}: it is a directory.")
    parent = path.parent
    if not parent.is_dir():
        raise VoiceCliError(f"Cannot write {path}: the directory {parent} does not exist.")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise VoiceCliError(f"Cannot write {path}: permission denied.")


class WavWriter:
    def __init__(self, path: Path, sample_rate: int) -> None:
        self.path = Path(path)
        self.frames = 0
        try:
            # Opened here, not by wave: a failure leaves no half-made Wave_write behind.
            self._raw = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise self._error(exc) from None
        self._file: wave.Wave_write | None = wave.open(self._raw, "wb")
        self._file.setnchannels(1)
        self._file.setsampwidth(2)
        self._file.setframerate(sample_rate)

    def _error(self, exc: OSError) -> VoiceCliError:
        return VoiceCliError(f"Cannot write {self.path}: {exc.strerror or exc}.")

    def write(self, samples: np.ndarray) -> None:
        if self._file is None:
            return
        try:
            self._file.writeframes(to_pcm16(samples))
            self._raw.flush()  # a full disk shows now, not at close
        except OSError as exc:
            self._abandon()
            raise self._error(exc) from None
        self.frames += len(samples)

    def close(self) -> None:
        if self._file is None:
            return
        try:
            self._file.close()  # writes the final header
            self._raw.close()
        except OSError as exc:
            self._abandon()
            raise self._error(exc) from None
        self._file = None

    def _abandon(self) -> None:
        file, self._file = self._file, None
        for closing in (file.close if file is not None else None, self._raw.close):
            try:
                if closing is not None:
                    closing()
            except OSError:
                pass
