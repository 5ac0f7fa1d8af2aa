"""``voicecli bench --quality``: how far audio decoded in parts is from whole-sentence audio.

Every bench sentence is rendered by the local Kokoro engine once whole (the reference)
and then in parts, by each strategy below, from the *same* harmonic source. Kokoro's
source is random (SineGen's initial phases and noise), so without sharing it two whole
renders of the same text already differ: that difference is reported too, as the floor.

Strategies:

``windows-exact``
    Growing windows (16, 24, 36... generator frames) normalised with the whole
    sentence's InstanceNorm statistics. Exact by construction; it shows that the
    windowing itself (context, slicing, seams) loses nothing.
``windows-own`` / ``windows-pooled``
    The same windows normalised with their own statistics, alone or pooled with the
    windows before them: what a streaming decoder can actually do.
``whole-bfloat16``
    The whole sentence in one part, with the decoder's convolutions in bfloat16
    (``--precision``), its front's and the generator's: what that precision alone
    changes.
``whole-trimmed``
    The whole sentence in one part, but only from its first phoneme to where its speech
    dies away, its lead-in and trailing pause given as zeros. Leaving the silences out
    of the decode leaves them out of the norms' statistics too: why the synthesizer
    decodes them wherever a sentence fits in one pass.
``phrases-first`` / ``phrases-all``
    Parts cut only inside pauses, as the synthesizer cuts them. ``phrases-first`` is a
    cold start, the first sentence of a turn: its leading silence trimmed and one cut,
    at the first usable pause. ``phrases-all`` cuts at every usable pause (the most
    seams it can make).
``held-first``
    ``phrases-first`` with its first phrase in growing windows (32, 48, 72... frames),
    each after the first holding the statistics of the one before (``PooledStatistics.hold``):
    what the synthesizer does where a turn's first pause comes late.

Per chunk, per sentence and over all sentences: the SNR against the reference, and the
mean absolute difference of log-mel power in dB over the frames and bands where the
reference has speech (within 50 dB of its peak), so that silence does not count. WAVs
of every strategy go to the output directory, for listening.
"""

from __future__ import annotations

import math
import wave
from pathlib import Path
from typing import Any

import numpy as np

from voicecli.bench.machine import machine_info
from voicecli.bench.report import write_json
from voicecli.bench.scenarios import ScriptedReply
from voicecli.errors import VoiceCliError
from voicecli.frames import SAMPLE_RATE
from voicecli.protocol import to_pcm16
from voicecli.tts.kokoro_engine import (
    FRAME_SAMPLES,
    OwnStatistics,
    PartDecoder,
    PooledStatistics,
    RecordingStatistics,
    Statistics,
)
from voicecli.tts.phrases import FIRST_WINDOW_FRAMES, MIN_PART_FRAMES

STRATEGIES = (
    "windows-exact",
    "windows-own",
    "windows-pooled",
    "whole-bfloat16",
    "whole-trimmed",
    "phrases-first",
    "phrases-all",
    "held-first",
)
FIRST_WINDOW, GROWTH = 16, 1.5  # generator frames (12.5 ms each)
SPEECH_RANGE_DB = 50.0
N_FFT, HOP, N_MELS = 1024, 256, 80


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


def windows(frames: int) -> list[int]:
    """Window ends for growing windows over ``frames`` generator frames."""
    ends, end, width = [], 0, FIRST_WINDOW
    while end < frames:
        end = min(frames, end + width)
        if frames - end < FIRST_WINDOW // 2:  # no sliver at the end
            end = frames
        ends.append(end)
        width = int(width * GROWTH)
    return ends


def cuts(strategy: str, utt: Any, min_part: int) -> tuple[int, list[int]]:
    """Where ``strategy`` starts decoding, and its part ends."""
    frames = utt.frames
    if strategy.startswith("windows"):
        return 0, windows(frames)
    if strategy == "whole-trimmed":
        start, end = utt.speech()
        return start, [end]
    if strategy.startswith("whole"):
        return 0, [frames]
    cold = strategy in ("phrases-first", "held-first")
    start = utt.onset() if cold else 0
    first, usable = start, []
    for pause in utt.pauses():
        if pause - start >= min_part and frames - pause >= min_part:
            usable.append(pause)
            start = pause
            if cold:
                break
    if strategy == "held-first":
        end, width = first, FIRST_WINDOW_FRAMES
        held = []
        while (usable or [frames])[0] - end - width >= min_part:
            end += width
            held.append(end)
            width = int(width * GROWTH)
        usable = held + usable
    return first, usable + [frames]


def render(engine: Any, utt: Any, strategy: str, min_part: int) -> tuple[int, list[np.ndarray]]:
    """Samples of leading silence left out, and the parts as ``strategy`` decodes them."""
    pooled = PooledStatistics()
    stats: Statistics = pooled
    if strategy == "windows-exact":
        recorder = RecordingStatistics()
        engine.decode(utt, 0, utt.frames, recorder)
        stats = recorder.fixed()
    elif strategy in ("windows-own", "whole-bfloat16"):
        stats = OwnStatistics()
    start, ends = cuts(strategy, utt, min_part)
    precision = "bfloat16" if strategy.endswith("bfloat16") else "float32"
    decoder = PartDecoder(engine, utt, stats, start, precision)
    parts = []
    pauses = set(utt.pauses())
    for end in ends:
        parts.append(decoder.next(end))
        pooled.hold = strategy == "held-first" and end not in pauses
    silence = np.zeros((utt.frames - ends[-1]) * FRAME_SAMPLES, np.float32)
    parts[-1] = np.concatenate([parts[-1], silence])  # a trailing pause not decoded
    return start * FRAME_SAMPLES, parts


def measure(synth: Any, texts: list[str], *, seed: int = 0) -> dict[str, Any]:
    """Every strategy against the whole-sentence reference, for each text."""
    import torch

    engine = synth.engine
    rows: list[dict[str, Any]] = []
    audio: dict[str, list[np.ndarray]] = {name: [] for name in ("whole", "floor", *STRATEGIES)}
    # Per strategy, what it is compared with in every sentence: the whole render from
    # the strategy's first sample on.
    references: dict[str, list[np.ndarray]] = {name: [] for name in STRATEGIES}
    for index, text in enumerate(texts):
        for chunk in synth.phonemes(text):
            phonemes = chunk.phonemes
            torch.manual_seed(seed + index)
            utt = engine.prepare(phonemes, synth.voice, synth.speed)
            reference = engine.decode(utt, 0, utt.frames)
            torch.manual_seed(seed + index + 10_000)
            other = engine.prepare(phonemes, synth.voice, synth.speed)
            floor = engine.decode(other, 0, other.frames)
            # The same harmonic source as the reference, through a front in bfloat16.
            torch.manual_seed(seed + index)
            fast = engine.prepare(phonemes, synth.voice, synth.speed, "bfloat16")
            audio["whole"].append(reference)
            audio["floor"].append(floor)
            row: dict[str, Any] = {
                "text": text,
                "seconds": len(reference) / SAMPLE_RATE,
                "pauses_s": [p * 300 / SAMPLE_RATE for p in utt.pauses()],
                "floor": _compare(reference, floor),
                "strategies": {},
            }
            for strategy in STRATEGIES:
                prepared = fast if strategy == "whole-bfloat16" else utt
                trimmed, parts = render(engine, prepared, strategy, MIN_PART_FRAMES)
                joined = np.concatenate(parts)
                audio[strategy].append(joined)
                references[strategy].append(reference[trimmed:])
                chunks, offset = [], trimmed
                for part in parts:
                    ref = reference[offset : offset + len(part)]
                    chunks.append({"seconds": len(part) / SAMPLE_RATE, **_compare(ref, part)})
                    offset += len(part)
                row["strategies"][strategy] = {
                    "overall": _compare(reference[trimmed:], joined),
                    "chunks": chunks,
                    "trimmed_leading_silence_s": trimmed / SAMPLE_RATE,
                    "lost_or_duplicated_samples": len(joined) - (len(reference) - trimmed),
                }
            rows.append(row)
    summary = _summary(rows)
    for strategy in STRATEGIES:  # all sentences as one signal: what a listener hears
        together = _compare(np.concatenate(references[strategy]), np.concatenate(audio[strategy]))
        summary[strategy].update(snr_db_all=together["snr_db"], logmel_db_all=together["logmel_db"])
    return {"rows": rows, "summary": summary, "audio": audio}


def _compare(reference: np.ndarray, estimate: np.ndarray) -> dict[str, float]:
    return {
        "snr_db": snr_db(reference, estimate),
        "logmel_db": speech_logmel_db(reference, estimate),
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "floor": {
            "snr_db_median": float(np.median([r["floor"]["snr_db"] for r in rows])),
            "logmel_db_median": float(np.median([r["floor"]["logmel_db"] for r in rows])),
        }
    }
    for strategy in STRATEGIES:
        results = [r["strategies"][strategy] for r in rows]
        chunks = [c for r in results for c in r["chunks"]]
        finite = [r["overall"]["snr_db"] for r in results if math.isfinite(r["overall"]["snr_db"])]
        out[strategy] = {
            "chunks": len(chunks),
            "cut_sentences": sum(1 for r in results if len(r["chunks"]) > 1),
            "snr_db_overall_min": min(finite, default=math.inf),
            "snr_db_overall_median": float(np.median(finite)) if finite else math.inf,
            "snr_db_chunk_min": min(c["snr_db"] for c in chunks),
            "logmel_db_overall_median": float(
                np.median([r["overall"]["logmel_db"] for r in results])
            ),
            "logmel_db_chunk_max": max(c["logmel_db"] for c in chunks),
            "lost_or_duplicated_samples": sum(
                abs(r["lost_or_duplicated_samples"]) for r in results
            ),
        }
    return out


def write_wavs(audio: dict[str, list[np.ndarray]], out_dir: Path, stem: str) -> list[Path]:
    """One WAV per strategy, the sentences joined by 0.3 s of silence."""
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


def report_lines(result: dict[str, Any]) -> list[str]:
    s = result["summary"]
    lines = [
        f"{'strategy':15s} {'chunks':>6s} {'cut':>4s} {'SNR med':>8s} {'SNR min':>8s} "
        f"{'chunk min':>9s} {'logmel med':>10s} {'chunk max':>9s} {'SNR all':>8s} "
        f"{'logmel all':>10s}",
        f"{'(floor)':15s} {'':>6s} {'':>4s} {s['floor']['snr_db_median']:8.1f} {'':>8s} "
        f"{'':>9s} {s['floor']['logmel_db_median']:10.2f}",
    ]
    for strategy in STRATEGIES:
        r = s[strategy]
        lines.append(
            f"{strategy:15s} {r['chunks']:6d} {r['cut_sentences']:4d} "
            f"{r['snr_db_overall_median']:8.1f} {r['snr_db_overall_min']:8.1f} "
            f"{r['snr_db_chunk_min']:9.1f} {r['logmel_db_overall_median']:10.2f} "
            f"{r['logmel_db_chunk_max']:9.2f} {r['snr_db_all']:8.1f} {r['logmel_db_all']:10.2f}"
        )
    lines += [
        "SNR in dB against the whole-sentence render from the same harmonic source "
        "(inf: identical); logmel: mean |dB| of log-mel power over speech. (floor): two whole "
        "renders with different random sources, Kokoro's own run-to-run difference. cut: "
        "sentences decoded in more than one part. all: every sentence as one signal.",
    ]
    return lines


def run(settings: Any, reply: ScriptedReply, name: str, output_dir: Path) -> None:
    """The command: render the reply's sentences every way, report, write JSON and WAVs."""
    from voicecli import display
    from voicecli.pipeline import TextUnits, TurnOptions
    from voicecli.tts.kokoro_local import KokoroSynthesizer

    if settings.endpoint_url or settings.sagemaker_endpoint:
        raise VoiceCliError("--quality measures the local Kokoro decoder: drop the endpoint.")
    units = TextUnits(TurnOptions(code=settings.code))
    texts = [spoken for _, spoken in units.feed(reply.text) + units.flush()]
    with display.err.status("Loading the speech model…", spinner="dots"):
        synth = KokoroSynthesizer(
            voice=settings.voice, speed=settings.speed, lang=settings.lang,
            model_dir=settings.model_dir,
        )  # fmt: skip
    display.note(f"rendering {len(texts)} sentences {len(STRATEGIES) + 2} ways")
    result = measure(synth, texts)
    stem = f"quality-{name}"
    paths = write_wavs(result.pop("audio"), output_dir, stem)
    result.update(machine=machine_info(), synth=synth.describe(), scenario=name)
    paths.insert(0, write_json(result, output_dir / f"{stem}.json"))
    for line in report_lines(result):
        display.out.print(line, markup=False)
    for path in paths:
        display.note(f"wrote {path}")
