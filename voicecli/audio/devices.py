"""Sound devices through sounddevice (PortAudio): the module itself, and a device named
by the user (an index, a name or part of one) resolved to an index, for output or input."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any, Literal

from voicecli.errors import VoiceCliError

log = logging.getLogger("voicecli.audio.alsa")

NO_DEVICE_HINT = "Use --output FILE.wav to write the audio to a file instead."
NO_INPUT_HINT = "Choose a microphone with --input-device."

Kind = Literal["output", "input"]


def sounddevice_module() -> Any:
    try:
        import sounddevice
    except OSError as exc:  # PortAudio missing: the wheel does not bundle it on Linux
        raise VoiceCliError(
            f"Audio is unavailable: {exc}. Install PortAudio "
            f"(Debian/Ubuntu: apt-get install libportaudio2). {NO_DEVICE_HINT}"
        ) from None
    _alsa_messages_to_the_log()
    return sounddevice


# ALSA's error handler: void (*)(const char *file, int line, const char *function, int err,
# const char *fmt, ...). The arguments after the format are not read.
_ALSA_HANDLER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p
)


def _alsa_message(file: bytes, line: int, function: bytes, err: int, fmt: bytes) -> None:
    log.debug(
        "ALSA %s:%d (%s): %s",
        (file or b"?").decode(errors="replace"),
        line,
        (function or b"?").decode(errors="replace"),
        (fmt or b"").decode(errors="replace"),
    )


_alsa_handler = _ALSA_HANDLER(_alsa_message)  # kept alive: ALSA holds only a pointer


@functools.cache
def _alsa_messages_to_the_log() -> None:
    """ALSA's own lines ("underrun occurred" when the machine is busy) go to voicecli's
    log, not to the user's terminal, where they would land in the middle of the live
    view. They are ALSA noticing what the player counts already (underruns)."""
    name = ctypes.util.find_library("asound")
    if name is None:
        return  # no ALSA: PortAudio reaches the sound another way, and says nothing
    try:
        ctypes.CDLL(name).snd_lib_error_set_handler(_alsa_handler)
    except (OSError, AttributeError) as exc:
        log.debug("ALSA's messages stay on stderr: %s", exc)


def resolve_device(device: str | int | None, kind: Kind = "output") -> int:
    """A sounddevice index from an index, a (partial) name, or None for the default."""
    sd = sounddevice_module()
    hint = NO_DEVICE_HINT if kind == "output" else NO_INPUT_HINT
    try:
        devices = sd.query_devices()
    except Exception as exc:  # noqa: BLE001
        raise VoiceCliError(f"Cannot list audio devices: {exc}. {hint}") from None
    channels = f"max_{kind}_channels"
    usable = [(i, d) for i, d in enumerate(devices) if d[channels] > 0]
    if device is None or device == "":
        try:
            index = sd.default.device[0 if kind == "input" else 1]
        except Exception:  # noqa: BLE001
            index = -1
        if index is None or index < 0:
            if not usable:
                raise VoiceCliError(f"No audio {kind} device found. {hint}")
            return usable[0][0]
        return int(index)
    text = str(device).strip()
    if text.lstrip("-").isdigit():
        index = int(text)
        if not any(i == index for i, _ in usable):
            raise VoiceCliError(
                f"No {kind} device with index {index}. Run `voicecli devices` to list them. {hint}"
            )
        return index
    exact = [i for i, d in usable if d["name"] == text]
    matches = exact or [i for i, d in usable if text.lower() in d["name"].lower()]
    if not matches:
        raise VoiceCliError(
            f"No {kind} device named {text!r}. Run `voicecli devices` to list them. {hint}"
        )
    if len(matches) > 1:
        names = ", ".join(repr(devices[i]["name"]) for i in matches)
        raise VoiceCliError(f"Device {text!r} is ambiguous: {names}. Use its index.")
    return matches[0]
