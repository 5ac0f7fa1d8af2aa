"""What voicecli shows in the terminal: streamed text, notes, timing tables.

Plain text when stdout is not a terminal: no escape codes in pipes or files.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from voicecli.timeline import (
    PER_SENTENCE,
    PLAYED,
    QUEUED,
    SENTENCE_READY,
    SYNTH_END,
    SYNTH_FIRST_CHUNK,
    SYNTH_START,
    Timeline,
)

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def stream_text(piece: str) -> None:
    """Show LLM text as it arrives (raw: partial markup must not be re-rendered)."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def note(message: str) -> None:
    err.print(f"[dim]{message}[/dim]" if err.is_terminal else message, markup=err.is_terminal)


def error(message: str) -> None:
    if err.is_terminal:
        err.print(f"[bold red]voicecli:[/] {message}", markup=True)
    else:
        err.print(f"voicecli: {message}", markup=False)


def _ms(timeline: Timeline, name: str, sentence: int | None = None) -> str:
    value = timeline.since_start_ms(name, sentence)
    return "-" if value is None else f"{value:.0f}"


def timings_table(timeline: Timeline) -> Table:
    table = Table(title=f"{timeline.label}: ms from turn start", title_justify="left")
    table.add_column("#", justify="right")
    labels = {SENTENCE_READY: "ready", SYNTH_START: "synth", SYNTH_FIRST_CHUNK: "chunk",
              SYNTH_END: "synth end", QUEUED: "queued", PLAYED: "played"}
    for name in PER_SENTENCE:
        table.add_column(labels[name], justify="right")
    table.add_column("text", no_wrap=True, overflow="ellipsis", max_width=40)
    texts = {e.sentence: e.detail.get("text", "") for e in timeline.events
             if e.name == SENTENCE_READY}
    for index in timeline.sentences():
        text = texts.get(index, "")
        table.add_row(str(index), *(_ms(timeline, n, index) for n in PER_SENTENCE),
                      text)
    return table


def summary_line(timeline: Timeline) -> str:
    s = timeline.summary()

    def f(key: str) -> str:
        return "-" if s[key] is None else f"{s[key]:.0f} ms"

    parts = [f"first token {f('first_token_ms')}", f"first sentence {f('first_sentence_ms')}",
             f"first queued {f('first_queued_ms')}", f"first played {f('first_played_ms')}",
             f"underruns {s['underruns']}"]
    if s["interrupted"]:
        parts.append("interrupted")
    return f"{timeline.label}: " + ", ".join(parts)


def show_timings(timeline: Timeline) -> None:
    err.print(timings_table(timeline))
    err.print(summary_line(timeline), markup=False)
