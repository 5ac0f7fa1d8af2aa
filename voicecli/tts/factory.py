"""The synthesizer that the settings ask for: a remote endpoint, or local Kokoro."""

from __future__ import annotations

from voicecli.config import Settings
from voicecli.frames import Synthesizer
from voicecli.tts.kokoro_local import KokoroSynthesizer
from voicecli.tts.remote import WebSocketSynthesizer
from voicecli.tts.sagemaker import SageMakerSynthesizer


def make_synthesizer(settings: Settings) -> Synthesizer:
    if settings.sagemaker_endpoint:
        # With an endpoint name, an http(s) --endpoint-url overrides the AWS runtime URL.
        url = settings.endpoint_url
        return SageMakerSynthesizer(
            settings.sagemaker_endpoint,
            region=settings.region,
            voice=settings.voice,
            speed=settings.speed,
            endpoint_url=url if url and url.startswith(("http://", "https://")) else None,
        )
    if settings.endpoint_url:
        return WebSocketSynthesizer(
            settings.endpoint_url, voice=settings.voice, speed=settings.speed
        )
    return KokoroSynthesizer(
        voice=settings.voice,
        speed=settings.speed,
        lang=settings.lang,
        model_dir=settings.model_dir,
        mode=settings.synthesis,
        threads=settings.synth_threads,
    )
