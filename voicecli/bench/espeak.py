"""Speech from eSpeak NG, a formant synthesizer unlike Kokoro: the voice a recognizer is
judged on in ``bench listen`` (its own robotic English, not the assistant's voice).

The library comes from the ``espeakng-loader`` wheel that Kokoro's phonemizer installs,
driven through its C API (``speak_lib.h``) with ctypes: no apt package, no subprocess.
phonemizer loads its own copy of the library, so the two never share eSpeak's global
state.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np

from voicecli.errors import VoiceCliError

# speak_lib.h
_SYNCHRONOUS = 2  # AUDIO_OUTPUT_SYNCHRONOUS: espeak_Synth returns when the text is spoken
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class Espeak:
    """One eSpeak NG voice. eSpeak keeps its state in globals: one synthesis at a time,
    and each comes out a little different after another (even across a new start)."""

    _lock = threading.Lock()

    def __init__(self, voice: str = "en-us") -> None:
        try:
            import espeakng_loader
        except ImportError:
            raise VoiceCliError(
                "eSpeak NG speech needs espeakng-loader (Kokoro installs it): "
                "pip install espeakng-loader."
            ) from None
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        data = Path(espeakng_loader.get_data_path()).parent  # the directory holding espeak-ng-data
        self.sample_rate = lib.espeak_Initialize(_SYNCHRONOUS, 0, str(data).encode(), 0)
        if self.sample_rate <= 0:
            raise VoiceCliError(f"eSpeak NG did not start (data in {data}).")
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise VoiceCliError(f"eSpeak NG has no voice {voice!r}.")
        self._lib = lib
        self._chunks: list[np.ndarray] = []
        self._callback = _CALLBACK(self._collect)  # kept: eSpeak holds only the pointer
        lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav: ctypes._Pointer, count: int, events: int) -> int:
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0  # go on

    def speak(self, text: str) -> np.ndarray:
        """``text`` spoken, mono float32 at ``sample_rate``."""
        raw = text.encode()
        with self._lock:
            self._chunks = []
            error = self._lib.espeak_Synth(
                raw, len(raw) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
            )
            chunks, self._chunks = self._chunks, []
        if error != 0 or not chunks:
            raise VoiceCliError(f"eSpeak NG could not speak {text[:40]!r} (error {error}).")
        return np.concatenate(chunks).astype(np.float32) / 32768.0
