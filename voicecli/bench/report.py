"""What ``voicecli bench`` prints and writes: the tables, the headline, JSON, and
the load-mode table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from voicecli.bench.metrics import (
    DELIVERIES,
    EXTRA,
    TERMINAL_STAGES,
    fmt,
    headline_lines,
    summarize,
)
from voicecli.bench.waterfall import write_html, write_png


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
    rows = [(k, label, 0) for k, _, label in TERMINAL_STAGES] + [
        (k, label, 0) for k, label in EXTRA
    ]
    rows += [("rtf", "RTF/sentence", 2), ("rtf_span", "RTF start..end", 2)]
    for key, label, digits in rows:
        for n, mode in enumerate(DELIVERIES):
            s = summary["modes"][mode][key]
            name = label if n == 0 else ""
            style = "bold" if key == "played" else None
            table.add_row(
                name,
                mode,
                *(fmt(s[c], digits) for c in ("median", "p90", "min", "max")),
                style=style,
            )
    return table


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


# --- load mode -----------------------------------------------------------------------------
def load_table(result: dict[str, Any]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=(
            f"voicecli bench load: {result['scenario']}, {result['turns']} "
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
            fmt(s["ttfa_p50"]),
            fmt(s["ttfa_p95"]),
            fmt(s["gap_p50"]),
            fmt(s["gap_p95"]),
            fmt(s["gap_max"]),
            str(s["underruns"]),
            str(s["errors"]),
            fmt(s["load_factor"], 2),
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
