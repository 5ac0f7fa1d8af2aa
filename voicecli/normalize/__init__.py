"""Turn a displayed unit of LLM text (markdown and all) into what should be spoken.

``speakable`` is called on each unit the Segmenter releases; its result goes to Kokoro,
while the display keeps the original. Kokoro's G2P (misaki) already reads plain numbers,
money like "$4.99", ordinals ("21st"), "Dr." and "vs." well, so those mostly pass through as
digits. What it reads badly is rewritten here: markup, URLs and file names, dates and times,
versions and IPs, unit symbols, a few abbreviations ("e.g." comes out as "ee-gee").
"""

from __future__ import annotations

import re

from voicecli.config import CodeReading, parse_choice
from voicecli.normalize.addresses import addresses_to_words
from voicecli.normalize.code import code_to_text, restore_code
from voicecli.normalize.markdown import markup_to_text
from voicecli.normalize.numbers import numbers_to_words
from voicecli.normalize.tidy import (
    SPACES,
    WORD_CHAR,
    bound_runs,
    drop_symbols,
    terminal_of,
    tidy,
)

NO_WORDS = "Nothing to say: the text has no speakable words (only markup, symbols or code)."

_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff]")


def speakable(text: str, *, code: str = CodeReading.PLACEHOLDER) -> str:
    """What TTS should say for one displayed unit; "" if there is nothing to say.

    ``code`` decides what happens to code: "placeholder" says that there is code (and the
    name of a short, word-like inline snippet), "skip" drops it, "read" reads it verbatim.
    """
    reading = parse_choice(CodeReading, code, "Reading code as")
    try:
        return _speakable(text, reading)
    except Exception:  # a rendering rule must never cost the user the speech
        return _last_resort(text)


def bounded(text: str) -> str:
    """Text made speakable elsewhere (by a client of the server, or by nobody), bounded as
    ``speakable`` bounds it: emoji dropped, runs of marks and blob-like words shortened;
    "" if no word is left. Unlike ``speakable`` it leaves speakable text as it is."""
    text = bound_runs(drop_symbols(_PRIVATE_USE.sub("", text)))
    return text if WORD_CHAR.search(text) else ""


def _speakable(text: str, code: CodeReading) -> str:
    protected: list[str] = []
    ending = terminal_of(text)
    # Private-use characters are unspeakable, and the protection markers use them.
    text = _PRIVATE_USE.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    text = code_to_text(text, code, protected)
    text = markup_to_text(text)
    text = addresses_to_words(text)
    text = numbers_to_words(text)
    text = drop_symbols(text)
    text = bound_runs(text)
    text = tidy(text, ending)
    text = restore_code(text, protected).strip()
    return text if WORD_CHAR.search(text) else ""


def _last_resort(text: str) -> str:
    """Letters, digits and basic punctuation only; used if a rule ever fails."""
    kept = re.sub(r"[^\w\s.,!?'-]+", " ", str(text))
    kept = SPACES.sub(" ", kept.replace("\n", " ")).strip()
    return kept if WORD_CHAR.search(kept) else ""
