"""The synthesizer that the settings ask for: a remote endpoint, or local Kokoro.

Each backend is imported only when chosen: local Kokoro imports torch, which takes
seconds and which a remote-only client does not need.
"""

from __future__ import annotations

from voicecli.config import Settings
from voicecli.frames import Synthesizer


def make_synthesizer(settings: Settings) -> Synthesizer:
    if settings.sagemaker_endpoint:
        from voicecli.tts.sagemaker import SageMakerSynthesizer

        # With an endpoint name, an http(s) --endpoint-url overrides the AWS runtime URL.
        url = settings.endpoint_url
        return SageMakerSynthesizer(
            settings.sagemaker_endpoint,
            region=settings.region,
            voice=settings.voice,
            speed=settings.speed,
            endpoint_url=url if url and url.startswith(("http://", "https://")) else None,
            api=settings.sagemaker_api,
        )
    if settings.endpoint_url:
        from voicecli.tts.remote import WebSocketSynthesizer

        return WebSocketSynthesizer(
            settings.endpoint_url, voice=settings.voice, speed=settings.speed
        )
    from voicecli.tts.kokoro_local import KokoroSynthesizer

    return KokoroSynthesizer(
        voice=settings.voice,
        speed=settings.speed,
        lang=settings.lang,
        model_dir=settings.model_dir,
        mode=settings.synthesis,
        threads=settings.synth_threads,
        precision=settings.synth_precision,
    )
