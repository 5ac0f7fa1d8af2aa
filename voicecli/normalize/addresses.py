"""URLs, e-mail addresses, file paths, dotted and snake_case names, and a few
abbreviations that misaki reads badly ("e.g." comes out as "ee-gee")."""

from __future__ import annotations

import re

from voicecli.normalize.numbers import IP, MONTHS
from voicecli.normalize.tidy import WORD_CHAR

_MONTH_ABBREVIATIONS = {m[:3]: m for m in MONTHS} | {"Sept": "September"}

_URL = re.compile(r"\b(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]+", re.I)

_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")

_PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]*)*")

_DOTTED_NAME = re.compile(r"(?<![\w.])[A-Za-z_][\w-]+(?:\.[A-Za-z_][\w-]+)+(?![\w])")

_DOT_FILE = re.compile(r"(?<![\w.])\.([A-Za-z][\w-]+)\b")

_LETTER_EXTENSION = re.compile(r"[a-z]{1,4}")

_SPOKEN_EXTENSIONS = frozenset("com org net edu gov conf env app dev log lock zip info".split())

_SHARP = re.compile(r"\b([CF])#(?!\w)")

_SNAKE_CASE = re.compile(r"(?<=[A-Za-z0-9])_+(?=[A-Za-z0-9])")

_ABBREVIATIONS = [
    (re.compile(r"(?<!\w)e\.g\.(?:,)?", re.I), "for example,"),
    (re.compile(r"(?<!\w)i\.e\.(?:,)?", re.I), "that is,"),
    (re.compile(r"(?<!\w)approx\.", re.I), "approximately"),
    (re.compile(r"(?<!\w)Fig\.(?=\s*\d)"), "figure"),
    (re.compile(r"(?<!\w)Prof\.(?=\s)"), "Professor"),
    (re.compile(r"(?<!\w)Mt\.(?=\s+[A-Z])"), "Mount"),
    (re.compile(r"(?<!\w)St\.(?=\s+[A-Z])"), "Saint"),
    (
        re.compile(r"(?<!\w)(Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.(?=\s*\d)"),
        lambda m: _MONTH_ABBREVIATIONS[m.group(1)],
    ),
]


def _dotted(name: str, *, suffix: bool = True) -> str:
    """ "a.b" -> "a dot b"; with ``suffix`` the last part is read as a file or domain suffix."""
    parts = [part for part in name.split(".") if part]
    if suffix and len(parts) > 1 and _LETTER_EXTENSION.fullmatch(parts[-1]):
        # misaki spells short capitals ("MD", "TOML") but has no word for "md" or "toml"
        if parts[-1] not in _SPOKEN_EXTENSIONS:
            parts[-1] = parts[-1].upper()
    return " dot ".join(parts)


def _url_to_words(m: re.Match[str]) -> str:
    url = m.group(0)
    trail = re.search(r"[.,;:!?)\]}]+$", url)
    tail = trail.group(0) if trail else ""
    url = url[: len(url) - len(tail)]
    # By hand rather than urlsplit, which raises on malformed hosts such as "[".
    authority = re.split(r"[/?#]", url.split("://", 1)[-1], maxsplit=1)[0]
    host = authority.rpartition("@")[2].split(":")[0].lower().removeprefix("www.")
    if not WORD_CHAR.search(host):
        return "a link" + tail
    if IP.fullmatch(host):
        return " dot ".join(host.split(".")) + tail
    return _dotted(host) + tail


def _email_to_words(m: re.Match[str]) -> str:
    user, _, domain = m.group(0).partition("@")
    return f"{_dotted(user, suffix=False)} at {_dotted(domain)}"


def _path_to_words(m: re.Match[str]) -> str:
    path = m.group(0)
    if path.endswith("."):
        return _path_to_words_core(path[:-1]) + "."
    return _path_to_words_core(path)


def _path_to_words_core(path: str) -> str:
    words = []
    if path.startswith("~"):
        words.append("home")
        path = path[1:]
    for part in path.split("/"):
        if part:
            words.append("slash")
            words.append("dot " + _dotted(part) if part.startswith(".") else _dotted(part))
    return " ".join(words) if words else "slash"


def addresses_to_words(text: str) -> str:
    text = _URL.sub(_url_to_words, text)
    text = _EMAIL.sub(_email_to_words, text)
    text = _PATH.sub(_path_to_words, text)
    text = _SHARP.sub(r"\1 sharp", text)
    for pattern, replacement in _ABBREVIATIONS:
        text = pattern.sub(replacement, text)
    text = _DOTTED_NAME.sub(lambda m: _dotted(m.group(0)), text)
    text = _SNAKE_CASE.sub(" ", text)
    return _DOT_FILE.sub(r"dot \1", text)
