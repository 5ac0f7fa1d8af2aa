"""Kokoro-82M on this machine: text to phonemes (misaki, through KPipeline), then the
staged acoustic model (``kokoro_engine``) decoding each sentence whole, or in phrases
when waiting for the whole sentence would leave the listener in silence
(``phrases``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import SAMPLE_RATE, AudioChunk, Sentence, SynthCapabilities, check_speed
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts.kokoro_engine import (
    CONTEXT,
    FRAME_SAMPLES,
    PartDecoder,
    Statistics,
    engine_for,
)
from voicecli.tts.kokoro_files import ModelFiles, VoicePacks, load_g2p, load_kmodel
from voicecli.tts.phrases import FRAME_SECONDS, CostModel, PhrasePlan
from voicecli.tts.voices import INSTALLED_LANGS, LANGUAGES, VoiceSpec

log = logging.getLogger(__name__)

SYNTHESIS_MODES = ("phrases", "sentence")
MAX_PHONEMES = 510  # Kokoro's context, less <bos> and <eos>
# misaki's G2P (spaCy) is not known to be thread-safe; it is also not the model, so a
# server's sessions phonemize while another session's audio is decoded.
_G2P_LOCK = threading.Lock()


class Speaker:
    """Speaks texts one after another to one listener, whose playhead it keeps: a turn
    of ``voicecli chat``, or a connection to ``voicecli serve``."""

    def __init__(self, synth: KokoroSynthesizer) -> None:
        self.synth = synth
        self.plan = PhrasePlan(cost=synth.cost, context=2 * CONTEXT)
        self._fresh = True  # nothing spoken yet: Kokoro's leading silence is only a wait
        # Samples the text being spoken will have in all: exact once its last phoneme
        # chunk is prepared, estimated from the phoneme count before. The listener's
        # heard text needs it while a sentence's last part is still being decoded.
        self.expected_samples: int | None = None

    def ahead(self) -> float:
        """Seconds of audio given to the listener and, at 1x, not yet heard."""
        return self.plan.playhead.ahead()

    def limit_parts(self, seconds: float | None) -> None:
        """Take at most about ``seconds`` to decode each next part, where a pause allows
        it (a server sets it while other clients wait); None lifts the limit."""
        self.plan.max_seconds = seconds

    def speak(
        self,
        text: str,
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[np.ndarray]:
        """Audio for ``text`` as it is decoded; stops at the next part once cancelled.

        ``voice`` (a spec such as ``af_heart+am_adam``) and ``speed`` override the
        synthesizer's for this text only (a server's per-request voices).
        """
        yield from self.speak_phonemes(self.synth.phonemes(text), cancel, voice, speed)

    def speak_phonemes(
        self,
        chunks: list[str],
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[np.ndarray]:
        """``speak`` for text already turned into phoneme chunks (``phonemes``)."""
        synth = self.synth
        pack = synth.voice if voice is None else synth.packs.get(VoiceSpec.parse(voice))
        speed = synth.speed if speed is None else check_speed(speed)
        rest = sum(len(c) for c in chunks)  # phonemes not yet prepared
        done = 0  # samples of the chunks already spoken
        for phonemes in chunks:
            if cancel is not None and cancel.cancelled:
                return
            began = time.perf_counter()
            utt = synth.engine.prepare(phonemes, pack, speed)
            synth.cost.observe_prepare(time.perf_counter() - began)
            pauses = utt.pauses() if synth.mode == "phrases" else []
            start = utt.onset() if self._fresh and synth.mode == "phrases" else 0
            self._fresh = False
            rest -= len(phonemes)
            samples = (utt.frames - start) * FRAME_SAMPLES
            self.expected_samples = done + samples + round(rest * samples / len(phonemes))
            done += samples
            parts = PartDecoder(synth.engine, utt, Statistics("pooled"), start)
            while start < utt.frames:
                if cancel is not None and cancel.cancelled:
                    return
                end = self.plan.next_end(start, utt.frames, pauses)
                ahead = self.plan.playhead.ahead()
                began = time.perf_counter()
                audio = parts.next(end)
                took = time.perf_counter() - began
                log.debug(
                    "decoded frames %d-%d of %d (%.2f s of audio) in %.2f s; %.2f s was queued",
                    start, end, utt.frames, (end - start) * FRAME_SECONDS, took, ahead,
                )  # fmt: skip
                synth.cost.observe(end - start, 2 * CONTEXT, took)
                self.plan.playhead.emit((end - start) * FRAME_SECONDS)
                yield audio
                start = end


class KokoroSynthesizer:
    """Kokoro on this machine. Thread-safe; one forward pass at a time per process."""

    sample_rate = SAMPLE_RATE
    capabilities = SynthCapabilities(streams_within_sentence=True)

    def __init__(
        self,
        *,
        voice: str,
        speed: float = 1.0,
        lang: str | None = None,
        model_dir: Path | None = None,
        mode: str = "phrases",
        threads: int | None = None,
    ) -> None:
        if mode not in SYNTHESIS_MODES:
            raise VoiceCliError(f"Synthesis mode {mode!r}: use {' or '.join(SYNTHESIS_MODES)}.")
        self.mode = mode
        self.speed = check_speed(speed)
        self.spec = VoiceSpec.parse(voice)
        self.lang = (lang or self.spec.lang_code).lower()
        if self.lang not in LANGUAGES:
            raise VoiceCliError(
                f"Unknown language {self.lang!r}: use one of {', '.join(LANGUAGES)}."
            )
        if self.lang not in INSTALLED_LANGS:
            log.warning("language %s needs misaki extras beyond English", self.lang)
        if threads is not None:
            # Process-wide: with the embedded LLM on the same cores, fewer can be faster.
            torch.set_num_threads(threads)
        self.files = ModelFiles.resolve(model_dir)
        self.packs = VoicePacks(self.files)
        self.voice = self.packs.get(self.spec)
        self.engine = engine_for(load_kmodel(self.files))
        self.g2p = load_g2p(self.lang)
        # Shared by every Speaker: the machine's speed is the same for all listeners.
        self.cost = CostModel()

    def phonemes(self, text: str) -> list[str]:
        """Kokoro's phoneme chunks for ``text`` (each at most 510 phonemes)."""
        with _G2P_LOCK:
            return [
                r.phonemes[:MAX_PHONEMES] for r in self.g2p(text, split_pattern=None) if r.phonemes
            ]

    def speaker(self) -> Speaker:
        return Speaker(self)

    def set_voice(self, voice: str) -> None:
        spec = VoiceSpec.parse(voice)
        self.voice = self.packs.get(spec)
        self.spec = spec

    def set_speed(self, speed: float) -> None:
        self.speed = check_speed(speed)

    def warm_up(self) -> None:
        # A process's first forward pass is several hundred ms slower than later ones,
        # and the cost model learns this machine's speed.
        for _ in self.speaker().speak("Hello there."):
            pass

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "local-kokoro",
            "model_source": self.files.source,
            "lang": self.lang,
            "voice": str(self.spec),
            "synthesis": self.mode,
            "threads": torch.get_num_threads(),
        }

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        speaker = self.speaker()  # one listener for the whole turn
        for sentence in sentences:
            if cancel.cancelled:
                return
            timeline.mark(SYNTH_START, sentence.index)
            offset = 0
            for samples in speaker.speak(sentence.text, cancel):
                if offset == 0:
                    timeline.mark(SYNTH_FIRST_CHUNK, sentence.index)
                yield AudioChunk(sentence.index, samples, offset, length=speaker.expected_samples)
                offset += len(samples)
            if cancel.cancelled:
                return
            timeline.mark(SYNTH_END, sentence.index)
            yield AudioChunk(sentence.index, np.zeros(0, np.float32), offset, last=True)

    def close(self) -> None:
        """Nothing to release: the model is shared per process and freed at exit."""
