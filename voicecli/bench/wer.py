"""Word error rate of what was heard against what was said (jiwer), on words compared
as Whisper's own evaluations compare them: case, punctuation and the spelling of
numbers ("20" for "twenty") are not errors."""

from __future__ import annotations

import re

NUMBER = re.compile(r"\d+(?:\.\d+)?")


def words(text: str) -> str:
    from num2words import num2words  # Kokoro's English front end installs it

    spelled = NUMBER.sub(lambda m: f" {num2words(m.group())} ", text.replace(",", ""))
    return " ".join(re.findall(r"[a-z']+", spelled.lower().replace("-", " ")))


def wer(said: list[str], heard: list[str]) -> float:
    """Over all the pairs at once (each error counted against all words said); a pair
    with nothing heard counts every word said as deleted."""
    import jiwer

    return jiwer.wer([words(s) for s in said], [words(h) or "-" for h in heard])
