"""What ``Speaker.speak_steps`` yields, one forward pass per step: a server serves
another listener between any two, and the local stream turns them into chunks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
