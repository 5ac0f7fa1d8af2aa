"""Emoji and symbols dropped, and the punctuation and spacing that earlier rules
leave behind tidied, keeping the unit's final stop."""

from __future__ import annotations

import re
import unicodedata

TERMINAL = ".!?…:;,"

_EMOJI_EXTRA = frozenset("\ufe0f\ufe0e\u200d\u20e3")

_NON_ASCII = re.compile(r"[^\x00-\x7f]")  # emoji and symbols are never ASCII

_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?…])")

_PUNCT_AFTER_PUNCT = re.compile(r"(?<=[.,;:!?])\s*[,;:]+")

_STOP_AFTER_COMMA = re.compile(r"[,;:]\s*\.(?!\.)")

_DOUBLE_STOP = re.compile(r"(?<=[.!?])\s+\.(?!\.)")

_LEADING_PUNCT = re.compile(r"^(?:[\s,.;:!?…–—]|-(?!\d))+")


def _is_emoji(ch: str) -> bool:
    if ch in _EMOJI_EXTRA or "\U0001f3fb" <= ch <= "\U0001f3ff":
        return True
    return unicodedata.category(ch) == "So"


def drop_symbols(text: str) -> str:
    text = text.replace("≈", " approximately ").replace("±", " plus or minus ")
    return _NON_ASCII.sub(lambda m: " " if _is_emoji(m.group(0)) else m.group(0), text)


# Runs of marks and unbroken words are spoken far longer than they are written (Kokoro
# pauses at every dot, and says "%" as a word), so a run counts as one mark of each kind in it,
# and a word as long as a hash or a blob is cut.
MAX_WORD = 40

_MARK = r"[^\w\s\ue000-\uf8ff]"  # private use: the code rules' protection markers

_MARK_RUN = re.compile(f"{_MARK}(?:\\s*{_MARK}){{3,}}")

_LONG_WORD = re.compile(rf"\w{{{MAX_WORD + 1},}}")


def bound_runs(text: str) -> str:
    text = _MARK_RUN.sub(_one_of_each, text)
    return _LONG_WORD.sub(lambda m: m.group(0)[:MAX_WORD] + "…", text)


def _one_of_each(run: re.Match[str]) -> str:
    marks = "".join(dict.fromkeys("".join(run.group(0).split())))
    return "…" if set(marks) <= {".", "…"} else marks[:2]


def terminal_of(text: str) -> str:
    stripped = text.rstrip()
    return stripped[-1] if stripped and stripped[-1] in ".!?…" else ""


def tidy(text: str, ending: str) -> str:
    text = SPACES.sub(" ", text.replace("\n", " "))
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _PUNCT_AFTER_PUNCT.sub("", text)
    text = _STOP_AFTER_COMMA.sub(".", text)
    text = _DOUBLE_STOP.sub("", text)
    text = _LEADING_PUNCT.sub("", text).strip()
    if ending and text and text[-1] not in TERMINAL and WORD_CHAR.search(text):
        text += ending
    return text


WORD_CHAR = re.compile(r"\w")

SPACES = re.compile(r"[ \t\u00a0]+")
