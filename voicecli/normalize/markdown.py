"""Markdown and HTML to plain text: links to their text, emphasis dropped, and each
structural line (heading, list item, table row, quote) ended with a full stop."""

from __future__ import annotations

import html
import re

from voicecli.normalize.code import BLOCK, PROTECT_CLOSE
from voicecli.normalize.tidy import TERMINAL

_HTML_BREAK = re.compile(r"<br\s*/?>", re.I)

_HTML_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")

_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")

_LINK = re.compile(r"\[([^\]]*)\]\((?:[^()\s]|\([^)]*\))*(?:\s+\"[^\"]*\")?\)")

_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")

_FOOTNOTE = re.compile(r"\[\^[^\]]+\]")

_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^>\s]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>")

_REF_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*\S+.*$")

_THEMATIC_BREAK = re.compile(r"^\s*([-*_=])(?:\s*\1){2,}\s*$")

_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")

_HEADING = re.compile(r"^\s{0,3}#{1,6}(?:\s+|$)(.*?)(?:\s+#+)?\s*$")

_QUOTE = re.compile(r"^\s*(?:>\s?)+")

_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|[a-z][.)])\s+(?:\[[ xX]\]\s+)?")

_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~>])")

_EMPHASIS = [
    re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*", re.S),
    re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.S),
    re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", re.S),
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)", re.S),
    re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)", re.S),
    re.compile(r"~~(?=\S)(.+?)(?<=\S)~~", re.S),
]

_TIMES_SIGN = re.compile(r"(?<=\d)\s*[*×]\s*(?=\d)")

_STRAY_MARKUP = re.compile(r"\*+|~~+|(?<!\w)_+|_+(?!\w)")


def markup_to_text(text: str) -> str:
    text = _HTML_BREAK.sub("\n", text)
    text = _HTML_TAG.sub("", text)
    text = html.unescape(text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _REF_LINK.sub(r"\1", text)
    text = _FOOTNOTE.sub("", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _join_lines(text.split("\n"))
    text = _ESCAPE.sub(r"\1", text)
    text = _TIMES_SIGN.sub(" times ", text)
    for pattern in _EMPHASIS:
        text = pattern.sub(r"\1", text)
    return _STRAY_MARKUP.sub("", text)


def _join_lines(lines: list[str]) -> str:
    """Join a unit's lines; a structural line (heading, list item, table row) gets a stop."""
    spoken: list[tuple[str, bool]] = []
    for line in lines:
        said, structural = _line_to_text(line)
        if said.strip():
            spoken.append((said.strip(), structural))
    parts: list[str] = []
    for i, (said, structural) in enumerate(spoken):
        followed_by_structure = i + 1 < len(spoken) and spoken[i + 1][1]
        # Verbatim code is left exactly as written.
        ends_open = said[-1] not in TERMINAL and not said.endswith(PROTECT_CLOSE)
        if (structural or followed_by_structure) and ends_open:
            said += "."
        parts.append(said)
    return " ".join(parts)


def _line_to_text(line: str) -> tuple[str, bool]:
    if (
        _THEMATIC_BREAK.match(line)
        or _REF_DEFINITION.match(line)
        or ("|" in line and _TABLE_SEPARATOR.match(line))
    ):
        return "", False
    heading = _HEADING.match(line)
    if heading:
        return heading.group(1), True
    stripped = line.strip()
    if stripped.startswith("|") or stripped.count("|") >= 2:
        cells = [cell.strip() for cell in stripped.strip("|").split("|")]
        return ", ".join(cell for cell in cells if cell), True
    if line.startswith(BLOCK):
        return line[len(BLOCK) :], True
    line = _QUOTE.sub("", line)
    item = _LIST_MARKER.match(line)
    if item:
        return line[item.end() :], True
    return line, False
