"""Tests for voicecli.segment: the corpus, edge waiting, and chunking properties."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.golden_rules_en import GOLDEN_RULES
from tests.segment_corpus import CASES
from voicecli.segment import Segmenter


def run_chunks(text: str, sizes: list[int] | None, **options: Any) -> list[str]:
    """Feed ``text`` in chunks of the given sizes (None = whole) and flush."""
    seg = Segmenter(**options)
    out: list[str] = []
    if sizes is None:
        out += seg.feed(text)
    else:
        i = 0
        for size in sizes:
            out += seg.feed(text[i : i + size])
            i += size
        out += seg.feed(text[i:])
    return out + seg.flush()


def random_sizes(text: str, seed: int) -> list[int]:
    rnd = random.Random(seed)
    sizes, total = [], 0
    while total < len(text):
        sizes.append(rnd.randint(1, 9))
        total += sizes[-1]
    return sizes


@pytest.mark.parametrize(("text", "expected", "options"), CASES)
def test_corpus_whole(text: str, expected: list[str], options: dict[str, Any]) -> None:
    assert run_chunks(text, None, **options) == expected


@pytest.mark.parametrize(("text", "expected", "options"), CASES)
def test_corpus_char_by_char(text: str, expected: list[str], options: dict[str, Any]) -> None:
    assert run_chunks(text, [1] * len(text), **options) == expected


@pytest.mark.parametrize(("text", "expected", "options"), CASES)
def test_corpus_random_chunks(text: str, expected: list[str], options: dict[str, Any]) -> None:
    for seed in range(3):
        assert run_chunks(text, random_sizes(text, seed), **options) == expected


def test_corpus_is_large() -> None:
    assert len(CASES) >= 150


def _cuts(units: list[str]) -> set[int]:
    """Where ``units`` cut their text, counted in non-space characters."""
    ends, total = set(), 0
    for unit in units[:-1]:
        total += len("".join(unit.split()))
        ends.add(total)
    return ends


# What the segmenter still does differently from the gold, none of it a cut inside a
# gold sentence: units under min_chars merge with the next ("Hello!!"), a list with no
# periods has nothing to cut at, and "P.M. Mr." reads as one name.
GOLDEN_MERGED = {
    "At 5 a.m. Mr. Smith went to the bank. He left the bank at 6 P.M. Mr. Smith then "
    "went to the store.",
    "Hello!! Long time no see.",
    "Hello?? Who is there?",
    "Hello!? Is that you?",
    "Hello?! Is that you?",
    "1) The first item 2) The second item",
}


def test_the_golden_rules_fed_one_character_at_a_time_have_no_false_split() -> None:
    # A false split is a cut inside a gold sentence: the listener hears a pause there.
    false_splits, merged = 0, set()
    for text, gold in GOLDEN_RULES:
        units = run_chunks(text, [1] * len(text))
        assert "".join("".join(units).split()) == "".join(text.split())  # nothing lost
        assert units == run_chunks(text, None) == run_chunks(text, random_sizes(text, 0))
        false_splits += len(_cuts(units) - _cuts(gold))
        if units != gold:
            merged.add(text)
    assert len(GOLDEN_RULES) == 48
    assert false_splits == 0
    assert merged == GOLDEN_MERGED


# --- waiting at the stream's edge -------------------------------------------------------


def test_price_waits_for_decimals() -> None:
    seg = Segmenter()
    assert seg.feed("The price is 4.") == []
    assert seg.feed("99 today.") == []
    assert seg.flush() == ["The price is 4.99 today."]


def test_price_released_once_next_word_starts() -> None:
    seg = Segmenter()
    assert seg.feed("The price is 4.") == []
    # A space alone does not settle it: a lowercase word would continue the sentence.
    assert seg.feed(" ") == []
    assert seg.feed("N") == ["The price is 4."]
    assert seg.feed("ext one.") == []
    assert seg.flush() == ["Next one."]


def test_price_released_with_next_token() -> None:
    seg = Segmenter()
    assert seg.feed("The price is 4.") == []
    assert seg.feed(" Next") == ["The price is 4."]


def test_lowercase_continues_the_sentence() -> None:
    seg = Segmenter()
    assert seg.feed("Bring pens, paper, etc.") == []
    assert seg.feed(" and") == []
    assert seg.flush() == ["Bring pens, paper, etc. and"]


def test_title_never_splits_even_before_uppercase() -> None:
    seg = Segmenter()
    assert seg.feed("Please ask Dr.") == []
    assert seg.feed(" Smith about it. ") == []
    assert seg.feed("Then") == ["Please ask Dr. Smith about it."]


def test_initial_waits_for_whole_next_word() -> None:
    seg = Segmenter()
    assert seg.feed("It was written by J. T") == []
    assert seg.feed("he") == []  # "The" could still become "Theodore"
    assert seg.feed(" ") == ["It was written by J."]


def test_a_letter_after_a_label_noun_is_no_initial() -> None:
    assert run_chunks("Take some vitamin C. Theodore did.", [1] * 40) == [
        "Take some vitamin C.",
        "Theodore did.",
    ]
    assert run_chunks("It was written by J. Smith in May.", None) == [
        "It was written by J. Smith in May."
    ]


def test_number_abbreviation_needs_one_char() -> None:
    seg = Segmenter()
    assert seg.feed("Look at the Fig. ") == []
    assert seg.feed("2") == []
    assert seg.flush() == ["Look at the Fig. 2"]


def test_exclamation_and_question_settle_on_next_word() -> None:
    seg = Segmenter()
    assert seg.feed("Is that really true?") == []
    assert seg.feed('"') == []
    assert seg.feed(" I") == ['Is that really true?"']


def test_paragraph_break_settles_without_next_word() -> None:
    seg = Segmenter()
    assert seg.feed("This is the first paragraph.\n\n") == ["This is the first paragraph."]


def test_short_reply_start_released_at_paragraph_break() -> None:
    seg = Segmenter()
    assert seg.feed("Sure!") == []
    assert seg.feed("\n\n") == ["Sure!"]


def test_newline_mode_releases_at_newline() -> None:
    seg = Segmenter(newline_is_boundary=True)
    assert seg.feed("ERROR disk full at 4.") == []
    assert seg.feed("\n") == ["ERROR disk full at 4."]
    assert seg.feed("Dr. Smith logged in") == []
    assert seg.feed("\n") == ["Dr. Smith logged in"]
    assert seg.feed("x\n") == ["x"]
    assert seg.flush() == []


def test_chat_mode_single_newline_waits_for_next_line() -> None:
    seg = Segmenter()
    assert seg.feed("A line with no stop\n") == []
    assert seg.feed("- an item") == ["A line with no stop"]


def test_cjk_terminator_waits_one_char_for_closer() -> None:
    seg = Segmenter(min_chars=0)
    assert seg.feed("他说「好。") == []
    assert seg.feed("」") == []
    assert seg.feed("然") == ["他说「好。」"]


def test_code_fence_released_when_closed() -> None:
    seg = Segmenter()
    assert seg.feed("Here it is:\n```py\nx = 1. \n\nY = 2\n") == ["Here it is:"]
    assert seg.feed("```") == []
    assert seg.feed("\n") == ["```py\nx = 1. \n\nY = 2\n```"]


# --- fast first ---------------------------------------------------------------------------


def test_fast_first_cuts_only_the_first_chunk() -> None:
    text = "Well, here is the thing, friend, and more. Later, it is whole, truly."
    assert run_chunks(text, None, fast_first=True) == [
        "Well,",
        "here is the thing, friend, and more.",
        "Later, it is whole, truly.",
    ]
    assert run_chunks(text, None) == [
        "Well, here is the thing, friend, and more.",
        "Later, it is whole, truly.",
    ]


def test_fast_first_rearms_after_flush() -> None:
    seg = Segmenter(fast_first=True)
    text = "Right, so the answer is yes, of course. Bye now, friend."
    first = seg.feed(text) + seg.flush()
    second = seg.feed(text) + seg.flush()
    assert first == second == ["Right,", "so the answer is yes, of course.", "Bye now, friend."]


def test_fast_first_respects_min_words() -> None:
    text = "One two three, four five six seven, eight."
    assert run_chunks(text, None, fast_first=True, min_first_words=5) == [
        "One two three, four five six seven,",
        "eight.",
    ]


def test_fast_first_lets_a_short_first_sentence_stand_alone() -> None:
    text = "Of course. Here is how you do it, step by step."
    assert run_chunks(text, None, fast_first=True) == ["Of course.", text[11:]]
    assert run_chunks(text, None) == [text]  # later units still merge below min_chars
    assert run_chunks("So, what now?", None, fast_first=True) == ["So, what now?"]  # < 4 chars


def test_feed_empty_and_flush_empty() -> None:
    seg = Segmenter()
    assert seg.feed("") == []
    assert seg.flush() == []


def test_bad_options_rejected() -> None:
    with pytest.raises(ValueError):
        Segmenter(max_chars=1)
    with pytest.raises(ValueError):
        Segmenter(min_chars=50, max_chars=40)


# --- properties -------------------------------------------------------------------------

HARD_TOKENS = [
    "Dr.",
    "Mr.",
    "Mrs.",
    "Ms.",
    "Prof.",
    "St.",
    "e.g.",
    "i.e.",
    "etc.",
    "vs.",
    "U.S.",
    "No. 5",
    "Fig. 2",
    "approx.",
    "Jan.",
    "3.14",
    "$4.99",
    "1,000.50",
    "v2.5.1",
    "192.168.0.1",
    "3:30 p.m.",
    "https://example.com/a.b?x=1",
    "a.b@c.com",
    "config.toml",
    "README.md",
    "wait...",
    "…",
    "J. R. R.",
    "Tolkien",
    "4.",
    '"hi."',
    "(see above.)",
    "**bold.**",
    "The",
    "It",
    "word",
    "Then",
    "and",
    "what",
    "!",
    "?",
    "?!",
    "—",
    "-",
    ",",
    ";",
    ":",
    "x" * 45,
    "`code`",
    "50%",
    "2024-01-15",
]
SEPARATORS = [
    " ",
    " ",
    " ",
    "  ",
    "\n",
    "\n\n",
    ". ",
    "! ",
    "? ",
    ", ",
    "\n- ",
    "\n1. ",
    "\n# ",
    "\n| ",
    "\n```\n",
    "\n```py\n",
    " \n",
    "\t",
    "\r\n",
]
WORD_TEXT = st.text(alphabet="abcXYZ.,!?:;-'\"()", min_size=1, max_size=6)

hard_text = st.lists(
    st.tuples(st.sampled_from(HARD_TOKENS) | WORD_TEXT, st.sampled_from(SEPARATORS)),
    max_size=40,
).map(lambda parts: "".join(token + sep for token, sep in parts))

any_text = st.lists(
    st.sampled_from(list("aAbZ 1.9,;:!?…-—\n\t`~#*|\"')(\r。！」你") + ["```", "\n\n", "Dr."]),
    max_size=80,
).map("".join)

options = st.fixed_dictionaries(
    {
        "fast_first": st.booleans(),
        "newline_is_boundary": st.booleans(),
        "min_chars": st.sampled_from([0, 5, 12]),
        "max_chars": st.sampled_from([20, 40, 300]),
    }
)

PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def chunk_sizes(text_len: int, cuts: list[int]) -> list[int]:
    points = sorted({c % (text_len + 1) for c in cuts})
    sizes, last = [], 0
    for p in points:
        sizes.append(p - last)
        last = p
    return sizes


@PROPERTY_SETTINGS
@given(text=hard_text, opts=options, cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_nothing_lost_and_chunking_invariant(
    text: str, opts: dict[str, Any], cuts: list[int]
) -> None:
    whole = run_chunks(text, None, **opts)
    assert " ".join(whole).split() == text.split()
    assert run_chunks(text, chunk_sizes(len(text), cuts), **opts) == whole
    assert run_chunks(text, [1] * len(text), **opts) == whole
    for piece in whole:
        assert piece and piece == piece.strip()
        fenced = piece.startswith(("```", "~~~"))
        assert len(piece) <= opts["max_chars"] or fenced or len(piece.split()) == 1


@PROPERTY_SETTINGS
@given(text=any_text, opts=options, cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_any_text_keeps_characters_and_is_chunking_invariant(
    text: str, opts: dict[str, Any], cuts: list[int]
) -> None:
    whole = run_chunks(text, None, **opts)
    assert "".join("".join(whole).split()) == "".join(text.split())
    assert run_chunks(text, chunk_sizes(len(text), cuts), **opts) == whole
    assert run_chunks(text, [1] * len(text), **opts) == whole


@PROPERTY_SETTINGS
@given(text=hard_text, opts=options)
def test_release_lag_is_bounded(text: str, opts: dict[str, Any]) -> None:
    """A unit is released within a bounded number of characters after it ends.

    The exception is an overlong split, which by nature waits for max_chars of text.
    """
    seg = Segmenter(**opts)
    cursor = 0
    for fed, ch in enumerate(text, start=1):
        for piece in seg.feed(ch):
            begin = text.index(piece, cursor)
            end = cursor = begin + len(piece)
            lag = len("".join(text[end:fed].split()))  # whitespace runs may be any length
            overlong = fed > begin + opts["max_chars"]
            assert lag <= 24 or overlong, (piece, text[end:fed])
    seg.flush()


# Ideal answers the segmenter does not give; each is a deliberate trade-off documented in
# voicecli.segment. strict=True makes an accidental fix show up.
# Both need to know whether the words after the period make a sentence of their own:
# "Bob went home" has its own verb, "Eastern" (in "3 p.m. Eastern time") does not, and
# "pip is great" does, where "etc. and so on" does not. Only the whole next clause tells,
# and waiting for it would delay every unit that ends this way by a clause of speech.
# Missing these cuts costs little: two sentences are spoken as one unit, with no pause
# inside a sentence (which is what a false split costs).
KNOWN_LIMITATIONS = [
    # "p.m." + a capitalised word that is not a common sentence starter stays joined,
    # so that "3 p.m. Eastern" is not split.
    (
        "The meeting ended at 3 p.m. Bob went home after that.",
        ["The meeting ended at 3 p.m.", "Bob went home after that."],
    ),
    # A lowercase word after a period is taken as an unlisted abbreviation.
    (
        "Install it with brew now. pip is great for this job.",
        ["Install it with brew now.", "pip is great for this job."],
    ),
]


@pytest.mark.xfail(strict=True, reason="known limitation, see comments")
@pytest.mark.parametrize(("text", "ideal"), KNOWN_LIMITATIONS)
def test_known_limitations(text: str, ideal: list[str]) -> None:
    assert run_chunks(text, None) == ideal
