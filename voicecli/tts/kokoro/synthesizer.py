"""Kokoro-82M on this machine: text to phonemes (misaki, through KPipeline), then the
staged acoustic model (``kokoro_engine``) decoding each sentence whole, or in phrases
when waiting for the whole sentence would leave the listener in silence
(``phrases``)."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicecli.cancel import CancelToken
from voicecli.config import Synthesis, parse_choice
from voicecli.errors import VoiceCliError
from voicecli.frames import (
    SAMPLE_RATE,
    AudioChunk,
    Sentence,
    SynthCapabilities,
    Word,
    check_speed,
    split_words,
)
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts.kokoro import torch_thread
from voicecli.tts.kokoro.files import ModelFiles, VoicePacks, load_g2p, load_kmodel
from voicecli.tts.kokoro.phrases import (
    GENERATOR_FRAME_SAMPLES,
    GENERATOR_FRAME_SECONDS,
    CostModel,
    Cut,
    CutKind,
    PhrasePlan,
    Playhead,
)
from voicecli.tts.kokoro.prior_store import PriorStore
from voicecli.tts.kokoro.stages import (
    CONTEXT,
    CorpusStatistics,
    PartDecoder,
    PooledStatistics,
    PreparedText,
    VoicePrior,
    resolve_precision,
    staged_kokoro,
)
from voicecli.tts.steps import AudioPart, Step, TextStaged
from voicecli.tts.voices import INSTALLED_LANGS, LANGUAGES, VoiceSpec

log = logging.getLogger(__name__)

# Phonemes prepared at once, at most. Kokoro takes 510, but its text stages cannot be
# interrupted and their cost grows with the phonemes: while they run, a server's other
# listeners wait. 150 (about 9 s of speech) leaves ordinary sentences whole and splits
# only the longest (docs/streaming.md).
PREPARE_PHONEMES = 150
# A text that ends at a clause mark was cut there to be spoken sooner (the segmenter's
# first unit, or an overlong sentence split). Kokoro ends it as it ends a sentence, with
# half a second of silence, and starts the next text with its lead-in; a comma's pause
# is this long, counted from where the speech has died away.
CLAUSE_MARKS = frozenset(",;:—")
CLAUSE_PAUSE_FRAMES = 8
WORD_TEXT = re.compile(r"\w")
ENGLISH = ("a", "b")  # the languages whose G2P (misaki's) gives word tokens
# misaki's G2P (spaCy) is not known to be thread-safe; it is also not the model, so a
# server's sessions phonemize while another session's audio is decoded.
_G2P_LOCK = threading.Lock()
# A voice's prior for the norms of a first part (``VoicePrior``): what its layers see
# over these sentences (about 6 s of speech), weighing as much as PRIOR_SECONDS of
# audio: heavier priors keep more of the voice's timbre in a first part spoken cold,
# while the later parts still pool their own speech in (docs/streaming.md).
PRIOR_CORPUS = (
    "Thanks for asking, I will walk you through it step by step.",
    "The museum opens at ten and closes at six on weekdays.",
)
PRIOR_SECONDS = 8.0
PRIORS_KEPT = 16  # voices, as many as VoicePacks keeps


@dataclass(frozen=True)
class PhonemeChunk:
    """Phonemes prepared at once, and the words they say: each word's text and the range
    of its phonemes in ``phonemes`` (none for languages whose G2P gives no words)."""

    phonemes: str
    words: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def split(
        cls, phonemes: str, words: tuple[tuple[str, int, int], ...], limit: int = PREPARE_PHONEMES
    ) -> list[PhonemeChunk]:
        """``split_phonemes``, each piece with the words that begin in it."""
        text = phonemes.strip()
        shift = len(phonemes) - len(phonemes.lstrip())
        chunks = []
        for a, b, marked in _pieces(text, limit):
            mine = tuple(
                (word, s - shift - a, min(e - shift, b) - a)
                for word, s, e in words
                if a <= s - shift < b
            )
            chunks.append(cls(text[a:b] + ("," if marked else ""), mine))
        return chunks


@dataclass(frozen=True)
class _Layout:
    """How one utterance is spoken, in its generator frames: ``zeros`` frames of silence,
    then the frames decoded from ``start`` on, of which those in [``keep``, ``stop``)
    are given out. Parts end at ``pauses`` (or, as windows, anywhere); one ending at
    ``speech_end`` ends the decoding: the frames after it, to ``stop``, are zeros."""

    zeros: int
    start: int
    keep: int
    speech_end: int
    stop: int
    pauses: tuple[int, ...]

    @property
    def frames(self) -> int:
        """Frames given out in all."""
        return self.zeros + self.stop - self.keep


class KokoroSpeaker:
    """Speaks texts one after another to one listener, whose playhead it keeps: a turn
    of ``voicecli chat``, or a connection to ``voicecli serve``."""

    def __init__(
        self, synth: KokoroSynthesizer, plan: PhrasePlan | None = None, *, priors: bool = True
    ) -> None:
        """``plan``: where to cut, if not the shipped plan on the synthesizer's cost
        model, which all its listeners share and teach (a cold warm-up must not teach
        it; the quality bench compares other plans). ``priors``: a cut utterance is
        normalised from its voice's prior, where learnt (the quality bench compares)."""
        self.synth = synth
        self.priors = priors
        self.plan = PhrasePlan(cost=synth.cost) if plan is None else plan
        self.plan.context = 2 * CONTEXT  # what each of this executor's decodes pays for
        self.playhead = Playhead()
        self.fresh = True  # nothing spoken yet: Kokoro's lead-in would only be a wait
        # After a clause cut, the frames of trailing silence it did not get, which the
        # next text's lead-in may take beyond its own; None after a sentence.
        self._slack: int | None = None

    def ahead(self) -> float:
        """Seconds of audio given to the listener and, at 1x, not yet heard."""
        return self.playhead.ahead()

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
        for step in self.speak_steps(self.synth.phonemes(text), cancel, voice, speed):
            match step:
                case AudioPart(samples=samples):
                    yield samples

    def speak_steps(
        self,
        chunks: list[PhonemeChunk],
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[Step]:
        """``speak`` for text already turned into phoneme chunks (``phonemes``), one
        forward pass per step: a chunk's text stages (``TextStaged``), or a part's audio
        (``AudioPart``). A server serves another listener between any two steps, so a
        pass is the longest anyone waits behind this listener."""
        synth = self.synth
        spec = synth.spec if voice is None else VoiceSpec.parse(voice)
        pack = synth.voice if voice is None else synth.packs.get(spec)
        prior = synth.prior(spec) if self.priors else None
        speed = synth.speed if speed is None else check_speed(speed)
        rest = sum(len(c.phonemes) for c in chunks)  # phonemes not yet prepared
        done = 0  # samples of the chunks already spoken
        for chunk in chunks:
            if cancel is not None and cancel.cancelled:
                return
            utt = synth.stages.prepare(chunk.phonemes, pack, speed, synth.precision)
            layout = self._layout(utt)
            rest -= len(chunk.phonemes)
            samples = layout.frames * GENERATOR_FRAME_SAMPLES
            shift = (
                done + (layout.zeros - layout.keep) * GENERATOR_FRAME_SAMPLES
            )  # where frame 0 lies
            yield TextStaged(
                _timed(utt, chunk.words, shift, done, done + samples),
                done + samples + round(rest * samples / len(chunk.phonemes)),
            )
            done += samples
            if layout.zeros:
                yield self._silence(layout.zeros)
            yield from self._decode(utt, layout, prior, cancel)

    def _decode(
        self,
        utt: PreparedText,
        layout: _Layout,
        prior: VoicePrior | None,
        cancel: CancelToken | None,
    ) -> Iterator[AudioPart]:
        """The parts of ``utt`` as the plan cuts them, laid out as ``layout`` says; if it
        is cut, normalised from the voice's ``prior`` on."""
        synth = self.synth
        stats, parts = PooledStatistics(), None
        start = layout.start
        while start < utt.frames:
            if cancel is not None and cancel.cancelled:
                return
            ahead = self.playhead.ahead()
            if synth.mode is Synthesis.SENTENCE:
                cut = Cut(utt.frames, CutKind.END)
            else:
                cut = self.plan.next_cut(
                    start,
                    utt.frames,
                    layout.pauses,
                    ahead=ahead,
                    inside=stats.hold,
                    speech_end=layout.speech_end,
                )
            if parts is None:
                # A first part normalised over little speech strays from the voice's
                # timbre (docs/streaming.md); one pass over all of it is Kokoro's render.
                if cut.kind is not CutKind.END:
                    stats = PooledStatistics(prior)
                parts = PartDecoder(synth.stages, utt, stats, start, synth.precision)
            predicted = self.plan.cost.predict(cut.end - start, 2 * CONTEXT)
            began = time.perf_counter()
            audio = parts.next(cut.end)
            took = time.perf_counter() - began
            log.debug(
                "decoded frames %d-%d of %d (%.2f s, to a %s) in %.2f s (predicted %.2f); "
                "%.2f s was queued",
                start, cut.end, utt.frames, (cut.end - start) * GENERATOR_FRAME_SECONDS,
                cut.kind.value, took, predicted, ahead,
            )  # fmt: skip
            self.plan.cost.observe(cut.end - start, 2 * CONTEXT, took)
            lo, hi = max(start, layout.keep), min(cut.end, layout.stop)
            if hi > lo:
                self.playhead.emit((hi - lo) * GENERATOR_FRAME_SECONDS)
                yield AudioPart(
                    audio[
                        (lo - start) * GENERATOR_FRAME_SAMPLES : (hi - start)
                        * GENERATOR_FRAME_SAMPLES
                    ],
                    cut,
                )
            stats.hold = cut.kind is CutKind.WINDOW  # the next part continues this one
            start = cut.end
            if cut.kind is CutKind.SPEECH_END:
                if layout.stop > start:
                    yield self._silence(layout.stop - start)  # not worth a pass of its own
                return

    def _layout(self, utt: PreparedText) -> _Layout:
        """How ``utt`` is spoken (see ``_Layout``).

        Sentence mode decodes and gives out every frame: the exact reference. Phrases
        mode decodes Kokoro's silences around the speech (its <bos> lead-in and its
        trailing pause, a third of a sentence's frames, and quiet on the real weights)
        wherever the whole utterance fits in one pass, as they are part of what the 48
        norms average over: that pass is then Kokoro's own render, exact. Where it does
        not fit, a part may end where the speech does, and the pause after it is zeros;
        the lead-in is left out of the decode too, as the parts' normalisation is their
        own anyway. At the start of a turn the lead-in is not played: it would only
        delay the first sound. After a text cut at a clause mark the pause is a comma's,
        lengthened (up to the silence Kokoro would have put there) only as much as this
        machine needs to decode the next phrase before the listener runs out of audio,
        with the planner's margin: a pause that the voice plans rather than a stall."""
        fresh, self.fresh = self.fresh, False
        frames = utt.frames
        if self.synth.mode is Synthesis.SENTENCE:
            return _Layout(0, 0, 0, frames, frames, ())
        onset, speech_end = utt.speech()
        pauses = tuple(p for p in utt.pauses() if p < speech_end)
        start = 0 if not fresh and self.plan.fits(frames, self.ahead()) else onset
        if fresh:
            lead = 0
        elif self._slack is None:
            lead = onset
        else:
            ahead = self.ahead()
            cut = self.plan.next_cut(start, frames, pauses, ahead=ahead, speech_end=speech_end)
            wait = self.plan.pause_for(cut.end - start, ahead)
            lead = min(self._slack + onset, math.ceil(wait / GENERATOR_FRAME_SECONDS))
            log.debug(
                "pause after a clause: %d more frames; %.2f s was queued, next part %d frames",
                lead, ahead, cut.end - start,
            )  # fmt: skip
        stop = frames
        self._slack = None
        if utt.phonemes.rstrip()[-1:] in CLAUSE_MARKS:
            stop = min(frames, speech_end + CLAUSE_PAUSE_FRAMES)
            self._slack = frames - stop
        # ``lead`` frames of silence before the onset: Kokoro's own as far as they are
        # decoded, zeros for the rest.
        keep = max(start, onset - lead)
        return _Layout(keep - (onset - lead), start, keep, speech_end, stop, pauses)

    def _silence(self, frames: int) -> AudioPart:
        self.playhead.emit(frames * GENERATOR_FRAME_SECONDS)
        return AudioPart(np.zeros(frames * GENERATOR_FRAME_SAMPLES, np.float32))


def _timed(
    utt: PreparedText, words: tuple[tuple[str, int, int], ...], shift: int, lo: int, hi: int
) -> tuple[Word, ...]:
    """``words`` timed from ``utt``'s durations: the first generator frame of a word's
    first phoneme to the first after its last, plus ``shift`` samples (where the
    utterance's frame 0 lies), kept within [``lo``, ``hi``), the samples given out.

    Unshifted: on the real weights a word after a pause becomes audible within two
    frames of where its durations say. (KPipeline's timestamps start 3 alignment frames
    earlier still.)"""
    in_vocab = np.cumsum([0, *(p in utt.vocab for p in utt.phonemes)])  # tokens before char i
    frame = 2 * np.concatenate([[0], np.cumsum(utt.durations)])  # where token k's frames start
    timed = []
    for text, a, b in words:
        first, after = int(in_vocab[a]) + 1, int(in_vocab[b]) + 1  # <bos> is token 0
        if after <= first or after >= len(frame):
            continue  # no phoneme the model saw
        start, end = (
            min(hi, max(lo, shift + int(frame[k]) * GENERATOR_FRAME_SAMPLES))
            for k in (first, after)
        )
        timed.append(Word(text, start, end))
    return tuple(timed)


def split_phonemes(phonemes: str, limit: int = PREPARE_PHONEMES) -> list[str]:
    """``phonemes`` in pieces of at most ``limit``: after the last clause mark in the
    second half of the limit, else at the last word break, marked with a comma so that
    the model says it as a clause and the pause after it is a comma's."""
    text = phonemes.strip()
    return [text[a:b] + ("," if marked else "") for a, b, marked in _pieces(text, limit)]


def _pieces(text: str, limit: int) -> list[tuple[int, int, bool]]:
    """``split_phonemes`` as ranges of ``text``: (start, end, whether a comma is added)."""
    pieces = []
    at = 0
    while len(text) - at > limit:
        window = text[at : at + limit + 1]
        cut = max(window.rfind(mark, 0, limit) for mark in CLAUSE_MARKS) + 1
        marked = cut <= limit // 2
        if marked:
            cut = window.rfind(" ")
            if cut <= 0:
                cut = limit - 1  # one giant word: no better place
        pieces.append(_stripped(text, at, at + cut, marked))
        at += cut
        while at < len(text) and text[at].isspace():
            at += 1
    if at < len(text):
        pieces.append(_stripped(text, at, len(text), False))
    return pieces


def _stripped(text: str, start: int, end: int, marked: bool) -> tuple[int, int, bool]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end, marked


def _word_ranges(phonemes: str, tokens: list[Any] | None) -> tuple[tuple[str, int, int], ...]:
    """Each word of misaki's ``tokens`` with the range of its phonemes in ``phonemes``
    (which KPipeline joined from them). Punctuation has phonemes too, but is no word.
    None at all when there are no tokens (languages other than English) or they do not
    add up to ``phonemes``: no timings rather than wrong ones."""
    if not tokens:
        return ()
    joined = ""
    words = []
    for token in tokens:
        sound = token.phonemes or ""
        if sound and WORD_TEXT.search(token.text):
            words.append((token.text, len(joined), len(joined) + len(sound)))
        joined += sound + (" " if token.whitespace else "")
    lead = len(joined) - len(joined.lstrip())
    if joined.strip() != phonemes:
        return ()
    return tuple((text, a - lead, b - lead) for text, a, b in words)


class KokoroSynthesizer:
    """Kokoro on this machine. Thread-safe; one forward pass at a time per process."""

    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        *,
        voice: str,
        speed: float = 1.0,
        lang: str | None = None,
        model_dir: Path | None = None,
        mode: str = "phrases",
        threads: int | None = None,
        precision: str = "auto",
    ) -> None:
        self.mode = parse_choice(Synthesis, mode, "Synthesis mode")
        self.precision = resolve_precision(precision)
        self.speed = check_speed(speed)
        self.spec = VoiceSpec.parse(voice)
        self.lang = (lang or self.spec.lang_code).lower()
        if self.lang not in LANGUAGES:
            raise VoiceCliError(
                f"Unknown language {self.lang!r}: use one of {', '.join(LANGUAGES)}."
            )
        if self.lang not in INSTALLED_LANGS:
            log.warning("language %s needs misaki extras beyond English", self.lang)
        # For all of voicecli's torch work, which runs on that one thread.
        torch_thread.configure(threads)
        self.files = ModelFiles.resolve(model_dir)
        self.packs = VoicePacks(self.files)
        self.voice = self.packs.get(self.spec)
        self.stages = staged_kokoro(load_kmodel(self.files))
        self.g2p = load_g2p(self.lang)
        # misaki gives word tokens for English only: other languages' heard text and
        # captions are estimated from characters.
        self.capabilities = SynthCapabilities(
            streams_within_sentence=True, word_timings=self.lang in ENGLISH
        )
        # Shared by every KokoroSpeaker: the machine's speed is the same for all listeners.
        self.cost = CostModel()
        # By voice spec, once learnt or looked for on disk (None: not there), so that a
        # sentence's synthesis does not look for it again.
        self._priors: dict[str, VoicePrior | None] = {}
        self._priors_lock = threading.Lock()
        weights = self.files.weights.stat()
        self._prior_store = PriorStore(
            {
                "weights": str(self.files.weights.resolve()),
                "size": weights.st_size,
                "mtime_ns": weights.st_mtime_ns,
                "voices": self.files.source,
                "lang": self.lang,  # the corpus's phonemes
                "precision": self.precision,
                "corpus": PRIOR_CORPUS,
                "seconds": PRIOR_SECONDS,
            },
            norms=self.stages.norms,
        )

    def phonemes(self, text: str) -> list[PhonemeChunk]:
        """The phoneme chunks for ``text``, each at most ``PREPARE_PHONEMES`` long."""
        with _G2P_LOCK:
            results = [
                (r.phonemes, _word_ranges(r.phonemes, r.tokens))
                for r in self.g2p(text, split_pattern=None)
                if r.phonemes
            ]
        return [
            chunk for phonemes, words in results for chunk in PhonemeChunk.split(phonemes, words)
        ]

    def speaker(self) -> KokoroSpeaker:
        return KokoroSpeaker(self)

    def voices(self) -> list[str]:
        return self.files.available_voices()

    def set_voice(self, voice: str) -> None:
        spec = VoiceSpec.parse(voice)
        self.voice = self.packs.get(spec)
        self.spec = spec
        self.learn_voice(spec)  # between turns, not at the next one's first sound

    def set_speed(self, speed: float) -> None:
        self.speed = check_speed(speed)

    def warm_up(self) -> None:
        for _ in self.warm_up_steps():
            pass

    def warm_up_steps(self) -> Iterator[None]:
        """``warm_up`` one forward pass at a time (a server serves clients between)."""
        # A process's first forward passes are slower than later ones (a third, for this
        # text): they pay that here, and teach the cost model nothing. The second time,
        # it learns this machine's speed, which decides whether a first turn starts with
        # a window. Then the voice's prior, which its first parts are normalised from.
        for cost in (CostModel(), self.cost):
            for _ in KokoroSpeaker(self, PhrasePlan(cost=cost)).speak("Hello there."):
                yield
        yield from self._learning(self.spec)

    def prior(self, spec: VoiceSpec) -> VoicePrior | None:
        """The voice's prior, if learnt (``learn_voice``, here, or by an earlier process
        on this machine before this one first looked): without it a first part is
        normalised over its own speech alone."""
        key = str(spec)
        with self._priors_lock:
            if key in self._priors:
                return self._priors[key]
        stored = self._prior_store.load(key)
        self._keep(key, stored)
        return stored

    def _keep(self, key: str, prior: VoicePrior | None) -> None:
        with self._priors_lock:
            if key not in self._priors and len(self._priors) >= PRIORS_KEPT:
                self._priors.pop(next(iter(self._priors)))
            self._priors[key] = prior

    def learn_voice(self, spec: VoiceSpec) -> None:
        """Learn the voice's prior (a few seconds of decoding; once per voice and
        machine, kept on disk): warm-ups do, so that it never delays a first sound."""
        for _ in self._learning(spec):
            pass

    def _learning(self, spec: VoiceSpec) -> Iterator[None]:
        """``learn_voice``, one forward pass at a time."""
        if self.prior(spec) is not None:
            return
        pack = self.packs.get(spec)
        corpus = CorpusStatistics()
        for text in PRIOR_CORPUS:
            for chunk in self.phonemes(text):
                utt = self.stages.prepare(chunk.phonemes, pack, 1.0, self.precision)
                yield
                audio = self.stages.decode(utt, 0, utt.frames, corpus, precision=self.precision)
                corpus.samples += len(audio)
                yield
        prior = corpus.prior(PRIOR_SECONDS)
        self._keep(str(spec), prior)
        self._prior_store.save(str(spec), prior)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "local-kokoro",
            "model_source": self.files.source,
            "lang": self.lang,
            "voice": str(self.spec),
            "synthesis": self.mode,
            "precision": self.precision,
            "threads": torch_thread.run(torch.get_num_threads),
        }

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        speaker = self.speaker()  # one listener for the whole turn
        for sentence in sentences:
            if cancel.cancelled:
                return
            if sentence.index > 0 and speaker.fresh:
                # A turn begun elsewhere (a resident engine that died): its lead-ins go on
                # as they would have, so that the sentence in progress resumes at its sample.
                speaker.fresh = False
            timeline.mark(SYNTH_START, sentence.index)
            offset = 0
            words: list[Word] = []  # timed, and not yet in a chunk
            expected: int | None = None
            for step in speaker.speak_steps(self.phonemes(sentence.text), cancel):
                match step:
                    case TextStaged():
                        words.extend(step.words)
                        expected = step.expected_samples
                    case AudioPart(samples=samples):
                        if offset == 0:
                            timeline.mark(SYNTH_FIRST_CHUNK, sentence.index)
                        end = offset + len(samples)
                        mine, words = split_words(words, end)
                        yield AudioChunk(
                            sentence.index, samples, offset, length=expected, words=mine
                        )
                        offset = end
            if cancel.cancelled:
                return
            timeline.mark(SYNTH_END, sentence.index)
            empty = np.zeros(0, np.float32)
            yield AudioChunk(sentence.index, empty, offset, last=True, words=tuple(words))

    def close(self) -> None:
        """Nothing to release: the model is shared per process and freed at exit."""
