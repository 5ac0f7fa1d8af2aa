"""The synthesizer that the settings ask for: a remote endpoint, the resident engine,
or local Kokoro in this process.

Each backend is imported only when chosen: local Kokoro imports torch, which takes
seconds and which a client of a server or of the engine does not need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from voicecli.config import Settings
from voicecli.frames import Synthesizer

if TYPE_CHECKING:
    from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer


def make_synthesizer(
    settings: Settings,
    notify: Callable[[str], None] | None = None,
    wait_for_place: bool = True,
) -> Synthesizer:
    """``notify`` hears what the engine client has to say (it is starting, waiting for
    a place, or it died and the turn goes on in-process); without ``wait_for_place`` a
    busy engine's refusal is the turn's error."""
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
            settings.endpoint_url,
            voice=settings.voice,
            speed=settings.speed,
            key=settings.server_key,
        )
    if settings.engine:
        from voicecli.engine.client import EngineSynthesizer

        return EngineSynthesizer(
            settings, lambda: local_synthesizer(settings), notify, wait_for_place
        )
    return local_synthesizer(settings)


def local_synthesizer(settings: Settings) -> KokoroSynthesizer:
    """Kokoro in this process: the one place it is built from settings."""
    from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer

    return KokoroSynthesizer(
        voice=settings.voice,
        speed=settings.speed,
        lang=settings.lang,
        model_dir=settings.model_dir,
        mode=settings.synthesis,
        threads=settings.synth_threads,
        precision=settings.synth_precision,
    )
