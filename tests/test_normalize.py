"""Tests for voicecli.normalize.speakable."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.segment_corpus import CASES
from voicecli import normalize
from voicecli.errors import VoiceCliError
from voicecli.normalize import speakable
from voicecli.segment import Segmenter

PLAIN: list[tuple[str, str]] = [
    # nothing to say
    ("", ""),
    ("   \n\t ", ""),
    ("**", ""),
    ("---", ""),
    ("***", ""),
    ("|---|---|", ""),
    ("| :--- | ---: |", ""),
    ("#", ""),
    ("- ", ""),
    ("😀🎉", ""),
    ("👍🏽", ""),
    ("🇺🇸 ✅ ✨", ""),
    ("** 🎉 **", ""),
    ("<br>", ""),
    ("[](https://example.com)", ""),
    ("```\n\n```", ""),
    # plain prose passes through
    ("Hello there, friend.", "Hello there, friend."),
    ("wait... what", "wait... what"),
    # runs of marks are spoken as one of each kind, and a blob of a word is cut
    ("." * 1999, ""),
    ("Hi" + "!" * 200, "Hi!"),
    ("What?!?!?!?! No.", "What?! No."),
    ("Wait" + "…" * 200 + " go.", "Wait… go."),
    ("Hello . . . . there.", "Hello… there."),
    ("Hello " + "%" * 200 + " there.", "Hello % there."),
    ("Hello " + "(" * 50 + "there.", "Hello (there."),
    ("C++ and x -> y.", "C++ and x to y."),
    ("a" * 2000, "a" * 40 + "…"),
    ("antidisestablishmentarianism.", "antidisestablishmentarianism."),
    ("你好。世界！", "你好。世界！"),
    ("The 21st century, 2nd place.", "The 21st century, 2nd place."),
    ("Dr. Smith vs. Mr. Jones, etc.", "Dr. Smith vs. Mr. Jones, etc."),
    # emphasis
    (
        "**Bold** and *italic* and _under_ and ~~strike~~ text.",
        "Bold and italic and under and strike text.",
    ),
    ("***Very*** important.", "Very important."),
    ("__Strong__ words.", "Strong words."),
    ("**Short answer:** yes.", "Short answer: yes."),
    ("**This sentence was cut.", "This sentence was cut."),
    ("and it ends here.**", "and it ends here."),
    ("Escaped \\*stars\\* stay quiet.", "Escaped stars stay quiet."),
    # headings, lists, quotes
    ("## Setup", "Setup."),
    ("## Setup\nInstall it with pip.", "Setup. Install it with pip."),
    ("# Title #", "Title."),
    ("#hashtag stays", "#hashtag stays"),
    ("- apples are red", "apples are red."),
    ("* bananas", "bananas."),
    ("1. Install Python.", "Install Python."),
    ("2) Run it", "Run it."),
    ("- [ ] todo item", "todo item."),
    ("- [x] done item", "done item."),
    ("Steps:\n1. Install Python.\n2. Run pip", "Steps: Install Python. Run pip."),
    ("- a\n- b", "a. b."),
    ("> quoted text here", "quoted text here"),
    ("A line without a stop\ncontinues here.", "A line without a stop continues here."),
    ("- **Performance**: it's fast.", "Performance: it's fast."),
    # links and URLs
    ("See [the docs](https://example.com/docs) for more.", "See the docs for more."),
    ('A [titled](https://x.io "Title") link.', "A titled link."),
    ("Photo: ![a cat](cat.png)", "Photo: a cat"),
    ("Read [this][1] first.", "Read this first."),
    ("A footnote[^1] here.", "A footnote here."),
    ("[1]: https://example.com", ""),
    ("Visit https://www.example.com/a/b?x=1. Then log in.", "Visit example dot com. Then log in."),
    ("See <https://docs.python.org/3/>", "See docs dot python dot org"),
    ("Go to www.example.org/path today.", "Go to example dot org today."),
    ("(see https://example.com)", "(see example dot com)"),
    ("http://192.168.0.1:8080/admin", "192 dot 168 dot 0 dot 1"),
    ("Email a.b@c.com for help.", "Email a dot b at c dot com for help."),
    # file names and paths
    ("Edit config.toml and README.md.", "Edit config dot TOML and README dot MD."),
    ("Open /etc/nginx/nginx.conf now.", "Open slash etc slash nginx slash nginx dot conf now."),
    ("It lives in ~/.config/app/", "It lives in home slash dot config slash app"),
    ("Add it to .env please.", "Add it to dot env please."),
    (
        "C# and F# and C++ and .NET and node.js",
        "C sharp and F sharp and C++ and dot NET and node dot JS",
    ),
    ("Use snake_case_name here.", "Use snake case name here."),
    ("and/or", "and/or"),
    # tables
    ("| Name | Age |\n|------|-----|\n| Alice | 30 |", "Name, Age. Alice, 30."),
    ("| Speed | **fast** | slow |", "Speed, fast, slow."),
    ("Name | Age | City", "Name, Age, City."),
    # HTML
    ("<b>bold</b> and<br>break &amp; more", "bold and break & more"),
    ("Press <kbd>Ctrl</kbd>+<kbd>C</kbd>.", "Press Ctrl+C."),
    ("a < b and c > d", "a < b and c > d"),
    # emoji
    ("I love it 😀🎉!", "I love it!"),
    ("Done ✅ and shipped 🚀.", "Done and shipped."),
    # money
    ("The price is $4.99 today.", "The price is 4 dollars and 99 cents today."),
    ("Only $0.99.", "Only 99 cents."),
    ("It costs $1.", "It costs 1 dollar."),
    ("It costs $5.", "It costs 5 dollars."),
    ("A $1,234.56 bill.", "A 1,234 dollars and 56 cents bill."),
    ("Raised $5M and $4.2B.", "Raised 5 million dollars and 4.2 billion dollars."),
    ("Raised $5 million.", "Raised 5 million dollars."),
    ("€19.50 or £10.", "19 euros and 50 cents or 10 pounds."),
    ("Pay ¥500.", "Pay 500 yen."),
    ("Just $19.5 now.", "Just 19 dollars and 50 cents now."),
    # percent and numbers
    ("It is 50% off.", "It is 50 percent off."),
    ("Growth was 12.5%.", "Growth was 12.5 percent."),
    ("The total is 1,000.50 euros.", "The total is 1,000 point 5 0 euros."),
    ("Pi is 3.14.", "Pi is 3.14."),
    ("It is -5 degrees.", "It is -5 degrees."),
    ("-5 degrees outside.", "-5 degrees outside."),
    ("It's 5-10 people.", "It's 5 to 10 people."),
    ("From 2020–2024.", "From 2020 to 2024."),
    ("Call 555-123-4567.", "Call 555-123-4567."),
    ("#1 fan", "number 1 fan"),
    ("Add 3/4 cup.", "Add three quarters cup."),
    ("Open 24/7.", "Open twenty-four seven."),
    ("2 * 3 = 6", "2 times 3 equals 6"),
    ("About ~5 minutes.", "About about 5 minutes."),
    ("x -> y → z", "x to y to z"),
    ("It is 2.5x faster.", "It is 2.5x faster."),
    # units
    ("It is 5 km away.", "It is 5 kilometers away."),
    ("Just 1 km.", "Just 1 kilometer."),
    ("Download 10 MB, then 3 GB.", "Download 10 megabytes, then 3 gigabytes."),
    ("It is 20°C or 72°F.", "It is 20 degrees Celsius or 72 degrees Fahrenheit."),
    ("Turn it 90°.", "Turn it 90 degrees."),
    ("Wait 100 ms and 5 min.", "Wait 100 milliseconds and 5 minutes."),
    ("A 5kg bag at 60 mph.", "A 5 kilograms bag at 60 miles per hour."),
    ("A 3.2 GHz CPU with 16 GB RAM.", "A 3.2 gigahertz CPU with 16 gigabytes RAM."),
    ("Weighs 1.50 kg.", "Weighs 1 point 5 0 kilograms."),
    ("The 5G network and V8 engine.", "The 5G network and V8 engine."),
    # dates and times
    ("Due 2024-01-15.", "Due January 15, 2024."),
    ("Due 01/15/2024.", "Due January 15, 2024."),
    ("Not a date 2024-13-45.", "Not a date 2024-13-45."),
    ("Meet at 3:30 p.m.", "Meet at 3 30 PM."),
    ("Meet at 3:30 p.m. tomorrow.", "Meet at 3 30 PM tomorrow."),
    ("Meet at 10:00 or 3:05pm.", "Meet at 10 o'clock or 3 oh 5 PM."),
    ("At 9:00 AM sharp.", "At 9 AM sharp."),
    ("Logged at 12:00:01.", "Logged at 12 o'clock and 1 second."),
    ("The ratio is 16:9.", "The ratio is 16:9."),
    ("On Jan. 15 we start.", "On January 15 we start."),
    # versions and IPs
    ("Use v2.5.1 now.", "Use version 2 point 5 point 1 now."),
    ("Upgrade to v2.", "Upgrade to version 2."),
    ("Python 3.12.1 is out.", "Python 3 point 12 point 1 is out."),
    ("Python 3.12 too.", "Python 3 point 12 too."),
    ("nginx 1.24.0 runs.", "nginx 1 point 24 point 0 runs."),
    ("Ping 192.168.0.1 now.", "Ping 192 dot 168 dot 0 dot 1 now."),
    ("Ping 10.0.0.1:8080.", "Ping 10 dot 0 dot 0 dot 1 port 8080."),
    ("Not an IP 999.1.1.1.", "Not an IP 999 point 1 point 1 point 1."),
    # abbreviations misaki reads badly
    ("Use fruit, e.g. apples.", "Use fruit, for example, apples."),
    ("Use fruit, e.g., apples.", "Use fruit, for example, apples."),
    ("The best, i.e. this one.", "The best, that is, this one."),
    ("It takes approx. 5 minutes.", "It takes approximately 5 minutes."),
    ("See Fig. 2.", "See figure 2."),
    ("Ask Prof. Lee.", "Ask Professor Lee."),
    ("Visit St. Louis.", "Visit Saint Louis."),
    ("Climb Mt. Everest.", "Climb Mount Everest."),
]

CODE: list[tuple[str, str, str]] = [
    # (text, mode, expected)
    ("```python\nprint('hi')\n```", "placeholder", "Here is some Python code."),
    ("```\nprint('hi')\n```", "placeholder", "Here is some code."),
    ("```weird-lang\nx\n```", "placeholder", "Here is some code."),
    ("```bash\nls -la\n```", "placeholder", "Here is some shell code."),
    ("```python\nprint('hi')\n```", "skip", ""),
    ("```python\nprint('hi')\n```", "read", "print('hi')"),
    ("```py\n**not emphasis** and http://x.com\n```", "read", "**not emphasis** and http://x.com"),
    ("~~~\ncode\n~~~", "placeholder", "Here is some code."),
    ("```js\nlet x = 1;\n", "placeholder", "Here is some JavaScript code."),
    ("Here it is:\n```bash\nls\n```", "placeholder", "Here it is: Here is some shell code."),
    ("Run this\n```bash\nls\n```", "placeholder", "Run this. Here is some shell code."),
    ("Here it is:\n```bash\nls\n```", "skip", "Here it is:"),
    ("Here it is:\n```bash\nls\n```", "read", "Here it is: ls"),
    ("Run `setup.exe` now.", "placeholder", "Run setup dot EXE now."),
    ("Call `items.reverse()` now.", "placeholder", "Call items dot reverse now."),
    ("Call `snake_case()` now.", "placeholder", "Call snake case now."),
    ("Set `x = [1, 2]` first.", "placeholder", "Set code first."),
    ("Run `sudo apt install python3-venv`.", "placeholder", "Run code."),
    ("Run `setup.exe` now.", "skip", "Run now."),
    ("Run `setup.exe` now.", "read", "Run setup.exe now."),
    ("Set `x = [1, 2]` first.", "read", "Set x = [1, 2] first."),
    ("Use ``a `tick` b`` here.", "read", "Use a `tick` b here."),
    ("`", "placeholder", ""),
    ("``", "placeholder", ""),
]


@pytest.mark.parametrize(("text", "expected"), PLAIN)
def test_speakable(text: str, expected: str) -> None:
    assert speakable(text) == expected


@pytest.mark.parametrize(("text", "mode", "expected"), CODE)
def test_code_modes(text: str, mode: str, expected: str) -> None:
    assert speakable(text, code=mode) == expected


def test_unknown_code_mode_rejected() -> None:
    with pytest.raises(VoiceCliError, match="use placeholder, skip, read"):
        speakable("x", code="loud")


def test_every_segment_of_the_corpus_is_speakable() -> None:
    """Each unit the segmenter releases normalizes without hitting the fallback."""
    for text, _, options in CASES:
        seg = Segmenter(**options)
        for unit in seg.feed(text) + seg.flush():
            for mode in ("placeholder", "skip", "read"):
                said = normalize._speakable(unit, mode)
                assert said == said.strip()


ANY_TEXT = st.lists(
    st.characters(codec="utf-8", exclude_categories=("Cs",))
    | st.sampled_from(
        list("`*_~#|[]()<>!$€%:/.@-—\n ")
        + ["```", "**", "](", "http://", "v1.2", "3:30", "$4.99", "\n- ", "\n| a |", "😀"]
    ),
    max_size=80,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=ANY_TEXT, mode=st.sampled_from(["placeholder", "skip", "read"]))
def test_never_raises_and_rules_never_fail(text: str, mode: str) -> None:
    # The internal function must not raise either: the fallback is a safety net, not a
    # way to hide broken rules.
    said = normalize._speakable(text, mode)  # type: ignore[arg-type]
    assert said == speakable(text, code=mode)  # type: ignore[arg-type]
    assert said == said.strip()
    assert "\ue000" not in said and "\ue001" not in said and "\ue002" not in said


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT, mode=st.sampled_from(["placeholder", "skip"]))
def test_speech_is_bounded_by_the_words(text: str, mode: str) -> None:
    """Outside code read verbatim, no run of marks and no word is spoken at length."""
    said = speakable(text * 30, code=mode)  # type: ignore[arg-type]
    assert re.search(r"[^\w\s](?:\s*[^\w\s]){3,}", said) is None, said
    assert re.search(r"\w{41,}", said) is None, said


def test_fallback_keeps_words_when_a_rule_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(normalize, "numbers_to_words", broken)  # one of its stages
    assert speakable("**Hello** there, 😀 friend.") == "Hello there, friend."
    assert speakable("😀") == ""
