"""OpenAI's audio API on voicecli's servers (``serve``, and the engine with ``--http``):
``POST /v1/audio/speech``, ``POST /v1/audio/transcriptions``, ``GET /v1/models``,
``GET /v1/audio/models`` and ``GET /v1/audio/voices``, each a thin adapter over the
scheduler (speech) or the configured Whisper (transcriptions). docs/openai-api.md sets
them beside OpenAI's, Kokoro-FastAPI's and speaches'."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from voicecli.config import Settings
from voicecli.server.openai_api.catalog import list_models, list_speech_models, voice_list
from voicecli.server.openai_api.speech_route import speech_route
from voicecli.server.openai_api.transcription_route import (
    Hearing,
    TranscriptionOptions,
    transcriptions_route,
)
from voicecli.server.scheduler import Scheduler


@dataclass(frozen=True)
class AudioAPI:
    """What the API needs beyond the scheduler: the voice for OpenAI names this model
    lacks, and the Whisper model and its bound."""

    default_voice: str
    transcription: TranscriptionOptions

    @classmethod
    def of(cls, settings: Settings) -> AudioAPI:
        return cls(
            settings.voice,
            TranscriptionOptions(settings.asr_model, settings.max_transcribe_seconds),
        )

    def routes(self, scheduler: Scheduler) -> list[BaseRoute]:
        hearing = Hearing(self.transcription)

        async def voices(request: Request) -> Response:
            installed = scheduler.model.voices() if scheduler.model is not None else []
            return JSONResponse({"voices": voice_list(installed, self.default_voice)})

        speech = speech_route(scheduler, self.default_voice)
        return [
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/v1/audio/transcriptions", transcriptions_route(hearing), methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/audio/models", list_speech_models, methods=["GET"]),
            Route("/v1/audio/voices", voices, methods=["GET"]),
        ]
