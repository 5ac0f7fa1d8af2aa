"""Markdown line structure for the segmenter: which lines start a unit (a blank line,
a heading, a list item, a table row, a code fence), decided from a bounded look at the
line's beginning so that the answer never depends on how the stream is chunked."""

from __future__ import annotations

import re

from voicecli.segment.rules import Decision

# Line starts: how far to look, and which first characters can start a structure.
_LINE_PEEK = 20
_FENCE_PEEK = 64
_STRUCT_START = frozenset("`~#-*+•|0123456789\r")
_BLANK = re.compile(r"[ \t\r]*\n")
# The marker's length must be known (a closing fence must be as long), hence the lookahead.
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}(?=[^`])|~{3,}(?=[^~]))")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t\r]*\n")
_HEADING_START = re.compile(r" {0,3}#{1,6}[ \t\n]")
_ITEM = re.compile(r"[ \t]{0,8}(?:[-*+•]|\d{1,3}[.)])[ \t]")
_TABLE_ROW = re.compile(r"[ \t]{0,3}\|")
_PLAIN = ("text", "")
_LINE_KINDS = (
    ("blank", _BLANK),
    ("fence", _FENCE_OPEN),
    ("heading", _HEADING_START),
    ("item", _ITEM),
    ("table", _TABLE_ROW),
)


def _line_kind(line: str) -> tuple[str, str] | None:
    """The structure a line starts with, and the text that marks it."""
    for kind, pattern in _LINE_KINDS:
        m = pattern.match(line)
        if m:
            return kind, m.group(m.lastindex or 0)
    return None


def line_window(buf: str, i: int, peek: int, final: bool) -> str | None:
    """The line at ``i`` up to ``peek`` chars, with "\\n" appended if it ended there;
    None while that much has not arrived."""
    nl = buf.find("\n", i, i + peek)
    if nl != -1:
        return buf[i : nl + 1]
    if len(buf) - i >= peek:
        return buf[i : i + peek]
    if final:
        return buf[i:] + "\n"
    return None


def classify_line(buf: str, i: int, final: bool) -> tuple[str, str] | None:
    """The kind of the line starting at ``i`` and its marker; None if not yet known."""
    line = line_window(buf, i, _LINE_PEEK, final)
    if line is not None:
        return _line_kind(line) or _PLAIN
    # The structures start with different characters and none of their patterns looks
    # past its end, so a match on a partial line stands whatever follows.
    head = buf[i:]
    kind = _line_kind(head)
    if kind:
        return kind
    stripped = head.lstrip(" \t")
    if stripped and stripped[0] not in _STRUCT_START:
        return _PLAIN
    return None


def fence_closes(buf: str, i: int, fence: str, final: bool) -> Decision:
    """Does the line at ``i`` close the code block opened with ``fence``?"""
    line = line_window(buf, i, _FENCE_PEEK, final)
    if line is None:
        head = buf[i:].lstrip(" ")
        if head and head[0] != fence[0]:
            return False
        return None
    m = _FENCE_CLOSE.match(line)
    return bool(m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence))
