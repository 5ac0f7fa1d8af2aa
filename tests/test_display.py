"""What the terminal shows while a reply is heard: the sentence being heard, and the
word being heard within it, readable with colours and without them (NO_COLOR)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from voicecli.display import LiveReply, Progress, SpeakingStatus

REPLY = "First things first.\nThe moon is 384,400 km away, and it drifts further every year."
SENTENCES = {
    0: "First things first.",
    1: "\nThe moon is 384,400 km away, and it drifts further every year.",
}


def drawn(view, progress: Progress, *, no_color: bool, width: int = 80) -> Text:
    """What ``view`` draws for ``progress`` on a terminal, read back with its styles."""
    out = Console(file=io.StringIO(), force_terminal=True, width=width, no_color=no_color)
    view.console = out
    view.start(lambda: progress)
    try:
        out.begin_capture()
        out.print(view.render())
        return Text.from_ansi(out.end_capture())
    finally:
        view.finish(REPLY, REPLY, False)


def styled(text: Text, test) -> list[str]:
    return [text.plain[s.start : s.end] for s in text.spans if test(s.style)]


def underlined(text: Text) -> list[str]:
    return styled(text, lambda style: getattr(style, "underline", False))


@pytest.mark.parametrize("no_color", [False, True])
def test_the_reply_underlines_the_word_heard_in_the_bold_sentence(no_color: bool) -> None:
    at = SENTENCES[1].index("384,400")
    progress = Progress("speaking", SENTENCES, 1, True, 2.0, True, (at, at + 7))
    view = LiveReply()
    view.text(REPLY)
    text = drawn(view, progress, no_color=no_color)
    assert set(underlined(text)) == {"384,400"}
    bold = "".join(styled(text, lambda style: getattr(style, "bold", False)))
    assert "The moon is" in bold and "First things" not in bold
    colours = [s for s in text.spans if getattr(s.style, "color", None) is not None]
    assert bool(colours) != no_color  # NO_COLOR: bold and underline only


def test_the_status_line_of_say_keeps_the_word_heard_in_view_on_80_columns() -> None:
    long = " ".join(["word"] * 30) + " finale and more."
    at = long.index("finale")
    progress = Progress("speaking", {0: long}, 0, True, 9.0, True, (at, at + 6))
    text = drawn(SpeakingStatus(), progress, no_color=True, width=80)
    first = text.plain.splitlines()[0]
    assert len(first) <= 80 and first.startswith("…")
    assert set(underlined(text)) == {"finale"}
