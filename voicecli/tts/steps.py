"""A speech model in steps, as a server's scheduler interleaves it between listeners: what
it must offer (``SpeechModel``, and a ``Speaker`` per listener) and what ``speak_steps``
yields, one forward pass per step: a server serves another listener between any two, and
the local stream turns them into chunks. Kokoro's synthesizer is one."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from voicecli.cancel import CancelToken
from voicecli.frames import Word
from voicecli.tts.kokoro.phrases import Cut


@dataclass(frozen=True)
class TextStaged:
    """A phoneme chunk's text stages have run (they make no audio): its words, timed in
    samples from the start of the text's audio, and how many samples the text will have
    in all (exact once its last chunk is staged, estimated from phonemes before)."""

    words: tuple[Word, ...]
    expected_samples: int


@dataclass(frozen=True)
class AudioPart:
    """Audio for the listener: a decoded part, up to ``cut``, or planned silence (a
    pause's zeros, which no pass decodes: ``cut`` is None)."""

    samples: np.ndarray
    cut: Cut | None = None


Step = TextStaged | AudioPart


class Speaker(Protocol):
    """Speaks to one listener, keeping its playhead across requests."""

    def ahead(self) -> float:
        """Seconds of audio the listener has been given and not yet heard."""
        ...

    def limit_parts(self, seconds: float | None) -> None:
        """Keep each next part's decoding to about ``seconds``, where possible."""
        ...

    def speak_steps(
        self,
        chunks: list[Any],
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Generator[Step, None, None]:
        """One forward pass per step: a chunk's text stages (the words they timed, in
        samples from the first of ``chunks``' audio), or a part's audio. The worker
        serves whoever is due between any two steps."""
        ...


class SpeechModel(Protocol):
    """What the server needs from a synthesizer (KokoroSynthesizer fits)."""

    sample_rate: int

    def phonemes(self, text: str) -> list[Any]:
        """Text to phoneme chunks (for ``speak_steps``); thread-safe, no forward pass."""
        ...

    def speaker(self) -> Speaker: ...

    def voices(self) -> list[str]:
        """The names of its voice set (a request may blend them)."""
        ...

    def warm_up_steps(self) -> Iterator[None]:
        """Pay a process's first, slower forward passes and learn what a first turn
        needs, one pass per step; the server runs them once, when idle, and serves
        whoever arrives between any two, so that it never delays a client long."""
        ...
