"""Synthesizers turn a stream of sentences into a stream of audio chunks.

Every backend (local Kokoro, a remote WebSocket or SageMaker endpoint) takes
an *iterator* of sentences rather than one sentence per call, so a remote
backend can send sentence N+1 while the audio of sentence N is still coming
back: no lockstep.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voicecli.cancel import CancelToken
from voicecli.timeline import Timeline

SAMPLE_RATE = 24_000  # Kokoro's native rate; audio stays at this rate inside the pipeline


@dataclass(frozen=True)
class Sentence:
    index: int  # position in the turn, from 0
    text: str  # what is spoken (normalized)
    display: str = ""  # what was shown to the user


@dataclass(frozen=True)
class AudioChunk:
    sentence: int  # Sentence.index this audio belongs to
    samples: np.ndarray  # float32 mono at the synthesizer's sample rate
    last: bool = False  # the final chunk of that sentence


class Synthesizer(Protocol):
    sample_rate: int

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        """Yield audio for each sentence, in order, as soon as it exists.

        Implementations mark SYNTH_START, SYNTH_FIRST_CHUNK and SYNTH_END on
        ``timeline``, stop at the next chunk once ``cancel`` is set, and raise
        ``VoiceCliError`` for failures users can fix.
        """
        ...

    def close(self) -> None: ...


def make_synthesizer(settings) -> Synthesizer:
    """The backend that the settings ask for: a remote endpoint, or local Kokoro."""
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
        )
    if settings.endpoint_url:
        from voicecli.tts.remote import WebSocketSynthesizer

        return WebSocketSynthesizer(
            settings.endpoint_url, voice=settings.voice, speed=settings.speed
        )
    from voicecli.tts.kokoro_local import KokoroSynthesizer

    return KokoroSynthesizer(
        voice=settings.voice, speed=settings.speed, lang=settings.lang, model_dir=settings.model_dir
    )
