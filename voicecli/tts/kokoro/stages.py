"""Kokoro-82M's acoustic model in stages, so that one utterance can be decoded in parts.

``KModel.forward`` runs everything at once. This module runs the same modules of kokoro
0.9.4 (pinned in pyproject; ``check_model`` refuses other layouts) in two steps:

``prepare``
    The text stages over the whole utterance (PL-BERT, durations, F0 and energy, the
    text encoder), the decoder's front blocks, and the harmonic source. The source is
    SineGen's running phase over the whole utterance: it is computed once and sliced,
    because recomputing it per part destroys the waveform.
``decode(utterance, start, end)``
    The generator (80-90% of the compute) over a range of its input frames, with
    ``CONTEXT`` frames on each side so that its convolutions see real neighbours.

The decoder's convolutions, its front's and the generator's, may run in bfloat16
(``Precision``): on a CPU that multiplies bfloat16 natively that is faster, and the audio
stays closer to float32's than two float32 renders of Kokoro are to each other. The
generator's last convolution, whose output becomes the magnitudes through ``exp``, stays
float32, because the rounding there alone would cost most of that margin; the text stages
stay float32 too, as their durations are rounded to frames (docs/streaming.md has the
figures).

What stops a part from being exact is the generator's 48 InstanceNorm layers: they
normalise over the time axis of whatever they are given. ``decode`` lets them use
``Statistics``: the whole utterance's (``RecordingStatistics``; exact, but it costs a
whole pass, so it only serves to measure), the part's own, or the part's own pooled with
the parts already decoded (``PooledStatistics``, what the synthesizer uses). On the real
weights, parts normalised over themselves are broken unless they are whole phrases
bounded by silence, which is why ``PreparedText.pauses`` exists: see docs/streaming.md.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from voicecli.config import Precision, parse_choice
from voicecli.errors import VoiceCliError
from voicecli.frames import SAMPLE_RATE
from voicecli.tts.kokoro import torch_thread
from voicecli.tts.kokoro.phrases import GENERATOR_FRAME_SAMPLES

KOKORO_VERSION = "0.9.4"  # the kokoro whose module layout this code follows
SOURCE_COLUMNS = 60  # harmonic-source STFT columns per generator frame (hop 5)
# Generator frames of context on each side of a part: the fewest with which windows on
# the whole utterance's statistics decode to what the whole render is, to well past what
# anyone hears (docs/streaming.md); more only costs decoding.
CONTEXT = 8
SEAM_SAMPLES = 240  # a short crossfade where two parts meet, inside the context they share
# Predicted energy (the N curve, aligned with the audio) below this is silence: at word
# boundaries on the real weights, nearly every frame under it is far below the sentence's
# peak, where a higher bound lets in frames that are still audible (docs/streaming.md).
PAUSE_ENERGY = 0.0
# The durations place a word boundary up to ~10 generator frames before the audio's: the
# decoder's convolutions smear it. The quietest frame is looked for this far around it.
BOUNDARY_SLACK = (4, 12)
WORD_BREAKS = frozenset(" ,;:—….!?")
# Frames the audio takes to die away once the energy falls below silence: after these
# the real weights' output is as quiet as Kokoro's own silences.
SPEECH_DECAY = 6


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16, or AMX), where
    oneDNN's bfloat16 convolutions beat float32 ones; elsewhere they are emulated."""
    cpu = torch.cpu
    try:
        return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())
    except AttributeError:  # these queries are private to torch: an older or newer one
        return False


def resolve_precision(precision: str) -> Precision:
    """``float32`` or ``bfloat16`` for the decoder's convolutions: ``auto`` takes
    bfloat16 where the CPU has it natively."""
    chosen = parse_choice(Precision, precision, "Precision")
    if chosen is Precision.AUTO:
        return Precision.BFLOAT16 if native_bfloat16() else Precision.FLOAT32
    return chosen


@dataclass
class PreparedText:
    """One phoneme chunk after the text stages: everything the generator needs."""

    phonemes: str
    x: Any  # generator input, [1, 512, frames]
    source: Any  # harmonic source, [1, 22, 60 * frames + 1]
    style: Any  # [1, 128]
    energy: np.ndarray  # predicted energy per generator frame
    durations: (
        np.ndarray
    )  # alignment frames (two generator frames) per input token, <bos> and <eos> included
    vocab: dict[str, int] = field(repr=False, default_factory=dict)

    @property
    def frames(self) -> int:
        return int(self.x.shape[-1])

    @property
    def samples(self) -> int:
        return self.frames * GENERATOR_FRAME_SAMPLES

    def pauses(self) -> list[int]:
        """Generator frames where the utterance can be cut between words, in order: near
        each space or punctuation mark, the quietest frame, if it is quiet enough. Never
        inside a word, where a stop or a fricative is quiet too."""
        starts = 2 * np.concatenate([[0], np.cumsum(self.durations)])  # frame of each token
        tokens = self.tokens
        cuts: list[int] = []
        i = 0
        while i < len(tokens):
            if tokens[i] not in WORD_BREAKS:
                i += 1
                continue
            j = i
            while j < len(tokens) and tokens[j] in WORD_BREAKS:
                j += 1  # ", " is one boundary
            lo = max(1, int(starts[i + 1]) - BOUNDARY_SLACK[0])
            hi = min(self.frames - 1, int(starts[j + 1]) + BOUNDARY_SLACK[1])
            if lo < hi and j < len(tokens):  # not the end of the utterance
                cut = lo + int(np.argmin(self.energy[lo:hi]))
                if self.energy[cut] < PAUSE_ENERGY and (not cuts or cut > cuts[-1]):
                    cuts.append(cut)
            i = j
        return cuts

    def onset(self, margin: int = 4) -> int:
        """The generator frame ``margin`` frames before the first phoneme is heard: the
        frames before it, Kokoro's <bos>, are silence. (Like KPipeline's word timestamps,
        the first phoneme starts 3 alignment frames before <bos> ends.)"""
        return max(0, 2 * (int(self.durations[0]) - 3) - margin)

    def speech_end(self, margin: int = SPEECH_DECAY) -> int:
        """The generator frame after which the utterance is silent to the end: ``margin``
        frames past the last frame whose predicted energy is above silence. The whole
        utterance when no frame is (a model whose energy says nothing)."""
        loud = np.flatnonzero(self.energy[: self.frames] >= PAUSE_ENERGY)
        if loud.size == 0:
            return self.frames
        return min(self.frames, int(loud[-1]) + 1 + margin)

    def speech(self) -> tuple[int, int]:
        """The generator frames that are speech, from ``onset`` to ``speech_end``: all
        of them when the energy puts the end before the onset."""
        start, end = self.onset(), self.speech_end()
        return start, end if end > start else self.frames

    @property
    def tokens(self) -> str:
        """The phonemes the model saw (those in its vocabulary), one per duration after
        the leading <bos>."""
        return "".join(p for p in self.phonemes if p in self.vocab)


class Statistics(Protocol):
    """What the generator's InstanceNorm layers normalise with while a part is decoded."""

    def moments(self, index: int, x: Any, core: tuple[float, float]) -> tuple[Any, Any]:
        """The mean and variance that norm layer ``index`` normalises ``x`` with (the
        part lies at ``core`` in ``x``'s frames, as fractions; the rest is context)."""
        ...


class OwnStatistics:
    """Each part normalised over itself and its context, as Kokoro would a text that
    ended there."""

    def moments(self, index: int, x: Any, core: tuple[float, float]) -> tuple[Any, Any]:
        var, mean, _ = _moments_of(x)
        return mean, var


# Per layer: the variance, mean and number of frames of what it normalised.
Moments = tuple[Any, Any, float]


@dataclass(frozen=True)
class VoicePrior:
    """What a voice's norm layers see on average (``CorpusStatistics``), weighing as
    much as ``seconds`` of audio would in a pool."""

    moments: tuple[Moments, ...]
    seconds: float


class PooledStatistics:
    """Each part's own moments pooled with those of the parts decoded before it, so the
    later parts of an utterance come close to its whole-utterance statistics (what the
    synthesizer uses). With a ``prior``, the pool starts from the voice's average, so
    that a first part normalised over little speech is not normalised over that alone.
    While ``hold`` is set, a part normalises with exactly what the part before it did
    (and still adds its moments to the pool): it continues that part with no seam, as
    one decode of both would, so a part may then end anywhere, not only in a pause."""

    def __init__(self, prior: VoicePrior | None = None) -> None:
        self.hold = False
        # Per norm layer, by its index: what it has seen, and what it normalised with.
        self._moments: dict[int, Moments] = dict(enumerate(prior.moments)) if prior else {}
        self._used: dict[int, tuple[Any, Any]] = {}

    def moments(self, index: int, x: Any, core: tuple[float, float]) -> tuple[Any, Any]:
        n = x.shape[-1]
        # Only the part's own frames count for later parts: context frames are theirs.
        lo, hi = round(core[0] * n), round(core[1] * n)
        own = given = _moments_of(x[..., lo:hi])
        for side in (x[..., :lo], x[..., hi:]):  # the context: few frames
            if side.shape[-1]:
                given = _combine(given, _moments_of(side))
        before = self._moments.get(index)
        used = self._used.get(index) if self.hold else None
        if used is None:
            var, mean, _ = given if before is None else _combine(before, given)
            used = self._used[index] = (mean, var)
        self._moments[index] = own if before is None else _combine(before, own)
        return used


class CorpusStatistics(OwnStatistics):
    """Own statistics, pooled over every decode made with it: decode a voice's corpus
    of whole sentences (each normalised as Kokoro would), then take its ``prior``."""

    def __init__(self) -> None:
        self._pool: dict[int, Moments] = {}  # per norm layer, by its index
        self.samples = 0  # of audio decoded, counted by the caller

    def moments(self, index: int, x: Any, core: tuple[float, float]) -> tuple[Any, Any]:
        own = _moments_of(x)
        pool = self._pool.get(index)
        self._pool[index] = own if pool is None else _combine(pool, own)
        return own[1], own[0]

    def prior(self, seconds: float) -> VoicePrior:
        """The corpus's moments, weighing as much as ``seconds`` of audio."""
        if self.samples <= 0 or not self._pool:
            raise ValueError("nothing decoded: decode a corpus with these statistics first")
        scale = seconds * SAMPLE_RATE / self.samples
        pooled = tuple((m[0], m[1], m[2] * scale) for _, m in sorted(self._pool.items()))
        return VoicePrior(pooled, seconds)


class RecordingStatistics(OwnStatistics):
    """Own statistics, kept per layer: decode a whole utterance (or a window) with it,
    then decode parts with ``fixed()``, exactly as that decode normalised (to measure:
    it costs the whole pass)."""

    def __init__(self) -> None:
        self._recorded: dict[int, tuple[Any, Any]] = {}  # per norm layer, by its index

    def moments(self, index: int, x: Any, core: tuple[float, float]) -> tuple[Any, Any]:
        self._recorded[index] = super().moments(index, x, core)
        return self._recorded[index]

    def fixed(self) -> FixedStatistics:
        if not self._recorded:
            raise ValueError("nothing recorded: decode with these statistics first")
        return FixedStatistics(tuple(m for _, m in sorted(self._recorded.items())))


@dataclass(frozen=True)
class FixedStatistics:
    """Given per layer (``RecordingStatistics.fixed``)."""

    per_layer: tuple[tuple[Any, Any], ...]

    def moments(self, index: int, x: Any, core: tuple[float, float]) -> tuple[Any, Any]:
        return self.per_layer[index]


@dataclass
class _PassState:
    """The decode in progress, which the model's replaced layers consult: their
    callers are kokoro's modules, whose calls carry no more than the signal. One per
    model, kept by its replaced layers, so that every engine on that model (one per
    process, through ``staged_kokoro``; more in tests) sets the same state."""

    stats: Statistics | None = None  # None: stock norms
    core: tuple[float, float] = (0.0, 1.0)  # where the part lies in the frames given
    bfloat16: bool = False  # the precision of the decoder's convolutions now


def _moments_of(x: Any) -> tuple[Any, Any, int]:
    """The variance, mean and count of ``x``'s frames, per channel. From the centred
    signal: float32 sums of squares round the variance off, and torch.var is ten times
    slower on the CPU than these two passes."""
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    return (centred * centred).mean(-1, keepdim=True), mean, x.shape[-1]


def _combine(a: tuple[Any, Any, int], b: tuple[Any, Any, int]) -> tuple[Any, Any, int]:
    """The variance, mean and count of two sets of frames from each one's: Chan et al.'s
    pairwise update, which keeps float32's precision where sums of squares lose it."""
    var_a, mean_a, n_a = a
    var_b, mean_b, n_b = b
    n = n_a + n_b
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    var = (var_a * n_a + var_b * n_b + delta * delta * (n_a * n_b / n)) / n
    return var, mean, n


class _AdaIN(torch.nn.Module):
    """Stands in for one of the generator's AdaIN1d layers (an InstanceNorm1d, then the
    style's gain and bias): while a part is decoded it normalises with the ``Statistics``
    of that decode, and applies norm, gain and bias as one scale and one shift per
    channel, a single pass over the signal instead of four. Stock behaviour otherwise."""

    def __init__(self, adain: Any, index: int, state: _PassState) -> None:
        super().__init__()
        self.adain = adain
        self.index = index
        self.state = state

    def forward(self, x: Any, s: Any) -> Any:
        state = self.state
        if state.stats is None:
            return self.adain(x, s)
        mean, var = state.stats.moments(self.index, x, state.core)
        norm = self.adain.norm
        gamma, beta = self.adain.fc(s)[:, :, None].chunk(2, dim=1)
        gain = (1 + gamma) * norm.weight[None, :, None] * torch.rsqrt(var + norm.eps)
        shift = (1 + gamma) * norm.bias[None, :, None] + beta - mean * gain
        return torch.addcmul(shift, x, gain)


class _Conv(torch.nn.Module):
    """Stands in for one of the decoder's convolutions: in bfloat16 during a pass in that
    precision (the weights cast once, here), stock otherwise."""

    def __init__(self, conv: torch.nn.Conv1d, state: _PassState) -> None:
        super().__init__()
        self.conv = conv
        self.state = state
        self.weight = conv.weight.detach().to(torch.bfloat16)
        self.bias = None if conv.bias is None else conv.bias.detach().to(torch.bfloat16)

    def forward(self, x: Any) -> Any:
        if not self.state.bfloat16:
            return self.conv(x)
        c = self.conv
        y = F.conv1d(x.to(torch.bfloat16), self.weight, self.bias, c.stride, c.padding,
                     c.dilation, c.groups)  # fmt: skip
        return y.float()


# The attributes of kokoro's modules that this engine calls, module by module.
_LAYOUT = {
    "predictor": ("text_encoder", "lstm", "duration_proj", "F0Ntrain"),
    "decoder": ("encode", "decode", "F0_conv", "N_conv", "asr_res", "generator"),
    "decoder.generator": (
        "m_source", "f0_upsamp", "stft", "noise_convs", "noise_res", "ups", "resblocks",
        "conv_post", "reflection_pad", "num_kernels", "num_upsamples", "post_n_fft",
    ),
}  # fmt: skip


def check_model(kmodel: Any) -> None:
    """Refuse a kokoro whose modules are not laid out as this engine expects."""
    try:
        for path, names in _LAYOUT.items():
            module = operator.attrgetter(path)(kmodel)
            for name in names:
                getattr(module, name)
        generator = kmodel.decoder.generator
        adains = [m for m in generator.modules() if type(m).__name__ == "AdaIN1d"]
        convs = [m for m in kmodel.decoder.modules() if isinstance(m, torch.nn.Conv1d)]
        laid_out = (
            bool(adains)
            and all(
                isinstance(m.norm, torch.nn.InstanceNorm1d) and isinstance(m.fc, torch.nn.Linear)
                for m in adains
            )
            and isinstance(generator.conv_post, torch.nn.Conv1d)
            and all(c.padding_mode == "zeros" for c in convs)  # what _Conv computes
        )
    except AttributeError:
        laid_out = False
    if not laid_out:
        raise VoiceCliError(
            f"This kokoro package is laid out differently from kokoro {KOKORO_VERSION}, "
            f"which voicecli's streaming decoder follows. Install kokoro=={KOKORO_VERSION}."
        )


class StagedKokoro:
    """One KModel in stages. ``prepare`` and ``decode`` run on torch's thread
    (``torch_thread``), one at a time: on a CPU two forward passes at once only slow each
    other down, and the norms' ``Statistics`` belong to one decode. Callers interleave
    utterances between calls."""

    def __init__(self, kmodel: Any) -> None:
        check_model(kmodel)
        self.model = kmodel
        self.vocab: dict[str, int] = kmodel.vocab
        # Weight norm recomputes every weight on every call; folding it in once gives
        # identical output for less work per call.
        for module in kmodel.modules():
            if "weight_g" in module._parameters:
                torch.nn.utils.remove_weight_norm(module)
        replaced = [m for m in kmodel.modules() if isinstance(m, _AdaIN | _Conv)]
        # A model already replaced by an earlier engine keeps its state: both set it.
        self._state = replaced[0].state if replaced else _PassState()
        # The generator's norm layers, one set of statistics each (Kokoro-82M has 48;
        # a config with fewer resblocks, fewer).
        self.norms = sum(isinstance(m, _AdaIN) for m in replaced) or sum(
            type(m).__name__ == "AdaIN1d" for m in kmodel.decoder.generator.modules()
        )
        if replaced:
            return
        generator = kmodel.decoder.generator
        seats = [
            (parent, name, child)
            for parent in generator.modules()
            for name, child in parent.named_children()
            if type(child).__name__ == "AdaIN1d"
        ]
        for index, (parent, name, child) in enumerate(seats):
            setattr(parent, name, _AdaIN(child, index, self._state))
        # Every convolution of the decoder, its front as well as the generator, but
        # conv_post: its output goes through exp (docs/streaming.md).
        convs = [
            (parent, name, child)
            for parent in kmodel.decoder.modules()
            for name, child in parent.named_children()
            if child is not generator.conv_post and isinstance(child, torch.nn.Conv1d)
        ]
        for parent, name, child in convs:
            setattr(parent, name, _Conv(child, self._state))

    def prepare(
        self, phonemes: str, pack: Any, speed: float, precision: str = Precision.FLOAT32
    ) -> PreparedText:
        """The text stages and the decoder's front for ``phonemes`` (at most 510).
        ``precision`` is the front's convolutions' (resolved: float32 or bfloat16); the
        text stages are float32 always, as their durations are rounded to frames."""
        return torch_thread.run(self._prepare, phonemes, pack, speed, precision)

    def _prepare(self, phonemes: str, pack: Any, speed: float, precision: str) -> PreparedText:
        m = self.model
        ids = [self.vocab[p] for p in phonemes if p in self.vocab]
        with torch.no_grad():
            input_ids = torch.LongTensor([[0, *ids, 0]])
            ref_s = pack[len(phonemes) - 1]
            length = input_ids.shape[-1]
            lengths = torch.full((1,), length, dtype=torch.long)
            mask = torch.gt(torch.arange(length).unsqueeze(0) + 1, lengths.unsqueeze(1))
            bert = m.bert(input_ids, attention_mask=(~mask).int())
            d_en = m.bert_encoder(bert).transpose(-1, -2)
            s = ref_s[:, 128:]
            d = m.predictor.text_encoder(d_en, s, lengths, mask)
            x, _ = m.predictor.lstm(d)
            duration = torch.sigmoid(m.predictor.duration_proj(x)).sum(axis=-1) / speed
            durations = torch.round(duration).clamp(min=1).long().squeeze(0)
            indices = torch.repeat_interleave(torch.arange(length), durations)
            alignment = torch.zeros((length, indices.shape[0]))
            alignment[indices, torch.arange(indices.shape[0])] = 1
            alignment = alignment.unsqueeze(0)
            f0, energy = m.predictor.F0Ntrain(d.transpose(-1, -2) @ alignment, s)
            asr = m.text_encoder(input_ids, lengths, mask) @ alignment
            style = ref_s[:, :128]
            with self._convolutions(precision):
                front = self._front(asr, f0, energy, style)
            source = self._source(f0)
        return PreparedText(
            phonemes,
            front,
            source,
            style,
            energy[0].numpy(),
            durations.numpy().reshape(-1),
            self.vocab,
        )

    @contextmanager
    def _convolutions(self, precision: str) -> Iterator[None]:
        """The decoder's convolutions (``_Conv``) in ``precision`` within the block."""
        self._state.bfloat16 = precision == Precision.BFLOAT16
        try:
            yield
        finally:
            self._state.bfloat16 = False

    def _front(self, asr: Any, f0_curve: Any, energy: Any, style: Any) -> Any:
        dec = self.model.decoder
        f0 = dec.F0_conv(f0_curve.unsqueeze(1))
        n = dec.N_conv(energy.unsqueeze(1))
        x = dec.encode(torch.cat([asr, f0, n], axis=1), style)
        asr_res = dec.asr_res(asr)
        residual = True
        for block in dec.decode:
            if residual:
                x = torch.cat([x, asr_res, f0, n], axis=1)
            x = block(x, style)
            if block.upsample_type != "none":
                residual = False
        return x

    def _source(self, f0_curve: Any) -> Any:
        gen = self.model.decoder.generator
        f0 = gen.f0_upsamp(f0_curve[:, None]).transpose(1, 2)
        harmonics, _, _ = gen.m_source(f0)
        spec, phase = gen.stft.transform(harmonics.transpose(1, 2).squeeze(1))
        return torch.cat([spec, phase], dim=1)

    def decode(
        self,
        utt: PreparedText,
        start: int,
        end: int,
        stats: Statistics | None = None,
        extra: int = 0,
        precision: str = Precision.FLOAT32,
    ) -> np.ndarray:
        """Samples of generator frames [start, end) of ``utt``, and ``extra`` samples after
        them (from the right context) if the utterance goes on. Without ``stats`` the
        norms see the part and its context alone. ``precision`` is the convolutions'
        (resolved: float32 or bfloat16)."""
        return torch_thread.run(self._decode, utt, start, end, stats, extra, precision)

    def _decode(
        self,
        utt: PreparedText,
        start: int,
        end: int,
        stats: Statistics | None,
        extra: int,
        precision: str,
    ) -> np.ndarray:
        lo, hi = max(0, start - CONTEXT), min(utt.frames, end + CONTEXT)
        width = hi - lo
        core = ((start - lo) / width, (end - lo) / width)
        x = utt.x[:, :, lo:hi]
        source = utt.source[:, :, SOURCE_COLUMNS * lo : SOURCE_COLUMNS * hi + 1]
        state = self._state
        state.stats, state.core = stats or OwnStatistics(), core
        try:
            with torch.no_grad(), self._convolutions(precision):
                audio = self._generate(x, utt.style, source).reshape(-1)
        finally:
            state.stats = None
        a = (start - lo) * GENERATOR_FRAME_SAMPLES
        b = a + (end - start) * GENERATOR_FRAME_SAMPLES + (extra if end < utt.frames else 0)
        return audio[a:b].numpy().astype(np.float32, copy=True)

    def _generate(self, x: Any, style: Any, source: Any) -> Any:
        gen = self.model.decoder.generator
        for i in range(gen.num_upsamples):
            x = F.leaky_relu(x, negative_slope=0.1)
            x_source = gen.noise_res[i](gen.noise_convs[i](source), style)
            x = gen.ups[i](x)
            if i == gen.num_upsamples - 1:
                x = gen.reflection_pad(x)
            x = x + x_source
            blocks = gen.resblocks[i * gen.num_kernels : (i + 1) * gen.num_kernels]
            x = sum(block(x, style) for block in blocks) / gen.num_kernels
        x = gen.conv_post(F.leaky_relu(x))
        spec = x[:, : gen.post_n_fft // 2 + 1, :].exp()
        phase = x[:, gen.post_n_fft // 2 + 1 :, :].sin()
        return gen.stft.inverse(spec, phase)


class PartDecoder:
    """Decodes one utterance part after part, crossfading each seam over ``SEAM_SAMPLES``:
    the previous part's decode of the samples after its end fades into the next part's.
    With the whole utterance's statistics both are the same, so it stays exact."""

    def __init__(
        self,
        engine: StagedKokoro,
        utt: PreparedText,
        stats: Statistics,
        start: int = 0,
        precision: str = Precision.FLOAT32,
    ) -> None:
        self.stages = engine
        self.utt = utt
        self.stats = stats
        self.position = start
        self.precision = precision
        self._tail: np.ndarray | None = None  # the previous part's view past its end

    def next(self, end: int) -> np.ndarray:
        """The samples from the current position to generator frame ``end``."""
        audio = self.stages.decode(
            self.utt, self.position, end, self.stats, SEAM_SAMPLES, self.precision
        )
        core = (end - self.position) * GENERATOR_FRAME_SAMPLES
        part, tail = audio[:core], audio[core:]
        if self._tail is not None:
            n = min(len(self._tail), len(part))
            fade = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
            part[:n] = self._tail[:n] * (1.0 - fade) + part[:n] * fade
        self._tail = tail if len(tail) else None
        self.position = end
        return part


@functools.lru_cache(maxsize=2)
def staged_kokoro(kmodel: Any) -> StagedKokoro:
    """One engine per loaded model: the engine changes the model's norm layers."""
    return torch_thread.run(StagedKokoro, kmodel)
