"""The line typed key by key beside the microphone's meter (chat --listen)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from voicecli.line_editor import LineEditor


def test_keys_make_lines():
    editor = LineEditor()
    editor.feed("helx")
    editor.feed("\x7flo")  # backspace
    editor.feed("\x1b[D there")  # an arrow key is ignored, not typed
    assert editor.text == "hello there" and editor.lines == []
    editor.feed("\rsecond\x15third\n")  # Ctrl-U clears the line
    assert editor.lines == ["hello there", "third"] and editor.text == ""


def test_ctrl_d_ends_only_an_empty_line():
    editor = LineEditor()
    editor.feed("abc\x04")
    assert not editor.ended and editor.text == "abc"
    editor.feed("\r\x04")
    assert editor.ended and editor.lines == ["abc"]


@given(st.text())
def test_whatever_is_typed_the_text_is_printable(keys):
    editor = LineEditor()
    editor.feed(keys)
    assert all(part.isprintable() for part in [editor.text, *editor.lines])
