"""Heard text from a sink's playback: whole sentences that played, the leading words of
one cut short, including one whose last part was still being decoded."""

from __future__ import annotations

import numpy as np

from voicecli.audio.ledger import SpanLedger
from voicecli.frames import AudioChunk, Playback, Sentence
from voicecli.heard import heard_text, now_playing

SENTENCES = [
    Sentence(0, "one two three", "One two three."),
    Sentence(1, "four five six seven", "Four five six seven."),
]


def chunk(sentence: int, n: int, offset: int = 0, *, last=False, length=None) -> AudioChunk:
    return AudioChunk(sentence, np.zeros(n, np.float32), offset, last=last, length=length)


def write(ledger: SpanLedger, c: AudioChunk, position: int) -> int:
    ledger.before_write(c, position)
    position += c.samples.size
    ledger.after_write(c, position)
    return position


def test_whole_sentences_and_the_leading_words_of_a_closed_one():
    ledger = SpanLedger()
    pos = write(ledger, chunk(0, 1000, last=True), 0)
    write(ledger, chunk(1, 2000, last=True), pos)
    heard = heard_text(Playback(ledger.snapshot(), position=2000), SENTENCES)
    assert heard == "One two three. Four five"


def test_a_sentence_still_being_decoded_is_cut_by_its_expected_length():
    ledger = SpanLedger()
    pos = write(ledger, chunk(0, 1000, last=True), 0)
    # Half of sentence 1 written so far, in a part that says the whole will be 2000.
    write(ledger, chunk(1, 1000, length=2000), pos)
    playback = Playback(ledger.snapshot(), position=2000)
    assert heard_text(playback, SENTENCES) == "One two three. Four five"
    assert now_playing(playback)[0] == 1


def test_without_a_length_an_open_sentence_counts_as_not_heard():
    ledger = SpanLedger()
    pos = write(ledger, chunk(0, 1000, last=True), 0)
    write(ledger, chunk(1, 1000), pos)
    assert heard_text(Playback(ledger.snapshot(), position=2000), SENTENCES) == "One two three."


def test_a_skipped_sentence_counts_only_up_to_the_skip():
    ledger = SpanLedger()
    pos = write(ledger, chunk(0, 1000, last=True), 0)
    write(ledger, chunk(1, 2000, last=True), pos)
    span = ledger.at(1200)
    assert span is not None and span.sentence == 1
    ledger.skip(span, heard=1500)
    assert (
        heard_text(Playback(ledger.snapshot(), position=3000), SENTENCES) == "One two three. Four"
    )
