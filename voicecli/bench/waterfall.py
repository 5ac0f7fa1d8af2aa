"""The bench's waterfall charts: one representative turn per mode, sentence by
sentence, as SVG in an HTML page and, when matplotlib is installed, as a PNG."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from voicecli.bench.metrics import (
    DELIVERIES,
    EXTRA,
    TERMINAL_STAGES,
    _first,
    fmt,
    headline_lines,
    representative,
)
from voicecli.timeline import (
    REQUEST_SENT,
)

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
    head = "".join(f"<th>{m} {c}</th>" for m in DELIVERIES for c in ("median", "p90", "min", "max"))
    rows = []
    keyed = [(k, label, 0) for k, _, label in TERMINAL_STAGES] + [
        (k, label, 0) for k, label in EXTRA
    ]
    keyed += [("rtf", "RTF/sentence", 2), ("rtf_span", "RTF start..end", 2)]
    for key, label, digits in keyed:
        cells = "".join(
            f"<td>{fmt(summary['modes'][m][key][c], digits)}</td>"
            for m in DELIVERIES
            for c in ("median", "p90", "min", "max")
        )
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    return f"<table><tr><th>stage (ms)</th>{head}</tr>{''.join(rows)}</table>"


def write_html(run: dict[str, Any], summary: dict[str, Any], path: Path) -> Path:
    picked = {m: representative(run, m) for m in DELIVERIES}
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
    for mode in DELIVERIES:
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
    picked = [(m, representative(run, m)) for m in DELIVERIES]
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
        title = f"{mode}: {p['trial']['label']}"
        if m["played"] is not None:
            ax.axvline(m["played"] / 1000, color="black", linestyle="--", linewidth=1)
            # In the title: a label at the line would run into the title at early times.
            title += f", first audio (dashed) {m['played']:.0f} ms"
        ax.set_yticks(
            range(len(sentences) + 1),
            ["LLM"] + [f"sentence {s['index']}" for s in sentences],
            fontsize=7,
        )
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds after the LLM request")
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=meaning) for _, _, c, meaning in SEGMENTS]
    handles.append(Patch(color=GAP_COLOUR, label="gap: silence between sentences"))
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
