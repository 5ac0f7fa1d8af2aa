"""The figures ``voicecli bench`` reports, computed from the raw run.

Everything is computed from the raw run (the same dict that goes into the JSON
file), so a report can be rebuilt from a JSON file alone. Times are milliseconds
after the LLM request was sent (``request_sent``), on the turn timeline's clock.

Gap between sentences: for each sentence after the first, the silence between
the end of the previous sentence's audio and this sentence's first sample, that
is ``played[i] - (played[i-1] + duration[i-1])`` at the device. Any positive
value is time the listener heard nothing while the reply was not finished.
With ``--no-play`` nothing is paced, so a virtual playhead stands in for the
device: audio plays from the first write at 1x, and a sentence written after
the playhead reached it starts late by the gap.
"""

from __future__ import annotations

import math
from typing import Any

from voicecli.bench.acknowledgments import first_substantive
from voicecli.timeline import (
    FIRST_TOKEN,
    PLAYED,
    QUEUED,
    REQUEST_SENT,
    SENTENCE_READY,
    SYNTH_END,
    SYNTH_FIRST_CHUNK,
    SYNTH_START,
    TEXT_DONE,
    TURN_END,
    UNDERRUN,
)

DELIVERIES = ("streaming", "buffered")

# Below this a "gap" is timestamp jitter of the device clock (a fraction of one of its
# blocks), not a silence anyone hears.
AUDIBLE_GAP_MS = 20.0

# (key, timeline event, label): the stages of a turn, in pipeline order.
TERMINAL_STAGES = (
    ("first_token", FIRST_TOKEN, "first token"),
    ("first_sentence", SENTENCE_READY, "1st sentence out"),
    ("synth_start", SYNTH_START, "synth start"),
    ("first_chunk", SYNTH_FIRST_CHUNK, "1st audio chunk"),
    ("queued", QUEUED, "1st into ring"),
    ("played", PLAYED, "1st PLAYED"),
    ("text_done", TEXT_DONE, "last token"),
    ("turn_end", TURN_END, "turn end"),
)

EXTRA = (
    ("substantive", "1st substantive"),
    ("max_gap", "max gap/turn"),
    ("total_gap", "sum gaps/turn"),
    ("audible_gaps", f"# gaps>{AUDIBLE_GAP_MS:.0f}ms"),
    ("underruns", "# underruns"),
)


# --- figures ---------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), without needing numpy here."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def stats(values: list[float | None]) -> dict[str, float | int | None]:
    present = [v for v in values if v is not None and not math.isnan(v)]
    if not present:
        return {"n": 0, "median": None, "p90": None, "min": None, "max": None, "mean": None}
    return {
        "n": len(present),
        "median": percentile(present, 50),
        "p90": percentile(present, 90),
        "min": min(present),
        "max": max(present),
        "mean": sum(present) / len(present),
    }


def _first(events: list[dict[str, Any]], name: str, sentence: int | None = None) -> float | None:
    times = [
        e["t"]
        for e in events
        if e["name"] == name and (sentence is None or e["sentence"] == sentence)
    ]
    return min(times) if times else None


def trial_metrics(trial: dict[str, Any], sample_rate: int, at_device: bool) -> dict[str, Any]:
    """Stage times, gaps and real-time factors of one trial, in ms after the request."""
    events = trial["timeline"]["events"]
    origin = _first(events, REQUEST_SENT)
    if origin is None:
        origin = trial["timeline"]["t0"]

    def ms(t: float | None) -> float | None:
        return None if t is None else (t - origin) * 1000.0

    out: dict[str, Any] = {key: ms(_first(events, name)) for key, name, _ in TERMINAL_STAGES}
    sentences = sorted(trial["sentences"], key=lambda s: s["index"])
    per_sentence = []
    ends: list[float | None] = []
    gaps: list[float] = []
    for s in sentences:
        i = s["index"]
        duration = s["samples"] / sample_rate
        arrived = _first(events, PLAYED, i)
        start = arrived
        gap = None
        if arrived is not None and ends and ends[-1] is not None:
            if not at_device:
                start = max(arrived, ends[-1])
            gap = max(0.0, (start - ends[-1]) * 1000.0)
            gaps.append(gap)
        ends.append(None if start is None else start + duration)
        synth_start, synth_end = _first(events, SYNTH_START, i), _first(events, SYNTH_END, i)
        span = None if synth_start is None or synth_end is None else synth_end - synth_start
        busy = s.get("synth_busy_s")
        per_sentence.append(
            {
                "index": i,
                "audio_s": duration,
                "ready_ms": ms(_first(events, SENTENCE_READY, i)),
                "synth_start_ms": ms(synth_start),
                "synth_end_ms": ms(synth_end),
                "first_chunk_ms": ms(_first(events, SYNTH_FIRST_CHUNK, i)),
                "queued_ms": ms(_first(events, QUEUED, i)),
                "played_ms": ms(arrived),
                "start_ms": ms(start),
                "end_ms": ms(None if start is None else start + duration),
                "gap_before_ms": gap,
                "rtf": busy / duration if busy is not None and duration > 0 else None,
                "rtf_span": span / duration if span is not None and duration > 0 else None,
            }
        )
    # The first sound of the first unit that answers, not just acknowledges.
    substantive = first_substantive(
        (e["sentence"], str(e.get("detail", {}).get("text", "")))
        for e in events
        if e["name"] == SENTENCE_READY and e["sentence"] is not None
    )
    out.update(
        {
            "substantive": None if substantive is None else ms(_first(events, PLAYED, substantive)),
            "gaps_ms": gaps,
            "max_gap": max(gaps) if gaps else 0.0,
            "total_gap": sum(gaps),
            "audible_gaps": sum(1 for g in gaps if g > AUDIBLE_GAP_MS),
            "underruns": sum(1 for e in events if e["name"] == UNDERRUN),
            "audio_s": sum(p["audio_s"] for p in per_sentence),
            "sentences": per_sentence,
        }
    )
    return out


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Per mode and figure: n, median, p90, min, max, mean; and the headline comparison."""
    at_device = run["output"]["played_means"] == "dac"
    rate = run["sample_rate"]
    metrics: dict[str, list[dict[str, Any]]] = {m: [] for m in DELIVERIES}
    failed: dict[str, list[str]] = {m: [] for m in DELIVERIES}
    for trial in run["trials"]:
        if trial["error"] or trial["interrupted"]:
            failed[trial["mode"]].append(f"{trial['label']}: {trial['error'] or 'interrupted'}")
            continue
        metrics[trial["mode"]].append(trial_metrics(trial, rate, at_device))
    out: dict[str, Any] = {"modes": {}, "failed": failed}
    keys = [k for k, _, _ in TERMINAL_STAGES] + [k for k, _ in EXTRA]
    for mode in DELIVERIES:
        rows = metrics[mode]
        by_key = {k: stats([r[k] for r in rows]) for k in keys}
        by_key["rtf"] = stats([s["rtf"] for r in rows for s in r["sentences"]])
        by_key["rtf_span"] = stats([s["rtf_span"] for r in rows for s in r["sentences"]])
        out["modes"][mode] = by_key
    s, b = out["modes"]["streaming"]["played"], out["modes"]["buffered"]["played"]
    paired = _paired_ratios(run, rate, at_device)
    out["headline"] = {
        "streaming_median_ms": s["median"],
        "buffered_median_ms": b["median"],
        "streaming_mean_ms": s["mean"],
        "buffered_mean_ms": b["mean"],
        "ratio_of_medians": _ratio(b["median"], s["median"]),
        "ratio_of_means": _ratio(b["mean"], s["mean"]),
        "paired_ratio_median": percentile(paired, 50) if paired else None,
        "pairs": len(paired),
    }
    texts = {t["text"] for t in run["trials"] if not t["error"]}
    out["identical_text"] = len(texts) <= 1
    out["distinct_texts"] = len(texts)
    out["texts_by_mode_equal"] = {t["text"] for t in run["trials"] if t["mode"] == "streaming"} == {
        t["text"] for t in run["trials"] if t["mode"] == "buffered"
    }
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _paired_ratios(run: dict[str, Any], rate: int, at_device: bool) -> list[float]:
    """Buffered / streaming first-audio time within each adjacent pair of trials."""
    pairs: dict[int, dict[str, float]] = {}
    for trial in run["trials"]:
        if trial["error"] or trial["interrupted"] or "pair" not in trial:
            continue
        played = trial_metrics(trial, rate, at_device)["played"]
        if played is not None:
            pairs.setdefault(trial["pair"], {})[trial["mode"]] = played
    return [
        p["buffered"] / p["streaming"]
        for p in pairs.values()
        if "buffered" in p and p.get("streaming")
    ]


def representative(run: dict[str, Any], mode: str) -> dict[str, Any] | None:
    """The trial of ``mode`` whose first-audio time is closest to the mode's median."""
    at_device = run["output"]["played_means"] == "dac"
    candidates = []
    for trial in run["trials"]:
        if trial["mode"] != mode or trial["error"] or trial["interrupted"]:
            continue
        m = trial_metrics(trial, run["sample_rate"], at_device)
        if m["played"] is not None:
            candidates.append((m["played"], trial, m))
    if not candidates:
        return None
    median = percentile([c[0] for c in candidates], 50)
    _, trial, metrics = min(candidates, key=lambda c: abs(c[0] - median))
    return {"trial": trial, "metrics": metrics}


# --- terminal --------------------------------------------------------------------------
def fmt(value: float | int | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def headline_lines(run: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    h = summary["headline"]
    substantive = {mode: summary["modes"][mode]["substantive"] for mode in DELIVERIES}
    at = "at the device" if run["output"]["played_means"] == "dac" else "written (no device)"
    lines = [
        f"Time to first audio {at}: streaming median {fmt(h['streaming_median_ms'])} ms "
        f"(mean {fmt(h['streaming_mean_ms'], 1)}), buffered median "
        f"{fmt(h['buffered_median_ms'])} ms (mean {fmt(h['buffered_mean_ms'], 1)}).",
        f"Buffered / streaming: {fmt(h['ratio_of_medians'], 2)}x on medians, "
        f"{fmt(h['ratio_of_means'], 2)}x on means, {fmt(h['paired_ratio_median'], 2)}x "
        f"median of {h['pairs']} adjacent pairs.",
        "First substantive sound (the first unit that is not a pure acknowledgment such "
        f"as 'Sure,'): streaming median {fmt(substantive['streaming']['median'])} ms, "
        f"buffered {fmt(substantive['buffered']['median'])} ms.",
        "Gap = silence between the end of one sentence's audio and the start of the next "
        + (
            "(device DAC times)."
            if run["output"]["played_means"] == "dac"
            else "(virtual 1x playhead from the first write: nothing was played)."
        ),
        "RTF = seconds inside the synthesizer for a sentence / seconds of audio it produced "
        "(< 1 is faster than real time); 'RTF start..end' uses SYNTH_START..SYNTH_END, which "
        "also counts time blocked on a full ring buffer.",
    ]
    busy = run.get("machine", {}).get("cpu_load")
    if busy:
        lines.append(f"Beside {busy} busy process{'es' if busy > 1 else ''} (--cpu-load).")
    if run["output"]["played_means"] != "dac":
        lines.append("NOTE: --no-play: 'played' means written to the WAV file, not heard.")
    if not summary["identical_text"]:
        lines.append(
            f"WARNING: the LLM gave {summary['distinct_texts']} different replies; "
            "trials did not all speak identical text."
        )
    for mode, failures in summary["failed"].items():
        for failure in failures:
            lines.append(f"FAILED {mode} trial {failure}")
    return lines
