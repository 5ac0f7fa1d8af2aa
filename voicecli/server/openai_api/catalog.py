"""The names OpenAI's clients send, and what voicecli answers them with: the speech and
transcription models they may name, OpenAI's voices as Kokoro voices, and the lists of
both (``GET /v1/models``, and ``/v1/audio/models`` and ``/v1/audio/voices`` in the shape
Open WebUI reads from a speech server that is not OpenAI's)."""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voicecli.server.openai_api.api_error import NOT_FOUND, APIError

log = logging.getLogger(__name__)

SPEECH_MODEL = "kokoro"
# Names clients hard-code: each is Kokoro-82M here.
SPEECH_MODELS = (SPEECH_MODEL, "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
TRANSCRIPTION_MODEL = "whisper"
# ...and each of these is the configured faster-whisper model (asr_model).
TRANSCRIPTION_MODELS = (
    TRANSCRIPTION_MODEL,
    "whisper-1",
    "gpt-4o-transcribe",
    "gpt-4o-mini-transcribe",
)
_CREATED = int(time.mktime((2026, 1, 1, 0, 0, 0, 0, 0, -1)))

# OpenAI's voices as Kokoro's, each close in character (docs/openai-api.md lists them).
OPENAI_VOICES = {
    "alloy": "af_alloy",
    "ash": "am_adam",
    "ballad": "bm_george",
    "coral": "af_bella",
    "echo": "am_echo",
    "fable": "bm_fable",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_sarah",
    "shimmer": "af_nicole",
    "verse": "am_michael",
    "marin": "af_heart",
    "cedar": "am_liam",
}


def speech_model(name: object) -> str:
    """``model`` of a speech request, checked."""
    if name is None:
        return SPEECH_MODEL
    if not isinstance(name, str) or name.lower() not in SPEECH_MODELS:
        raise APIError(
            404,
            f"The model {str(name)[:60]!r} does not exist here: voicecli speaks with Kokoro-82M "
            f"under the names {', '.join(SPEECH_MODELS)}.",
            NOT_FOUND,
            "model",
            "model_not_found",
        )
    return name


def transcription_model(name: object) -> str:
    if not isinstance(name, str) or name.lower() not in TRANSCRIPTION_MODELS:
        raise APIError(
            404,
            f"The model {str(name)[:60]!r} does not exist here: voicecli transcribes with "
            f"Whisper under the names {', '.join(TRANSCRIPTION_MODELS)}.",
            NOT_FOUND,
            "model",
            "model_not_found",
        )
    return name


def kokoro_voice(name: str, installed: list[str], default: str) -> str:
    """The Kokoro voice (or blend) an OpenAI voice name stands for. One that maps to a
    voice this model lacks is spoken with the configured voice, and the log says so."""
    mapped = OPENAI_VOICES.get(name.lower())
    if mapped is None:
        return name
    if mapped in installed:
        return mapped
    log.info("voice %r is Kokoro's %s, which this model lacks: using %s", name, mapped, default)
    return default


def voice_list(installed: list[str], default: str) -> list[dict[str, str]]:
    """Every voice a request may name: the model's own, then OpenAI's, each named for the
    Kokoro voice it speaks as."""
    kokoro = [{"id": name, "name": name} for name in installed]
    openai = [
        {"id": name, "name": f"{name} ({kokoro_voice(name, installed, default)})"}
        for name in OPENAI_VOICES
    ]
    return kokoro + openai


async def list_speech_models(request: Request) -> Response:
    return JSONResponse({"models": [{"id": name, "name": name} for name in SPEECH_MODELS]})


async def list_models(request: Request) -> Response:
    names = [*SPEECH_MODELS, *TRANSCRIPTION_MODELS]
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": _CREATED, "owned_by": "voicecli"}
                for name in names
            ],
        }
    )
