"""What ``voicecli bench`` reports: figures per trial, the table, JSON, and waterfall charts.

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

import html
import json
import math
from pathlib import Path
from typing import Any

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

MODES = ("streaming", "buffered")
# Below this a "gap" is timestamp jitter of the device clock (a fraction of one
# 50 ms block), not a silence anyone hears.
AUDIBLE_GAP_MS = 20.0

# (key, timeline event, label): the stages of a turn, in pipeline order.
STAGES = (
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

    out: dict[str, Any] = {key: ms(_first(events, name)) for key, name, _ in STAGES}
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
    out.update(
        {
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
    metrics: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    failed: dict[str, list[str]] = {m: [] for m in MODES}
    for trial in run["trials"]:
        if trial["error"] or trial["interrupted"]:
            failed[trial["mode"]].append(f"{trial['label']}: {trial['error'] or 'interrupted'}")
            continue
        metrics[trial["mode"]].append(trial_metrics(trial, rate, at_device))
    out: dict[str, Any] = {"modes": {}, "failed": failed}
    keys = [k for k, _, _ in STAGES] + [k for k, _ in EXTRA]
    for mode in MODES:
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


# --- terminal --------------------------------------------------------------------------
def _fmt(value: float | int | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def report_table(run: dict[str, Any], summary: dict[str, Any]) -> Any:
    from rich import box
    from rich.table import Table

    where = run["output"]["played_label"]
    title = (
        f"voicecli bench: {run['scenario']}, {run['trials_per_mode']} trials per mode, "
        f"voice {run['voice']}; ms after the LLM request; played = {where}"
    )
    # One row per stage and mode: nine numeric columns would not fit 80 characters.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("stage", no_wrap=True)
    table.add_column("mode", no_wrap=True)
    for col in ("median", "p90", "min", "max"):
        table.add_column(col, justify="right", no_wrap=True)
    rows = [(k, label, 0) for k, _, label in STAGES] + [(k, label, 0) for k, label in EXTRA]
    rows += [("rtf", "RTF/sentence", 2), ("rtf_span", "RTF start..end", 2)]
    for key, label, digits in rows:
        for n, mode in enumerate(MODES):
            s = summary["modes"][mode][key]
            name = label if n == 0 else ""
            style = "bold" if key == "played" else None
            table.add_row(
                name,
                mode,
                *(_fmt(s[c], digits) for c in ("median", "p90", "min", "max")),
                style=style,
            )
    return table


def headline_lines(run: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    h = summary["headline"]
    at = "at the device" if run["output"]["played_means"] == "dac" else "written (no device)"
    lines = [
        f"Time to first audio {at}: streaming median {_fmt(h['streaming_median_ms'])} ms "
        f"(mean {_fmt(h['streaming_mean_ms'], 1)}), buffered median "
        f"{_fmt(h['buffered_median_ms'])} ms (mean {_fmt(h['buffered_mean_ms'], 1)}).",
        f"Buffered / streaming: {_fmt(h['ratio_of_medians'], 2)}x on medians, "
        f"{_fmt(h['ratio_of_means'], 2)}x on means, {_fmt(h['paired_ratio_median'], 2)}x "
        f"median of {h['pairs']} adjacent pairs.",
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


def print_report(run: dict[str, Any], console: Any) -> None:
    summary = summarize(run)
    console.print(report_table(run, summary))
    for line in headline_lines(run, summary):
        console.print(line, markup=False)


# --- files -----------------------------------------------------------------------------
def write_json(data: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return path


def write_outputs(run: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    summary = summarize(run)
    paths = [write_json({**run, "summary": summary}, out_dir / f"{stem}.json")]
    paths.append(write_html(run, summary, out_dir / f"{stem}.html"))
    png = write_png(run, summary, out_dir / f"{stem}.png")
    if png is not None:
        paths.append(png)
    return paths


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


# Waterfall segments per sentence row: (from, to, colour, meaning).
SEGMENTS = (
    ("ready_ms", "synth_start_ms", "#c7c7c7", "released, waiting for the synthesizer"),
    ("synth_start_ms", "synth_end_ms", "#f28e2b", "synthesizing"),
    ("queued_ms", "start_ms", "#9ecae1", "in the ring buffer / device latency"),
    ("start_ms", "end_ms", "#59a14f", "playing"),
)
GAP_COLOUR = "#e15759"


def _token_ms(trial: dict[str, Any]) -> list[float]:
    events = trial["timeline"]["events"]
    origin = _first(events, REQUEST_SENT) or trial["timeline"]["t0"]
    return [(t - origin) * 1000.0 for t in trial.get("token_arrivals", [])]


def _nice_step(span_ms: float) -> float:
    for step in (100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000):
        if span_ms / step <= 12:
            return float(step)
    return 120000.0


def waterfall_svg(run: dict[str, Any], mode: str, picked: dict[str, Any], span_ms: float) -> str:
    trial, m = picked["trial"], picked["metrics"]
    sentences = m["sentences"]
    label_w, plot_w, row_h, top = 260, 700, 20, 34
    height = top + row_h * (len(sentences) + 1) + 30
    width = label_w + plot_w + 20

    def x(t_ms: float) -> float:
        return label_w + max(0.0, t_ms) / span_ms * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
    ]
    step = _nice_step(span_ms)
    tick = 0.0
    while tick <= span_ms + 1e-9:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" '
            f'y2="{height - 24}" stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{x(tick):.1f}" y="{height - 10}" text-anchor="middle" '
            f'fill="#555">{tick / 1000:g} s</text>'
        )
        tick += step
    # Row 0: the LLM stream, request to last token, with a tick per token.
    y0 = top
    parts.append(
        f'<text x="4" y="{y0 + 13}">LLM stream ({len(trial.get("token_arrivals", []))}'
        " pieces)</text>"
    )
    if m["text_done"] is not None:
        parts.append(
            f'<rect x="{x(0):.1f}" y="{y0 + 8}" width="{x(m["text_done"]) - x(0):.1f}" '
            f'height="4" fill="#bab0ac"><title>request to last token: '
            f"{m['text_done']:.0f} ms</title></rect>"
        )
    for t in _token_ms(trial):
        parts.append(
            f'<line x1="{x(t):.1f}" y1="{y0 + 4}" x2="{x(t):.1f}" y2="{y0 + 16}" '
            'stroke="#4e79a7" stroke-width="1"/>'
        )
    for row, s in enumerate(sentences, start=1):
        y = top + row * row_h
        display = next((d["display"] for d in trial["sentences"] if d["index"] == s["index"]), "")
        short = display if len(display) <= 38 else display[:37] + "…"
        parts.append(
            f'<text x="4" y="{y + 13}">{s["index"]}: {html.escape(short)}'
            f"<title>{html.escape(display)}</title></text>"
        )
        for start_key, end_key, colour, meaning in SEGMENTS:
            a, b = s[start_key], s[end_key]
            if a is None or b is None or b < a:
                continue
            parts.append(
                f'<rect x="{x(a):.1f}" y="{y + 3}" width="{max(1.0, x(b) - x(a)):.1f}" '
                f'height="14" fill="{colour}"><title>{meaning}: {a:.0f} to {b:.0f} ms'
                f"</title></rect>"
            )
        # A strip along the row's foot: the silence often overlaps this sentence's
        # synthesis, which must stay visible above it.
        gap = s["gap_before_ms"]
        if gap and gap > 0 and s["start_ms"] is not None:
            parts.append(
                f'<rect x="{x(s["start_ms"] - gap):.1f}" y="{y + 14}" '
                f'width="{max(1.0, x(s["start_ms"]) - x(s["start_ms"] - gap)):.1f}" '
                f'height="4" fill="{GAP_COLOUR}"><title>gap before this sentence: '
                f"{gap:.0f} ms of silence</title></rect>"
            )
    if m["played"] is not None:
        px = x(m["played"])
        parts.append(
            f'<line x1="{px:.1f}" y1="{top - 4}" x2="{px:.1f}" y2="{height - 24}" '
            'stroke="#000" stroke-dasharray="4 3"/>'
        )
        parts.append(
            f'<text x="{px + 4:.1f}" y="{top - 8}" font-weight="bold">first audio '
            f"{m['played']:.0f} ms</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _html_table(summary: dict[str, Any]) -> str:
    head = "".join(f"<th>{m} {c}</th>" for m in MODES for c in ("median", "p90", "min", "max"))
    rows = []
    keyed = [(k, label, 0) for k, _, label in STAGES] + [(k, label, 0) for k, label in EXTRA]
    keyed += [("rtf", "RTF/sentence", 2), ("rtf_span", "RTF start..end", 2)]
    for key, label, digits in keyed:
        cells = "".join(
            f"<td>{_fmt(summary['modes'][m][key][c], digits)}</td>"
            for m in MODES
            for c in ("median", "p90", "min", "max")
        )
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    return f"<table><tr><th>stage (ms)</th>{head}</tr>{''.join(rows)}</table>"


def write_html(run: dict[str, Any], summary: dict[str, Any], path: Path) -> Path:
    picked = {m: representative(run, m) for m in MODES}
    ends = [
        s["end_ms"]
        for p in picked.values()
        if p
        for s in p["metrics"]["sentences"]
        if s["end_ms"] is not None
    ]
    ends += [p["metrics"]["turn_end"] or 0 for p in picked.values() if p]
    span = max(ends, default=1000.0) * 1.03 or 1000.0
    charts = []
    for mode in MODES:
        p = picked[mode]
        if p is None:
            charts.append(f"<h2>{mode}</h2><p>No successful trial.</p>")
            continue
        charts.append(
            f"<h2>{mode}: trial {html.escape(p['trial']['label'])} "
            f"(first audio closest to the median)</h2>" + waterfall_svg(run, mode, p, span)
        )
    legend = "".join(
        f'<span><i style="background:{c}"></i>{html.escape(meaning)}</span>'
        for _, _, c, meaning in SEGMENTS
    )
    legend += f'<span><i style="background:{GAP_COLOUR}"></i>gap: silence between sentences</span>'
    meta = {
        k: run[k]
        for k in (
            "started_at",
            "scenario",
            "voice",
            "speed",
            "lang",
            "synth",
            "output",
            "llm",
            "machine",
            "trials_per_mode",
            "order",
        )
    }
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in headline_lines(run, summary))
    doc = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>voicecli bench: {html.escape(run["scenario"])}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 7px; text-align: right; }}
th:first-child {{ text-align: left; }}
.legend span {{ margin-right: 1.2em; font-size: 12px; }}
.legend i {{ display: inline-block; width: 12px; height: 12px; margin-right: 4px;
  vertical-align: middle; }}
pre {{ background: #f6f6f6; padding: 0.6em; font-size: 12px; white-space: pre-wrap; }}
</style></head><body>
<h1>voicecli bench: streaming against buffered</h1>
<ul>{lines}</ul>
{_html_table(summary)}
<p class="legend">{legend}</p>
<p>Both charts share one time axis (ms after the LLM request). Ticks on the first row are
LLM text pieces as they arrived.</p>
{"".join(charts)}
<h2>Run</h2><pre>{html.escape(json.dumps(meta, indent=1, default=str))}</pre>
<h2>Reply</h2><pre>{html.escape(run.get("text") or "(from a real LLM: see the JSON)")}</pre>
</body></html>
"""
    path.write_text(doc, encoding="utf-8")
    return path


def write_png(run: dict[str, Any], summary: dict[str, Any], path: Path) -> Path | None:
    """The same waterfalls as a PNG, when matplotlib is installed; None otherwise."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    picked = [(m, representative(run, m)) for m in MODES]
    picked = [(m, p) for m, p in picked if p is not None]
    if not picked:
        return None
    rows = max(len(p["metrics"]["sentences"]) for _, p in picked) + 1
    fig, axes = plt.subplots(
        len(picked), 1, sharex=True, squeeze=False, figsize=(11, 1.2 + 0.32 * rows * len(picked))
    )
    for ax, (mode, p) in zip(axes[:, 0], picked, strict=True):
        m = p["metrics"]
        sentences = m["sentences"]
        for row, s in enumerate(sentences, start=1):
            for start_key, end_key, colour, _ in SEGMENTS:
                a, b = s[start_key], s[end_key]
                if a is not None and b is not None and b >= a:
                    ax.broken_barh(
                        [(a / 1000, max(b - a, 1) / 1000)], (row - 0.35, 0.7), color=colour
                    )
            gap = s["gap_before_ms"]
            if gap and s["start_ms"] is not None:
                ax.broken_barh(
                    [((s["start_ms"] - gap) / 1000, gap / 1000)],
                    (row + 0.2, 0.15),
                    color=GAP_COLOUR,
                )
        tokens = [t / 1000 for t in _token_ms(p["trial"])]
        ax.vlines(tokens, -0.3, 0.3, color="#4e79a7", linewidth=0.6)
        if m["played"] is not None:
            ax.axvline(m["played"] / 1000, color="black", linestyle="--", linewidth=1)
            ax.text(
                m["played"] / 1000,
                -0.9,
                f" first audio {m['played']:.0f} ms",
                fontsize=8,
                va="bottom",
            )
        ax.set_yticks(
            range(len(sentences) + 1),
            ["LLM"] + [f"sentence {s['index']}" for s in sentences],
            fontsize=7,
        )
        ax.invert_yaxis()
        ax.set_title(f"{mode}: {p['trial']['label']}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds after the LLM request")
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=meaning) for _, _, c, meaning in SEGMENTS]
    handles.append(Patch(color=GAP_COLOUR, label="gap: silence between sentences"))
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- load mode -----------------------------------------------------------------------------
def load_table(result: dict[str, Any]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=(
            f"voicecli bench --load: {result['scenario']}, {result['turns']} "
            f"turns per conversation, voice {result['voice']}; ms"
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in (
        "N",
        "ok",
        "TTFA p50",
        "TTFA p95",
        "gap p50",
        "gap p95",
        "gap max",
        "under\nruns",
        "err",
        "audio\n/wall",
    ):
        table.add_column(column, justify="right")
    for level in result["levels"]:
        s = level["stats"]
        table.add_row(
            str(level["n"]),
            f"{s['turns_ok']}/{s['turns']}",
            _fmt(s["ttfa_p50"]),
            _fmt(s["ttfa_p95"]),
            _fmt(s["gap_p50"]),
            _fmt(s["gap_p95"]),
            _fmt(s["gap_max"]),
            str(s["underruns"]),
            str(s["errors"]),
            _fmt(s["load_factor"], 2),
        )
    return table


def load_lines(result: dict[str, Any]) -> list[str]:
    limit = result["gap_limit_ms"]
    knee = result["knee_n"]
    tested = ", ".join(str(level["n"]) for level in result["levels"])
    lines = [
        "TTFA: ms from the turn's start (the LLM request) to the first audio frame. "
        "Gap: silence before a sentence on a virtual 1x playhead that starts at the first "
        "frame; an underrun is any frame that arrived after the playhead needed it. "
        "audio/wall: seconds of audio delivered per second, all conversations together.",
        (
            f"The p95 gap first exceeds {limit:.0f} ms at N={knee} on this machine."
            if knee is not None
            else f"The p95 gap stayed at or under {limit:.0f} ms for every N tested ({tested})."
        ),
    ]
    for level in result["levels"]:
        for error in level["stats"]["error_samples"]:
            lines.append(f"N={level['n']}: {error}")
    return lines


def print_load_report(result: dict[str, Any], console: Any) -> None:
    console.print(load_table(result))
    for line in load_lines(result):
        console.print(line, markup=False)


def write_load_outputs(result: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    return [write_json(result, out_dir / f"{stem}.json")]
