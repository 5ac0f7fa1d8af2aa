"""What reached the listener, read off a sink's ``Playback``: the sentence heard now (for
the live view) and the displayed text heard so far (for the chat history after an
interrupt, skip or quit)."""

from __future__ import annotations

from collections.abc import Iterable

from voicecli.frames import Playback, Sentence


def now_playing(playback: Playback) -> tuple[int | None, float]:
    """The sentence being heard (between two sentences: the last one started), and the
    seconds heard since the turn's first sample."""
    spans = playback.spans
    if not spans:
        return None, 0.0
    playing = None
    for span in spans:
        if span.start <= playback.position:
            playing = span.sentence
    seconds = max(0, playback.position - spans[0].start) / playback.sample_rate
    return playing, seconds


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
        end = span.expected_end()
        if sentence is None or span.start >= limit:
            continue
        if span.end is not None and span.end <= limit:
            heard.append(sentence.display)
        elif end is not None and end > span.start:
            fraction = min(1.0, (limit - span.start) / (end - span.start))
            heard.append(leading_words(sentence.display, fraction))
    return " ".join(h for h in heard if h)


def leading_words(text: str, fraction: float) -> str:
    """The whole words within the first ``fraction`` of ``text``'s speaking time.

    Speaking time is taken as proportional to characters, not words: a long word takes
    longer to say than a short one. A word cut in the middle was not heard.
    """
    words = text.split()
    budget = fraction * sum(len(w) + 1 for w in words)
    kept: list[str] = []
    for word in words:
        budget -= len(word) + 1
        if budget < 0:
            break
        kept.append(word)
    return " ".join(kept)
