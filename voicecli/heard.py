"""What reached the listener, read off a sink's ``Playback``: the sentence and word heard
now (for the live view), and the displayed text heard so far (for the chat history after
an interrupt, skip or quit).

A synthesizer times the words it spoke (``Word``), in the spoken text. The listener saw
the displayed text, which the normalizer rewrote ("**21** km" is spoken "twenty-one
kilometres"), so each displayed word takes the times of the spoken words aligned with
it. Without word timings, the heard part of a sentence cut short is estimated from its
characters.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from voicecli.frames import Playback, Sentence, Span, Word

_SHOWN_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class ShownWord:
    """A word of a sentence's displayed text, and when it was spoken."""

    text: str
    chars: tuple[int, int]  # its place in ``Sentence.display``
    start: int  # samples from the sentence's first
    end: int


@dataclass(frozen=True)
class NowPlaying:
    sentence: int | None = None  # between two sentences: the last one started
    word: tuple[int, int] | None = None  # the word heard, in that sentence's display
    seconds: float = 0.0  # heard since the turn's first sample


def now_playing(playback: Playback, sentences: Iterable[Sentence] = ()) -> NowPlaying:
    """The sentence being heard and, if its words are timed, the word (between two
    words: the last one begun)."""
    spans = playback.spans
    if not spans:
        return NowPlaying()
    playing = None
    for span in spans:
        if span.start <= playback.position:
            playing = span
    seconds = max(0, playback.position - spans[0].start) / playback.sample_rate
    if playing is None:
        return NowPlaying(None, None, seconds)
    word = None
    sentence = next((s for s in sentences if s.index == playing.sentence), None)
    if sentence is not None and playing.words:  # an estimate would light the wrong word
        shown = shown_words(sentence, playing.words, _length(playing))
        at = playback.position - playing.start
        begun = [w for w in shown if w.start <= at and w.end > w.start]
        word = begun[-1].chars if begun else None
    return NowPlaying(playing.sentence, word, seconds)


def heard_text(playback: Playback, sentences: Iterable[Sentence]) -> str:
    """The displayed text of every sentence, or part of one, that reached the listener."""
    by_index = {s.index: s for s in sentences}
    heard: list[str] = []
    for span in playback.spans:
        sentence = by_index.get(span.sentence)
        # A skipped sentence was heard only up to the skip.
        limit = (
            playback.position
            if span.skipped_at is None
            else min(playback.position, span.skipped_at)
        )
        if sentence is None or span.start >= limit:
            continue
        if span.end is not None and span.end <= limit:
            heard.append(sentence.display)
        else:
            heard.append(_said_by(timed_words(sentence, span), limit - span.start))
    return " ".join(h for h in heard if h)


def _said_by(words: tuple[ShownWord, ...], position: int) -> str:
    """The ``words`` said by ``position`` (samples into their sentence): up to the first
    that was not, so that the history never has a hole."""
    return " ".join(w.text for w in itertools.takewhile(lambda w: w.end <= position, words))


def timed_words(sentence: Sentence, span: Span) -> tuple[ShownWord, ...]:
    """The displayed words of ``sentence``, which lies on ``span``, and when each is said:
    from the synthesizer's word timings, or without them estimated from its characters
    over its (expected) samples; none while neither is known."""
    if span.words:
        return shown_words(sentence, span.words, _length(span))
    end = span.expected_end()
    if end is None or end <= span.start:
        return ()
    return _estimated(sentence.display, end - span.start)


def _length(span: Span) -> int | None:
    """The sentence's samples, once its last chunk is written."""
    return None if span.end is None else span.end - span.start


@functools.lru_cache(maxsize=256)
def shown_words(
    sentence: Sentence, words: tuple[Word, ...], length: int | None = None
) -> tuple[ShownWord, ...]:
    """Each displayed word of ``sentence``, timed by the spoken ``words`` aligned with it.

    The spoken and displayed texts are aligned character by character; a displayed word
    is spoken from the first spoken word that overlaps it to the end of the last. One
    with no spoken word of its own (a bullet, an emoji, markup) is taken as said when
    the next timed word begins, or at the sentence's end (``length``; while that is
    unknown, never). Words not yet timed (``words`` is what was written so far) count
    as not said.
    """
    display, spoken = sentence.display, sentence.text
    shown = list(_SHOWN_WORD.finditer(display))
    to_display = _alignment(spoken, display)
    times: list[list[int] | None] = [None] * len(shown)
    starts = [m.start() for m in shown]
    cursor = 0
    for word in words:
        at = spoken.find(word.text, cursor)
        if at < 0:
            at = spoken.casefold().find(word.text.casefold(), cursor)
            if at < 0:
                continue  # not in this text: no place to put it
        cursor = at + len(word.text)
        lo, hi = to_display(at, cursor)
        if lo >= hi:
            continue  # spoken only (a placeholder's words): no displayed word
        first = max(0, bisect.bisect_right(starts, lo) - 1)
        for i in range(first, len(shown)):
            if shown[i].start() >= hi:
                break
            if shown[i].end() <= lo:
                continue
            span = times[i]
            times[i] = (
                [word.start, word.end]
                if span is None
                else [min(span[0], word.start), max(span[1], word.end)]
            )
    result = []
    following: int | None = length  # the start of the next timed word
    for i in range(len(shown) - 1, -1, -1):
        span = times[i]
        if span is not None:
            following = span[0]
        elif following is None:
            continue  # after every word timed so far, in a sentence still being written
        start, end = span if span is not None else (following, following)
        result.append(ShownWord(shown[i].group(), (shown[i].start(), shown[i].end()), start, end))
    return tuple(reversed(result))


def _alignment(spoken: str, display: str) -> Callable[[int, int], tuple[int, int]]:
    """A map from a range of ``spoken`` to the range of ``display`` it says."""
    matcher = difflib.SequenceMatcher(None, spoken.casefold(), display.casefold(), autojunk=False)
    opcodes = matcher.get_opcodes()

    def to_display(a: int, b: int) -> tuple[int, int]:
        lo, hi = len(display), 0
        for tag, i1, i2, j1, j2 in opcodes:
            if i2 <= a or i1 >= b or tag in ("insert", "delete"):
                continue
            if tag == "equal":
                lo = min(lo, j1 + max(a, i1) - i1)
                hi = max(hi, j1 + min(b, i2) - i1)
            else:  # replaced: the whole displayed range says it
                lo, hi = min(lo, j1), max(hi, j2)
        return lo, hi

    return to_display


def _estimated(display: str, length: int) -> tuple[ShownWord, ...]:
    """The words of ``display`` spread over ``length`` samples.

    Speaking time is taken as proportional to characters, not words: a long word takes
    longer to say than a short one. Each word ends where the characters up to it (a
    space each included) have been said, rounded up: a word cut in the middle was not
    heard.
    """
    words = list(_SHOWN_WORD.finditer(display))
    total = sum(len(m.group()) + 1 for m in words)
    estimated = []
    said = start = 0
    for m in words:
        said += len(m.group()) + 1
        end = -(-said * length // total)
        estimated.append(ShownWord(m.group(), (m.start(), m.end()), start, end))
        start = end
    return tuple(estimated)
