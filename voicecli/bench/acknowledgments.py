"""Which units of a reply only acknowledge the question ("Sure,", "Of course!", "Great
question."): the benches report the first sound of the first unit that is *not* one
beside the first sound, since an opener heard early is progress, not an answer.

The list is short on purpose: openers a chat model starts a reply with, and nothing
that could carry content ("Yes" answers a yes/no question, so it is not here; "Well"
begins sentences of every kind). A unit is an acknowledgment when every clause of it,
punctuation aside, is one of these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

ACKNOWLEDGMENTS = frozenset(
    {
        "sure",
        "sure thing",
        "of course",
        "certainly",
        "absolutely",
        "okay",
        "ok",
        "alright",
        "all right",
        "got it",
        "no problem",
        "great question",
        "good question",
        "happy to help",
        "i'd be happy to help",
        "glad you asked",
        "let me explain",
        "here you go",
    }
)

_CLAUSE = re.compile(r"[,.!?;:\u2014\u2013]+|\s-\s")
_SPACES = re.compile(r"\s+")


def is_acknowledgment(unit: str) -> bool:
    """Whether ``unit`` (a displayed sentence or clause) only acknowledges."""
    clauses = [
        _SPACES.sub(" ", c).strip().lower().replace("\u2019", "'") for c in _CLAUSE.split(unit)
    ]
    clauses = [c for c in clauses if c]
    return bool(clauses) and all(c in ACKNOWLEDGMENTS for c in clauses)


def first_substantive(units: Iterable[tuple[int, str]]) -> int | None:
    """The index of the first unit, in index order, that is not an acknowledgment."""
    for index, text in sorted(units):
        if not is_acknowledgment(text):
            return index
    return None
