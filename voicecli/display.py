"""What voicecli shows in the terminal: the live reply, status line, notes, timing tables.

Plain text when stdout is not a terminal: no escape codes in pipes or files.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

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


CUT_OFF_MARK = "[interrupted]"
# Bold and underline stay when NO_COLOR takes the colours away: the sentence heard is
# bold, and the word heard in it underlined as well.
SENTENCE_STYLE = "bold bright_cyan"
WORD_STYLE = "bold underline bright_white on blue"


@dataclass
class Progress:
    """Where a turn stands, as the live view shows it (built by the session)."""

    state: str  # thinking | speaking | paused | interrupted
    sentences: dict[int, str] = field(default_factory=dict)  # index -> displayed text
    playing: int | None = None  # the sentence the listener hears now
    text_done: bool = False  # the source has finished: the sentence count is final
    spoken_seconds: float = 0.0
    keys: bool = True  # single keys control playback
    word: tuple[int, int] | None = None  # the word heard, in its sentence's displayed text


STATE_STYLES = {
    "thinking": "yellow",
    "speaking": "green",
    "paused": "cyan",
    "interrupted": "red",
    "listening": "blue",
    "your turn": "blue",
}
KEYS_HINT = "space pause · s skip · q quit · any other key stop"
NO_KEYS_HINT = "Ctrl-C stops"


def status_line(p: Progress) -> Text:
    """``● speaking  sentence 2/5 · 0:04   space pause · …`` on one line."""
    line = Text()
    line.append(f"● {p.state}", style=f"bold {STATE_STYLES.get(p.state, '')}")
    if p.playing is not None and p.sentences:
        total = f"{len(p.sentences)}" if p.text_done else f"{len(p.sentences)}+"
        line.append(f"  sentence {p.playing + 1}/{total}")
    if p.spoken_seconds >= 1.0:
        minutes, seconds = divmod(int(p.spoken_seconds), 60)
        line.append(f" · {minutes}:{seconds:02d} spoken")
    line.append(f"   {KEYS_HINT if p.keys else NO_KEYS_HINT}", style="dim")
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


class TurnView:
    """How one turn is shown. This base shows nothing (say with stderr not a terminal)."""

    def start(self, progress: Callable[[], Progress]) -> None:
        pass

    def text(self, piece: str) -> None:
        pass

    def finish(self, text: str, heard: str, interrupted: bool) -> None:
        pass


class DeferredView(TurnView):
    """Another view, shown only from ``show`` on (what it was told before is replayed
    then); never shown, it shows nothing."""

    def __init__(self, inner: TurnView) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., None], tuple]] | None = []  # None once shown

    def _call(self, method: Callable[..., None], *args: object) -> None:
        with self._lock:
            if self._calls is not None:
                self._calls.append((method, args))
                return
        method(*args)

    def show(self) -> None:
        with self._lock:
            calls, self._calls = self._calls or [], None
            for method, args in calls:
                method(*args)

    def start(self, progress: Callable[[], Progress]) -> None:
        self._call(self.inner.start, progress)

    def text(self, piece: str) -> None:
        self._call(self.inner.text, piece)

    def finish(self, text: str, heard: str, interrupted: bool) -> None:
        self._call(self.inner.finish, text, heard, interrupted)


class PlainReply(TurnView):
    """Pipes and files: the reply as it streams, nothing else on stdout."""

    def text(self, piece: str) -> None:
        stream_text(piece)

    def finish(self, text: str, heard: str, interrupted: bool) -> None:
        sys.stdout.write("\n")
        sys.stdout.flush()
        if interrupted:
            note("(interrupted: only what was heard is remembered)")


class LiveReply(TurnView):
    """The reply streams in, and the sentence being heard is highlighted.

    The highlight follows the player's play position (see Session.progress), so it
    moves when the sound does, not when the text arrives. At the end the live region
    gives way to the reply rendered as Markdown, or, after an interruption, to the
    part that was heard followed by the struck-out rest.
    """

    def __init__(self, console: Console | None = None) -> None:
        # Not ``out``: that one soft-wraps for raw streaming, this one wraps at words.
        self.console = console or Console(highlight=False)
        self._text = ""
        self._lock = threading.Lock()
        self._offsets: dict[int, tuple[int, int]] = {}  # sentence -> span in the text
        self._leads: dict[int, int] = {}  # sentence -> whitespace before its span
        self._cursor = 0
        self._progress: Callable[[], Progress] | None = None
        self._live: Live | None = None

    def start(self, progress: Callable[[], Progress]) -> None:
        self._progress = progress
        self._live = Live(
            console=self.console,
            get_renderable=self.render,
            refresh_per_second=8,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def text(self, piece: str) -> None:
        with self._lock:
            self._text += piece

    def _locate(self, text: str, sentences: dict[int, str]) -> None:
        for index in sorted(i for i in sentences if i not in self._offsets):
            shown = sentences[index].strip()
            at = text.find(shown, self._cursor) if shown else -1
            if at < 0:
                continue
            self._offsets[index] = (at, at + len(shown))
            self._leads[index] = len(sentences[index]) - len(sentences[index].lstrip())
            self._cursor = at + len(shown)

    def render(self) -> RenderableType:
        """What the live region shows now."""
        with self._lock:
            text = self._text
        p = self._progress() if self._progress is not None else Progress("thinking")
        self._locate(text, p.sentences)
        body = Text(text)
        current = self._offsets.get(p.playing) if p.playing is not None else None
        if current is not None:
            body.stylize("dim", current[1])
            body.stylize(SENTENCE_STYLE, *current)
            if p.word is not None and p.playing is not None:
                base = current[0] - self._leads.get(p.playing, 0)
                body.stylize(WORD_STYLE, base + p.word[0], base + p.word[1])
        elif p.state == "thinking":
            body.stylize("dim")
        return Group(self._window(body, current), status_line(p))

    def _window(self, body: Text, current: tuple[int, int] | None) -> RenderableType:
        """As many lines as fit above the status line, keeping the heard sentence in view."""
        width = self.console.width
        room = max(3, self.console.height - 2)
        lines = body.wrap(self.console, width)
        if len(lines) <= room:
            return body
        first = len(lines) - room
        if current is not None:
            at = len(Text(body.plain[: current[0]]).wrap(self.console, width)) - 1
            first = min(first, max(0, at - 1))
        return Group(*lines[first : first + room])

    def finish(self, text: str, heard: str, interrupted: bool) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if not interrupted:
            self.console.print(Markdown(text) if text.strip() else Text(""))
            return
        if self._progress is not None:
            self._locate(text, self._progress().sentences)
        shown = _strike_unheard(text, [self._offsets[i] for i in sorted(self._offsets)], heard)
        shown.rstrip()
        shown.append(f" {CUT_OFF_MARK}", style="bold red")
        self.console.print(shown)


class SpeakingStatus(TurnView):
    """``say``: one status line on stderr with progress and the sentence being heard."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or err
        self._live: Live | None = None
        self._progress: Callable[[], Progress] | None = None

    def start(self, progress: Callable[[], Progress]) -> None:
        self._progress = progress
        self._live = Live(
            console=self.console,
            get_renderable=self.render,
            refresh_per_second=4,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def render(self) -> RenderableType:
        """What the live region shows now."""
        p = self._progress() if self._progress is not None else Progress("thinking")
        line = status_line(p)
        if p.playing is not None:
            # Whitespace as spaces, one for one, so that the word's offsets still hold.
            sentence = re.sub(r"\s", " ", p.sentences.get(p.playing, ""))
            now = Text(sentence, style="italic")
            if p.word is not None:
                now.stylize(WORD_STYLE, *p.word)
                width = self.console.width
                if p.word[1] > width - 2:  # out of sight: show the line from before it
                    now = Text("…", style="italic") + now[max(0, p.word[0] - width // 3) :]
            now.no_wrap = True
            now.overflow = "ellipsis"
            return Group(now, line)
        return line

    def finish(self, text: str, heard: str, interrupted: bool) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _strike_unheard(text: str, spans: list[tuple[int, int]], heard: str) -> Text:
    """``text`` with the words of each sentence that were not heard struck out.

    ``heard`` is the heard part of each sentence, joined in order: a sentence matches
    it word by word until the first word that was not heard (skipped or cut off).
    """
    shown = Text(text)
    heard_words = heard.split()
    taken = 0
    for start, end in spans:
        words = list(re.finditer(r"\S+", text[start:end]))
        count = 0
        while (
            count < len(words)
            and taken + count < len(heard_words)
            and heard_words[taken + count] == words[count].group()
        ):
            count += 1
        taken += count
        if count < len(words):
            cut = start + (words[count - 1].end() if count else 0)
            shown.stylize("dim strike", cut, end)
    return shown


def turn_view(*, reply: bool) -> TurnView:
    """The view for a chat reply (``reply``) or for ``say``, for the terminal at hand."""
    if reply:
        return LiveReply() if out.is_terminal else PlainReply()
    return SpeakingStatus() if err.is_terminal else TurnView()


def your_turn() -> None:
    """The state line above the prompt of typed chat: it waits for typing (the
    microphone is off; ``ListenStatus`` is the line of ``chat --listen``)."""
    if err.is_terminal:
        line = Text("● your turn", style=f"bold {STATE_STYLES['your turn']}")
        line.append("   type a message · /help for commands · Ctrl-D quits", style="dim")
        err.print(line)


class ListenStatus:
    """The state line of ``chat --listen`` while it waits for the user: what the
    microphone hears (a level meter), and what is being typed."""

    BARS = " ▁▂▃▄▅▆▇█"

    def __init__(self, poll: Callable[[], tuple[str, float, str]]) -> None:
        self.poll = poll  # () -> (state, level in dBFS, text typed so far)
        self.live: Live | None = None

    def start(self) -> None:
        if err.is_terminal and self.live is None:
            self.live = Live(
                get_renderable=self._render, console=err, refresh_per_second=12, transient=True
            )
            self.live.start()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _render(self) -> Text:
        state, level, typed = self.poll()
        # -60 dBFS (a quiet room) to -10 (loud speech), in eight steps.
        step = min(len(self.BARS) - 1, max(0, round((level + 60) / 50 * (len(self.BARS) - 1))))
        line = Text(f"● {state:<12}", style=f"bold {STATE_STYLES.get('listening', '')}")
        line.append(self.BARS[: step + 1].ljust(len(self.BARS)), style="green")
        line.append(f" {level:5.0f} dB  ", style="dim")
        if typed:
            line.append(f"you> {typed}▌")
        else:
            line.append("speak, or type · /help · Ctrl-D quits", style="dim")
        return line


def spoken(text: str, capped: bool) -> None:
    """What the user said aloud, as the conversation takes it."""
    note_capped = " (cut: you spoke without a pause for too long)" if capped else ""
    if out.is_terminal:
        out.print(Text("you (voice)> ", style="bold") + Text(text) + Text(note_capped, "dim"))
    else:
        out.print(f"you (voice)> {text}{note_capped}", markup=False)


def typed(text: str) -> None:
    """A line typed beside the microphone, kept above the reply (on a terminal; from a
    pipe nothing was echoed, as with a plain prompt)."""
    if out.is_terminal:
        out.print(Text("you> ", style="bold") + Text(text))


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
    table = Table(
        title=f"{timeline.label}: ms from turn start",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("#", justify="right", no_wrap=True, min_width=2)
    labels = {
        SENTENCE_READY: "ready",
        SYNTH_START: "synth",
        SYNTH_FIRST_CHUNK: "chunk",
        SYNTH_END: "done",
        QUEUED: "queued",
        PLAYED: "played",
    }
    # The figures must stay whole on an 80-column pipe; the text gives way.
    for name in PER_SENTENCE:
        table.add_column(labels[name], justify="right", no_wrap=True, min_width=6)
    table.add_column("text", no_wrap=True, overflow="ellipsis", max_width=28)
    texts = {
        e.sentence: e.detail.get("text", "") for e in timeline.events if e.name == SENTENCE_READY
    }
    for index in timeline.sentences():
        text = texts.get(index, "")
        table.add_row(str(index), *(_ms(timeline, n, index) for n in PER_SENTENCE), text)
    return table


def summary_line(timeline: Timeline) -> str:
    s = timeline.summary()

    def f(key: str) -> str:
        return "-" if s[key] is None else f"{s[key]:.0f} ms"

    parts = [
        f"first token {f('first_token_ms')}",
        f"first sentence {f('first_sentence_ms')}",
        f"first queued {f('first_queued_ms')}",
        f"first played {f('first_played_ms')}",
        f"underruns {s['underruns']}",
    ]
    if s["interrupted"]:
        parts.append("interrupted")
    return f"{timeline.label}: " + ", ".join(parts)


def show_timings(timeline: Timeline) -> None:
    err.print(timings_table(timeline))
    err.print(summary_line(timeline), markup=False)
