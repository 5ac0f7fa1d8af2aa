"""Kokoro-82M's voice catalogue and voice specs (single names or blends)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from voicecli.errors import VoiceCliError

# Kokoro-82M v1.0 voices (hexgrad/Kokoro-82M VOICES.md). The first letter is
# the language (KPipeline lang_code), the second the gender.
LANGUAGES = {
    "a": "American English",
    "b": "British English",
    "e": "Spanish",
    "f": "French",
    "h": "Hindi",
    "i": "Italian",
    "j": "Japanese",
    "p": "Brazilian Portuguese",
    "z": "Mandarin Chinese",
}

CATALOGUE = {
    "a": "af_heart af_alloy af_aoede af_bella af_jessica af_kore af_nicole af_nova af_river "
    "af_sarah af_sky am_adam am_echo am_eric am_fenrir am_liam am_michael am_onyx am_puck "
    "am_santa",
    "b": "bf_alice bf_emma bf_isabella bf_lily bm_daniel bm_fable bm_george bm_lewis",
    "e": "ef_dora em_alex em_santa",
    "f": "ff_siwis",
    "h": "hf_alpha hf_beta hm_omega hm_psi",
    "i": "if_sara im_nicola",
    "j": "jf_alpha jf_gongitsune jf_nezumi jf_tebukuro jm_kumo",
    "p": "pf_dora pm_alex pm_santa",
    "z": "zf_xiaobei zf_xiaoni zf_xiaoxiao zf_xiaoyi zm_yunjian zm_yunxi zm_yunxia zm_yunyang",
}

HUB_VOICES = tuple(v for names in CATALOGUE.values() for v in names.split())

# English G2P (misaki) is what voicecli installs; other languages need extras.
INSTALLED_LANGS = ("a", "b")


def gender(voice: str) -> str:
    return {"f": "female", "m": "male"}.get(voice[1:2], "unknown")


def language(voice: str) -> str:
    return LANGUAGES.get(voice[:1], "unknown")


# What a voice name may look like: Kokoro's "af_heart" style. Anything else (a path, a
# dot, a slash) is refused before any file is looked up.
VOICE_NAME = re.compile(r"[a-z]{1,3}_[a-z0-9_]{1,32}")
MAX_BLEND = 8  # voices in one blend


@dataclass(frozen=True)
class VoiceSpec:
    """A voice or a weighted blend, e.g. ``af_heart+am_adam`` or ``af_heart:0.7+am_adam:0.3``.

    Kokoro itself blends with ``,``; both separators are accepted. Weights are relative:
    the spec keeps them normalised to sum to 1, so equal blends compare (and cache) equal.
    """

    parts: tuple[tuple[str, float], ...]

    @classmethod
    def parse(cls, spec: str) -> VoiceSpec:
        raw_parts = [raw.strip() for raw in spec.replace(",", "+").split("+") if raw.strip()]
        if not raw_parts:
            raise VoiceCliError("No voice given. Run `voicecli voices` to list them.")
        if len(raw_parts) > MAX_BLEND:
            raise VoiceCliError(f"A blend has at most {MAX_BLEND} voices.")
        weights: dict[str, float] = {}
        for raw in raw_parts:
            name, _, weight = raw.partition(":")
            name = name.strip()
            if not VOICE_NAME.fullmatch(name):
                raise VoiceCliError(
                    f"Unknown voice {name[:40]!r}: a voice is a name like af_heart. "
                    "Run `voicecli voices` to list them."
                )
            try:
                w = float(weight) if weight else 1.0
            except ValueError:
                raise VoiceCliError(
                    f"Voice weight {weight[:20]!r} is not a number. "
                    "Write blends as af_heart+am_adam or af_heart:0.7+am_adam:0.3."
                ) from None
            if not (math.isfinite(w) and w > 0):
                raise VoiceCliError(f"Voice weight {weight[:20]} must be a positive number.")
            weights[name] = weights.get(name, 0.0) + w
        total = sum(weights.values())
        if not math.isfinite(total):
            raise VoiceCliError("Voice weights are too large.")
        # Rounded, so that 1 and 1.000001 are one blend (and one cached pack) for a server.
        normalised = [(n, round(w / total, 3)) for n, w in weights.items()]
        parts = tuple((n, w) for n, w in normalised if w > 0)
        if not parts:
            raise VoiceCliError("Voice weights are too far apart: every voice would be silent.")
        return cls(parts)

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.parts]

    @property
    def lang_code(self) -> str:
        """The language of the first voice, as KPipeline's lang_code."""
        first = self.names[0]
        return first[0] if first[:1] in LANGUAGES and first[1:2] in "fm" else "a"

    def __str__(self) -> str:
        if len(self.parts) == 1:
            return self.parts[0][0]
        return "+".join(f"{n}:{w:g}" for n, w in self.parts)


def check_voice_name(name: str, voices: list[str]) -> None:
    """A VoiceCliError unless ``name`` is in the model's voice set ``voices``. The message
    names no file: a server relays it to remote clients."""
    if name not in voices:
        raise VoiceCliError(
            f"Unknown voice {name[:40]!r}: this model's voices are "
            f"{', '.join(voices) or 'none'}. Run `voicecli voices` to list them."
        )
