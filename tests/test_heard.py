"""Heard text from a sink's playback: whole sentences that played, the leading words of
one cut short, including one whose last part was still being decoded."""

from __future__ import annotations

import numpy as np

from voicecli.audio.ledger import SpanLedger
from voicecli.frames import AudioChunk, Playback, Sentence, Word
from voicecli.heard import heard_text, now_playing, shown_words

SENTENCES = [
    Sentence(0, "one two three", "One two three."),
    Sentence(1, "four five six seven", "Four five six seven."),
]


def chunk(
    sentence: int, n: int, offset: int = 0, *, last=False, length=None, words=()
) -> AudioChunk:
    return AudioChunk(
        sentence, np.zeros(n, np.float32), offset, last=last, length=length, words=words
    )


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
    assert now_playing(playback).sentence == 1


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


# The normalizer rewrote the display: markup gone, the number and the symbol spelled out.
REWRITTEN = Sentence(0, "It costs twenty one dollars, Bob.", "It costs **$21**, Bob. 🙂")
TIMED = (
    Word("It", 0, 100),
    Word("costs", 150, 400),
    Word("twenty", 450, 700),
    Word("one", 700, 850),
    Word("dollars", 850, 1200),
    Word("Bob", 1400, 1700),
)


def test_displayed_words_take_the_times_of_the_spoken_words_they_say():
    shown = shown_words(REWRITTEN, TIMED, 2000)
    assert [(w.text, w.start, w.end) for w in shown] == [
        ("It", 0, 100),
        ("costs", 150, 400),
        ("**$21**,", 450, 1200),  # "twenty one dollars"
        ("Bob.", 1400, 1700),
        ("🙂", 2000, 2000),  # never spoken: said when the sentence ends
    ]
    assert [REWRITTEN.display[slice(*w.chars)] for w in shown] == [w.text for w in shown]


def test_a_cut_keeps_exactly_the_words_whose_audio_was_played():
    ledger = SpanLedger()
    write(ledger, chunk(0, 900, words=TIMED[:4]), 0)
    write(ledger, chunk(0, 1100, 900, last=True, words=TIMED[4:]), 900)
    snapshot = ledger.snapshot()
    heard = [heard_text(Playback(snapshot, position=n), [REWRITTEN]) for n in (99, 100, 1199, 1700)]
    assert heard == ["", "It", "It costs", "It costs **$21**, Bob."]
    assert heard_text(Playback(snapshot, position=2000), [REWRITTEN]) == REWRITTEN.display


def test_words_not_yet_written_are_not_heard_and_untimed_ones_wait_for_the_next():
    bullet = Sentence(0, "First item and more.", "- First item and more.")
    ledger = SpanLedger()
    write(ledger, chunk(0, 800, words=(Word("First", 100, 300), Word("item", 300, 600))), 0)
    heard = heard_text(Playback(ledger.snapshot(), position=800), [bullet])
    assert heard == "- First item"  # the bullet with the word after it; "and more" unknown


def test_now_playing_names_the_word_being_heard_in_the_display():
    ledger = SpanLedger()
    write(ledger, chunk(0, 2000, last=True, words=TIMED), 0)
    snapshot = ledger.snapshot()
    word = now_playing(Playback(snapshot, position=500), [REWRITTEN]).word
    assert word is not None and REWRITTEN.display[slice(*word)] == "**$21**,"
    # In the pause after "dollars", the last word begun stays lit.
    later = now_playing(Playback(snapshot, position=1300), [REWRITTEN])
    assert later.sentence == 0 and REWRITTEN.display[slice(*later.word)] == "**$21**,"
    assert now_playing(Playback(snapshot, position=500)).word is None  # no texts: no word
