"""Sound devices through sounddevice (PortAudio): the module itself, and a device named
by the user (an index, a name or part of one) resolved to an index, for output or input."""

from __future__ import annotations

from typing import Any, Literal

from voicecli.errors import VoiceCliError

NO_DEVICE_HINT = "Use --output FILE.wav to write the audio to a file instead."
NO_INPUT_HINT = "Type instead, or choose a microphone with --input-device."

Kind = Literal["output", "input"]


def sounddevice_module() -> Any:
    try:
        import sounddevice
    except OSError as exc:  # PortAudio missing: the wheel does not bundle it on Linux
        raise VoiceCliError(
            f"Audio is unavailable: {exc}. Install PortAudio "
            f"(Debian/Ubuntu: apt-get install libportaudio2). {NO_DEVICE_HINT}"
        ) from None
    return sounddevice


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
