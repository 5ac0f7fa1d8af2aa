"""``voicecli bench quality``: how the first sentence of a turn sounds as voicecli
speaks it, against Kokoro's own render of it, by ear-like measures.

The first sentence is the one a streaming start changes: decoded cold, with nothing
queued, the planner cuts it early (at its first pause, or in a window) so that the
listener hears something soon, and the first part is normalised over little speech.
Each sentence is spoken by the shipped executor (``KokoroSpeaker``) at a cold start, once per
plan below, and rendered whole by Kokoro from the *same* harmonic source (Kokoro's
source is random, so two whole renders differ: that difference is the floor).

Plans (``PLANS``), all run through the same ``KokoroSpeaker``:

``shipped``
    ``PhrasePlan`` as voicecli ships it, on the cost model this machine has taught it,
    a cut utterance normalised from the voice's prior (``VoicePrior``).
``no-prior``
    The same, each part normalised over its own speech and the parts before it alone.
``pauses``
    The same with no first window: a long first phrase is waited for whole.
``one-pass``
    No cut: the sentence in one pass, its leading silence left out as at any cold
    start.

Measures, per sentence and plan: naturalness (DistillMOS, no reference), intelligibility
(the word error rate of Whisper's transcript) and fidelity (PESQ-WB against the whole
render, aligned), beside the distances of the earlier study (SNR, log-mel). WAVs of every
plan go to the output directory, for listening.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import types
import wave
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from voicecli.bench.machine import machine_info
from voicecli.bench.report import write_json
from voicecli.bench.scenarios import SCENARIOS
from voicecli.errors import VoiceCliError
from voicecli.frames import HEARING_RATE, SAMPLE_RATE
from voicecli.protocol import to_pcm16
from voicecli.tts.kokoro.phrases import GENERATOR_FRAME_SECONDS, CostModel, Cut, CutKind, PhrasePlan

SENTENCE_END = re.compile(r"(?<=[.!?])\s")
SPEECH_RANGE_DB = 50.0
N_FFT, HOP, N_MELS = 1024, 256, 80
# First sentences of replies, our own: greetings, lists, numbers, a long first clause,
# fricatives and plosives at the start (where a cold first chunk is weakest).
OWN_FIRST_SENTENCES = (
    "Here are the steps to bake a simple loaf of bread.",
    "Sure, that is a common question.",
    "The short answer is yes, but there is a catch.",
    "First, check that the cable is plugged in at both ends.",
    "Of course, here are three ideas for dinner tonight.",
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
    "She sells fresh fish at the market every Saturday morning.",
    "To reset your password, open the account page and choose security.",
    "Good morning, the weather today looks sunny with a light breeze.",
    "Chess is a game for two players on a board of sixty-four squares.",
    "Yes, you can cancel the order until it has shipped.",
    "The meeting moved from Tuesday to Thursday at three.",
    "Several factors explain why the project ran late.",
    "Paris is the capital of France and its largest city.",
    "Think of a neural network as layers of simple functions.",
    "Zebras have black and white stripes that are unique to each animal.",
    "Could you tell me which version of the app you are using?",
    "Start by measuring the room from wall to wall.",
    "Honestly, the simplest fix is to restart the router.",
    "Vitamin C is found in oranges, peppers and strawberries.",
    "The train to Berlin leaves at half past nine from platform four.",
    "Shall I read the list again, more slowly this time?",
)


class OnePass(PhrasePlan):
    """Never cuts: the rest of the sentence in one pass, whatever the wait."""

    def next_cut(
        self,
        start: int,
        frames: int,
        pauses: Sequence[int],
        *,
        ahead: float,
        inside: bool = False,
        speech_end: int | None = None,
    ) -> Cut:
        return Cut(frames, CutKind.END)


# Each way the bench compares: a plan, built on this machine's cost model for each
# sentence, and whether a cut utterance is normalised from the voice's prior.
PLANS: dict[str, tuple[Callable[[CostModel], PhrasePlan], bool]] = {
    "shipped": (lambda cost: PhrasePlan(cost=cost), True),
    "no-prior": (lambda cost: PhrasePlan(cost=cost), False),
    "pauses": (lambda cost: PhrasePlan(cost=cost, first_window=10**9), True),
    "one-pass": (lambda cost: OnePass(cost=cost), True),
}


def first_sentences() -> list[str]:
    """The first sentence of every scenario, then our own."""
    firsts = [SENTENCE_END.split(s.source.strip(), maxsplit=1)[0] for s in SCENARIOS.values()]
    return list(dict.fromkeys([*firsts, *OWN_FIRST_SENTENCES]))


# --- measures ---------------------------------------------------------------------------
def snr_db(reference: np.ndarray, estimate: np.ndarray) -> float:
    error = float(np.sum((reference - estimate) ** 2))
    power = float(np.sum(reference**2))
    return math.inf if error == 0 else 10 * math.log10(max(power, 1e-20) / error)


def _mel_filters(n_fft: int = N_FFT, n_mels: int = N_MELS, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Triangular filters on the HTK mel scale, 0 Hz to Nyquist."""
    mels = np.linspace(0.0, 2595 * np.log10(1 + (rate / 2) / 700), n_mels + 2)
    edges = np.floor((n_fft + 1) * 700 * (10 ** (mels / 2595) - 1) / rate).astype(int)
    filters = np.zeros((n_mels, n_fft // 2 + 1))
    for i in range(n_mels):
        lo, mid, hi = edges[i : i + 3]
        filters[i, lo:mid] = (np.arange(lo, mid) - lo) / max(mid - lo, 1)
        filters[i, mid:hi] = (hi - np.arange(mid, hi)) / max(hi - mid, 1)
    return filters


_FILTERS = _mel_filters()


def mel_power(audio: np.ndarray) -> np.ndarray:
    padded = np.pad(audio.astype(np.float64), (N_FFT // 2, N_FFT // 2))
    if len(padded) < N_FFT:
        padded = np.pad(padded, (0, N_FFT - len(padded)))
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP] * np.hanning(N_FFT)
    return _FILTERS @ (np.abs(np.fft.rfft(frames, axis=1)) ** 2).T


def speech_logmel_db(reference: np.ndarray, estimate: np.ndarray) -> float:
    """Mean |dB difference| of log-mel power where the reference has speech."""
    a, b = mel_power(reference), mel_power(estimate)
    floor = max(float(a.max()), 1e-20) * 1e-8
    la, lb = 10 * np.log10(np.maximum(a, floor)), 10 * np.log10(np.maximum(b, floor))
    speech = la > la.max() - SPEECH_RANGE_DB
    return float(np.mean(np.abs(la - lb)[speech])) if speech.any() else 0.0


def offset(reference: np.ndarray, estimate: np.ndarray) -> int:
    """Where in ``reference`` the shorter ``estimate`` (a cold start leaves the lead-in
    out) lines up best, by cross-correlation."""
    lags = len(reference) - len(estimate)
    if lags <= 0:
        return 0
    n = 1 << (len(reference) + len(estimate)).bit_length()
    spectrum = np.fft.rfft(reference, n) * np.conj(np.fft.rfft(estimate, n))
    return int(np.argmax(np.fft.irfft(spectrum, n)[: lags + 1]))


def aligned(reference: np.ndarray, estimate: np.ndarray) -> np.ndarray:
    """The stretch of ``reference`` that ``estimate`` lines up with (``offset``)."""
    lag = offset(reference, estimate)
    return reference[lag : lag + len(estimate)]


class Ears:
    """The three ear-like measures, with their models loaded once."""

    def __init__(self, asr_model: str) -> None:
        from voicecli.audio.resample import Resampler
        from voicecli.listen.asr import Transcriber

        self._resampler = lambda: Resampler(SAMPLE_RATE, HEARING_RATE, "The quality bench")
        self.transcriber = Transcriber(asr_model)
        self._pesq = _import("pesq", "PESQ")
        self._mos = _distillmos()

    def hear(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` (24 kHz) as the measures take it: 16 kHz."""
        return self._resampler()(np.concatenate([audio, np.zeros(480, np.float32)]))

    def naturalness(self, audio16: np.ndarray) -> float:
        from voicecli.tts.kokoro import torch_thread

        def score() -> float:
            import torch

            with torch.no_grad():
                return float(self._mos(torch.from_numpy(audio16)[None]).reshape(-1)[0])

        return torch_thread.run(score)

    def fidelity(self, reference16: np.ndarray, estimate16: np.ndarray) -> float:
        return float(self._pesq.pesq(HEARING_RATE, reference16, estimate16, "wb"))

    def words(self, audio16: np.ndarray) -> str:
        return self.transcriber.transcribe(audio16).text


def _import(name: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise VoiceCliError(
            f"--quality needs {what} ({name}): pip install 'voicecli[quality]'."
        ) from None


def _distillmos() -> Any:
    """DistillMOS's model. The package imports torchaudio at the top of its module for
    its command line's file loading only; PyPI's torchaudio is built for CUDA torch and
    does not load beside the CPU torch voicecli pins. The model itself is plain torch,
    so an empty torchaudio stands in while distillmos is imported, where the real one
    does not load, and is taken away again (others look torchaudio up by its spec)."""
    stand_in = None
    if "distillmos" not in sys.modules:
        try:
            import torchaudio  # noqa: F401
        except (ImportError, OSError):
            for module in [m for m in sys.modules if m.split(".")[0] == "torchaudio"]:
                del sys.modules[module]
            stand_in = sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    try:
        distillmos = _import("distillmos", "DistillMOS")
    finally:
        if stand_in is not None:
            del sys.modules["torchaudio"]
    from voicecli.tts.kokoro import torch_thread

    def load() -> Any:
        model = distillmos.ConvTransformerSQAModel()
        model.eval()
        return model

    return torch_thread.run(load)


# --- the bench ----------------------------------------------------------------------------
def render(
    synth: Any, text: str, plan: PhrasePlan | None, seed: int, *, priors: bool = True
) -> tuple[np.ndarray, list]:
    """``text`` spoken by the executor at a cold start with ``plan`` (None: Kokoro's own
    whole render) and the voice's prior or not, from the harmonic source ``seed``
    draws; and the cuts made."""
    import torch

    from voicecli.tts.kokoro.synthesizer import KokoroSpeaker
    from voicecli.tts.steps import AudioPart

    torch.manual_seed(seed)
    if plan is None:
        parts = []
        for chunk in synth.phonemes(text):
            utt = synth.stages.prepare(chunk.phonemes, synth.voice, synth.speed)
            parts.append(synth.stages.decode(utt, 0, utt.frames))
        return np.concatenate(parts), []
    audio, cuts = [], []
    for step in KokoroSpeaker(synth, plan, priors=priors).speak_steps(synth.phonemes(text)):
        match step:
            case AudioPart(samples=samples, cut=cut):
                audio.append(samples)
                if cut is not None:
                    cuts.append(
                        {"end_s": cut.end * GENERATOR_FRAME_SECONDS, "kind": cut.kind.value}
                    )
    return np.concatenate(audio), cuts


def measure(synth: Any, texts: list[str], ears: Ears, *, seed: int = 0) -> dict[str, Any]:
    """Every plan against Kokoro's whole render, for each text, each a cold start."""
    rows: list[dict[str, Any]] = []
    audio: dict[str, list[np.ndarray]] = {name: [] for name in ("whole", "floor", *PLANS)}
    for index, text in enumerate(texts):
        whole, _ = render(synth, text, None, seed + index)
        floor, _ = render(synth, text, None, seed + index + 10_000)
        whole16 = ears.hear(whole)
        row: dict[str, Any] = {"text": text, "seconds": len(whole) / SAMPLE_RATE}
        row["whole"] = {"mos": ears.naturalness(whole16), "heard": ears.words(whole16)}
        floor16 = ears.hear(floor)
        row["floor"] = {
            "mos": ears.naturalness(floor16),
            "heard": ears.words(floor16),
            "pesq": ears.fidelity(whole16[: len(floor16)], floor16[: len(whole16)]),
            "snr_db": snr_db(whole, floor[: len(whole)]),
        }
        audio["whole"].append(whole)
        audio["floor"].append(floor)
        for name in PLANS:
            make, priors = PLANS[name]
            spoken, cuts = render(synth, text, make(synth.cost), seed + index, priors=priors)
            lag = offset(whole, spoken)
            reference = whole[lag : lag + len(spoken)]
            spoken16, reference16 = ears.hear(spoken), ears.hear(reference)
            n = min(len(spoken16), len(reference16))
            # Judged as heard: after the silence a device plays before it, as long as the
            # whole render's lead-in (DistillMOS scores Kokoro's own render up to 0.45 lower
            # when it starts at the speech, with nothing before it).
            played16 = ears.hear(np.concatenate([np.zeros(lag, np.float32), spoken]))
            row[name] = {
                "mos": ears.naturalness(played16),
                "heard": ears.words(played16),
                "pesq": ears.fidelity(reference16[:n], spoken16[:n]),
                "snr_db": snr_db(reference, spoken),
                "logmel_db": speech_logmel_db(reference, spoken),
                "first_cut_s": cuts[0]["end_s"] if cuts else None,
                "cuts": cuts,
            }
            audio[name].append(spoken)
        rows.append(row)
    return {"rows": rows, "summary": summarize(rows), "audio": audio}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from voicecli.bench.wer import wer

    texts = [r["text"] for r in rows]
    out: dict[str, Any] = {}
    for name in ("whole", "floor", *PLANS):
        mos = [r[name]["mos"] for r in rows]
        entry: dict[str, Any] = {
            "mos_median": statistics.median(mos),
            "wer": wer(texts, [r[name]["heard"] for r in rows]),
        }
        if name != "whole":
            below = [r["whole"]["mos"] - r[name]["mos"] for r in rows]
            pesq = [r[name]["pesq"] for r in rows]
            entry.update(
                mos_worst_below_whole=max(below),
                mos_median_below_whole=statistics.median(below),
                pesq_median=statistics.median(pesq),
                pesq_worst=min(pesq),
            )
        out[name] = entry
    return out


def report_lines(result: dict[str, Any]) -> list[str]:
    s = result["summary"]
    lines = [
        f"{len(result['rows'])} first sentences, each spoken at a cold start",
        f"{'render':10s} {'MOS med':>8s} {'vs whole':>9s} {'worst':>6s} {'WER':>6s} "
        f"{'PESQ med':>9s} {'worst':>6s}",
    ]
    for name in ("whole", "floor", *PLANS):
        r = s[name]
        if name == "whole":
            lines.append(f"{name:10s} {r['mos_median']:8.2f} {'':>9s} {'':>6s} {r['wer']:6.1%}")
            continue
        lines.append(
            f"{name:10s} {r['mos_median']:8.2f} {-r['mos_median_below_whole']:+9.2f} "
            f"{-r['mos_worst_below_whole']:+6.2f} {r['wer']:6.1%} {r['pesq_median']:9.2f} "
            f"{r['pesq_worst']:6.2f}"
        )
    lines.append(
        "MOS: DistillMOS (naturalness, no reference); vs whole: median and worst difference "
        "from the whole render of the same sentence. WER: Whisper's transcript against the "
        "text. PESQ: PESQ-WB against the whole render, aligned (floor: a second whole "
        "render with another random source, Kokoro against itself). Goals (issue 31): MOS "
        "median within 0.05 of whole's and no sentence 0.3 below, WER no worse than whole's, "
        "PESQ median >= 3.5 and worst >= 3.0."
    )
    return lines


def write_wavs(audio: dict[str, list[np.ndarray]], out_dir: Path, stem: str) -> list[Path]:
    """One WAV per render, the sentences joined by 0.3 s of silence."""
    gap = np.zeros(int(0.3 * SAMPLE_RATE), np.float32)
    paths = []
    for name, pieces in audio.items():
        path = out_dir / f"{stem}-{name}.wav"
        joined = np.concatenate([x for piece in pieces for x in (piece, gap)])
        with wave.open(str(path), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(SAMPLE_RATE)
            f.writeframes(to_pcm16(joined))
        paths.append(path)
    return paths


def run(settings: Any, output_dir: Path) -> None:
    """The command: every first sentence spoken by every plan; report, JSON and WAVs."""
    from voicecli import display
    from voicecli.speech import local_synthesizer

    if settings.endpoint_url or settings.sagemaker_endpoint:
        raise VoiceCliError("--quality measures the local Kokoro decoder: drop the endpoint.")
    with display.err.status("Loading the speech model and the measures…", spinner="dots"):
        ears = Ears(settings.asr_model)
        synth = local_synthesizer(settings)
        synth.warm_up()  # the cost model the shipped plan decides with, the voice's prior
    texts = first_sentences()
    display.note(f"speaking {len(texts)} first sentences {len(PLANS) + 2} ways")
    result = measure(synth, texts, ears)
    paths = write_wavs(result.pop("audio"), output_dir, "quality")
    result.update(machine=machine_info(), synth=synth.describe())
    paths.insert(0, write_json(result, output_dir / "quality.json"))
    for line in report_lines(result):
        display.out.print(line, markup=False)
    for path in paths:
        display.note(f"wrote {path}")
