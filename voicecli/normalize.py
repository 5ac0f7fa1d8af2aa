"""Turn a displayed unit of LLM text (markdown and all) into what should be spoken.

``speakable`` is called on each unit the Segmenter releases; its result goes to Kokoro,
while the display keeps the original. Kokoro's G2P (misaki) already reads plain numbers,
money like "$4.99", ordinals ("21st"), "Dr." and "vs." well, so those mostly pass through as
digits. What it reads badly is rewritten here: markup, URLs and file names, dates and times,
versions and IPs, unit symbols, a few abbreviations ("e.g." comes out as "ee-gee").
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable
from typing import Literal

CodeMode = Literal["placeholder", "skip", "read"]
_CODE_MODES = ("placeholder", "skip", "read")

# Protected spans (code read verbatim) hide behind private-use characters, which no rule
# below matches and \w does not count as content.
_PROTECT_OPEN, _PROTECT_CLOSE = "\ue000", "\ue001"
_PROTECTED = re.compile(f"{_PROTECT_OPEN}(.){_PROTECT_CLOSE}", re.S)
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff]")
# Marks a line that stands for a code block, so the prose before it gets a full stop.
_BLOCK = "\ue002"

_TERMINAL = ".!?…:;,"
_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_MONTH_ABBREVIATIONS = {m[:3]: m for m in _MONTHS} | {"Sept": "September"}

_LANGUAGES = {
    "python": "Python",
    "py": "Python",
    "javascript": "JavaScript",
    "js": "JavaScript",
    "typescript": "TypeScript",
    "ts": "TypeScript",
    "bash": "shell",
    "sh": "shell",
    "shell": "shell",
    "zsh": "shell",
    "console": "shell",
    "powershell": "PowerShell",
    "json": "JSON",
    "yaml": "YAML",
    "yml": "YAML",
    "toml": "TOML",
    "rust": "Rust",
    "rs": "Rust",
    "go": "Go",
    "c": "C",
    "cpp": "C++",
    "c++": "C++",
    "java": "Java",
    "kotlin": "Kotlin",
    "swift": "Swift",
    "ruby": "Ruby",
    "php": "PHP",
    "sql": "SQL",
    "html": "HTML",
    "css": "CSS",
    "xml": "XML",
    "dockerfile": "Dockerfile",
    "markdown": "markdown",
    "md": "markdown",
    "csharp": "C sharp",
    "cs": "C sharp",
}

# unit symbol -> (singular, plural); only matched right after a number.
_UNITS = {
    "km": ("kilometer", "kilometers"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "kg": ("kilogram", "kilograms"),
    "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ms": ("millisecond", "milliseconds"),
    "µs": ("microsecond", "microseconds"),
    "ns": ("nanosecond", "nanoseconds"),
    "s": ("second", "seconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"),
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "PB": ("petabyte", "petabytes"),
    "Kbps": ("kilobit per second", "kilobits per second"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "mAh": ("milliamp hour", "milliamp hours"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
}
_UNIT_RE = re.compile(
    r"(?<![\w.])(\d+(?:[.,]\d+)*)\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/])"
)

_CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "", ""),
}
_MAGNITUDES = {"k": "thousand", "K": "thousand", "M": "million", "B": "billion", "T": "trillion"}
_CURRENCY_RE = re.compile(
    r"([$€£¥])\s?(\d[\d,]*)(?:\.(\d{1,2}))?(?!\d|\.\d)"
    r"(?:\s?([kKMBT])\b|\s+(thousand|million|billion|trillion)\b)?"
)
_FRACTIONS = {
    "1/2": "one half",
    "1/3": "one third",
    "2/3": "two thirds",
    "1/4": "one quarter",
    "3/4": "three quarters",
    "1/8": "one eighth",
    "24/7": "twenty-four seven",
}

# --- markdown ------------------------------------------------------------------------------
_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<marker>`{3,}|~{3,})(?P<info>[^\n]*)\n?(?P<body>.*?)"
    r"(?:^[ \t]{0,3}(?P=marker)[`~]*[ \t]*$|\Z)",
    re.S | re.M,
)
_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_WORDLIKE_CODE = re.compile(r"[\w.\-/@+#:]{1,32}(?:\(\))?(?: [\w.\-/@+#:]{1,32}){0,2}")
_HTML_BREAK = re.compile(r"<br\s*/?>", re.I)
_HTML_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\((?:[^()\s]|\([^)]*\))*(?:\s+\"[^\"]*\")?\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_FOOTNOTE = re.compile(r"\[\^[^\]]+\]")
_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^>\s]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>")
_REF_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*\S+.*$")
_THEMATIC_BREAK = re.compile(r"^\s*([-*_=])(?:\s*\1){2,}\s*$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}(?:\s+|$)(.*?)(?:\s+#+)?\s*$")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|[a-z][.)])\s+(?:\[[ xX]\]\s+)?")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~>])")
_EMPHASIS = [
    re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*", re.S),
    re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.S),
    re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", re.S),
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)", re.S),
    re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)", re.S),
    re.compile(r"~~(?=\S)(.+?)(?<=\S)~~", re.S),
]
_TIMES_SIGN = re.compile(r"(?<=\d)\s*[*×]\s*(?=\d)")
_STRAY_MARKUP = re.compile(r"\*+|~~+|(?<!\w)_+|_+(?!\w)")

# --- links, addresses, names ------------------------------------------------------------
_URL = re.compile(r"\b(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]+", re.I)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]*)*")
_DOTTED_NAME = re.compile(r"(?<![\w.])[A-Za-z_][\w-]+(?:\.[A-Za-z_][\w-]+)+(?![\w])")
_DOT_FILE = re.compile(r"(?<![\w.])\.([A-Za-z][\w-]+)\b")
_LETTER_EXTENSION = re.compile(r"[a-z]{1,4}")
_SPOKEN_EXTENSIONS = frozenset("com org net edu gov conf env app dev log lock zip info".split())
_SHARP = re.compile(r"\b([CF])#(?!\w)")
_SNAKE_CASE = re.compile(r"(?<=[A-Za-z0-9])_+(?=[A-Za-z0-9])")

# --- numbers, dates, times -----------------------------------------------------------------
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_US_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_TIME = re.compile(
    r"(?<![\d:.])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])"
    r"(?:\s?([AaPp])\.?[Mm]\.?(?![A-Za-z]))?"
)
_VERSION = re.compile(r"(?<![\w.])v(\d+(?:\.\d+)*)(?!\w|\.\d)")
_VERSION_WORD = re.compile(r"(?i)\b(version|release|python|node|java)\s+(\d+(?:\.\d+)+)\b")
_IP = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?::(\d{1,5}))?(?!\w|\.\d)")
_MULTI_DOT = re.compile(r"(?<![\w.])(\d+(?:\.\d+){2,})(?!\w|\.\d)")
_PERCENT = re.compile(r"(\d)\s?%")
_RANGE = re.compile(
    r"(?<![\w.\-])(\d+(?:\.\d+)?)(?:\s?–\s?|-(?!\d+-))(\d+(?:\.\d+)?)(?!\w|\.\d|-\d)"
)
_TRAILING_ZERO = re.compile(r"(?<![\w.])(\d[\d,]*)\.(\d*0)(?!\w|\.\d)")
_NUMBER_SIGN = re.compile(r"(?<!\w)#(\d+)")
_FRACTION = re.compile(r"(?<![\w/])(" + "|".join(map(re.escape, _FRACTIONS)) + r")(?![\w/])")
_APPROX = re.compile(r"(?<!\w)~(?=\d)")
_ARROW = re.compile(r"\s*(?:->|=>|→|⇒)\s*")
_EQUALS = re.compile(r"(?<=[\w)])\s+=\s+(?=[\w(-])|(?<=\d)=(?=\d)")

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

_EMOJI_EXTRA = frozenset("\ufe0f\ufe0e\u200d\u20e3")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")  # emoji and symbols are never ASCII
_WORD_CHAR = re.compile(r"\w")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?…])")
_PUNCT_AFTER_PUNCT = re.compile(r"(?<=[.,;:!?])\s*[,;:]+")
_STOP_AFTER_COMMA = re.compile(r"[,;:]\s*\.(?!\.)")
_DOUBLE_STOP = re.compile(r"(?<=[.!?])\s+\.(?!\.)")
_LEADING_PUNCT = re.compile(r"^(?:[\s,.;:!?…–—]|-(?!\d))+")
_SPACES = re.compile(r"[ \t\u00a0]+")


def speakable(text: str, *, code: CodeMode = "placeholder") -> str:
    """What TTS should say for one displayed unit; "" if there is nothing to say.

    ``code`` decides what happens to code: "placeholder" says that there is code (and the
    name of a short, word-like inline snippet), "skip" drops it, "read" reads it verbatim.
    """
    if code not in _CODE_MODES:
        raise ValueError(f"code must be one of {_CODE_MODES}, not {code!r}")
    try:
        return _speakable(text, code)
    except Exception:  # a rendering rule must never cost the user the speech
        return _last_resort(text)


def _speakable(text: str, code: CodeMode) -> str:
    protected: list[str] = []

    def protect(raw: str) -> str:
        protected.append(raw)
        return f"{_PROTECT_OPEN}{chr(0xE100 + len(protected) - 1)}{_PROTECT_CLOSE}"

    ending = _terminal_of(text)
    # Private-use characters are unspeakable, and the protection markers use them.
    text = _PRIVATE_USE.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _FENCE.sub(lambda m: _fenced_code(m, code, protect), text)
    text = _INLINE_CODE.sub(lambda m: _inline_code(m.group(2), code, protect), text)
    text = _markup_to_text(text)
    text = _addresses_to_words(text)
    text = _numbers_to_words(text)
    text = _drop_symbols(text)
    text = _tidy(text, ending)
    text = _PROTECTED.sub(lambda m: protected[ord(m.group(1)) - 0xE100], text).strip()
    return text if _WORD_CHAR.search(text) else ""


def _last_resort(text: str) -> str:
    """Letters, digits and basic punctuation only; used if a rule ever fails."""
    kept = re.sub(r"[^\w\s.,!?'-]+", " ", str(text))
    kept = _SPACES.sub(" ", kept.replace("\n", " ")).strip()
    return kept if _WORD_CHAR.search(kept) else ""


# -- code --------------------------------------------------------------------------------


def _fenced_code(m: re.Match[str], mode: CodeMode, protect: Callable[[str], str]) -> str:
    body = m.group("body").strip("\n")
    if not body.strip() or mode == "skip":
        return "\n"
    if mode == "read":
        return f"\n{_BLOCK}{protect(body)}\n"
    info = m.group("info").strip().split(maxsplit=1)
    language = _LANGUAGES.get(info[0].lower().lstrip("{.").rstrip("}")) if info else None
    said = f"Here is some {language} code." if language else "Here is some code."
    return f"\n{_BLOCK}{said}\n"


def _inline_code(content: str, mode: CodeMode, protect: Callable[[str], str]) -> str:
    content = content.strip()
    if mode == "skip" or not content:
        return ""
    if mode == "read":
        return protect(content)
    if _WORDLIKE_CODE.fullmatch(content):
        name = content.removesuffix("()")
        # snake_case reads as words; a lone "_" would otherwise be dropped as markup later
        return re.sub(r"(?<=\w)_+(?=\w)", " ", name).strip("_") or "code"
    return "code"


# -- markdown ----------------------------------------------------------------------------


def _markup_to_text(text: str) -> str:
    text = _HTML_BREAK.sub("\n", text)
    text = _HTML_TAG.sub("", text)
    text = html.unescape(text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _REF_LINK.sub(r"\1", text)
    text = _FOOTNOTE.sub("", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _join_lines(text.split("\n"))
    text = _ESCAPE.sub(r"\1", text)
    text = _TIMES_SIGN.sub(" times ", text)
    for pattern in _EMPHASIS:
        text = pattern.sub(r"\1", text)
    return _STRAY_MARKUP.sub("", text)


def _join_lines(lines: list[str]) -> str:
    """Join a unit's lines; a structural line (heading, list item, table row) gets a stop."""
    spoken: list[tuple[str, bool]] = []
    for line in lines:
        said, structural = _line_to_text(line)
        if said.strip():
            spoken.append((said.strip(), structural))
    parts: list[str] = []
    for i, (said, structural) in enumerate(spoken):
        followed_by_structure = i + 1 < len(spoken) and spoken[i + 1][1]
        # Verbatim code is left exactly as written.
        ends_open = said[-1] not in _TERMINAL and not said.endswith(_PROTECT_CLOSE)
        if (structural or followed_by_structure) and ends_open:
            said += "."
        parts.append(said)
    return " ".join(parts)


def _line_to_text(line: str) -> tuple[str, bool]:
    if (
        _THEMATIC_BREAK.match(line)
        or _REF_DEFINITION.match(line)
        or ("|" in line and _TABLE_SEPARATOR.match(line))
    ):
        return "", False
    heading = _HEADING.match(line)
    if heading:
        return heading.group(1), True
    stripped = line.strip()
    if stripped.startswith("|") or stripped.count("|") >= 2:
        cells = [cell.strip() for cell in stripped.strip("|").split("|")]
        return ", ".join(cell for cell in cells if cell), True
    if line.startswith(_BLOCK):
        return line[len(_BLOCK) :], True
    line = _QUOTE.sub("", line)
    item = _LIST_MARKER.match(line)
    if item:
        return line[item.end() :], True
    return line, False


# -- URLs, e-mail, file names --------------------------------------------------------------


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
    if not _WORD_CHAR.search(host):
        return "a link" + tail
    if _IP.fullmatch(host):
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


def _addresses_to_words(text: str) -> str:
    text = _URL.sub(_url_to_words, text)
    text = _EMAIL.sub(_email_to_words, text)
    text = _PATH.sub(_path_to_words, text)
    text = _SHARP.sub(r"\1 sharp", text)
    for pattern, replacement in _ABBREVIATIONS:
        text = pattern.sub(replacement, text)
    text = _DOTTED_NAME.sub(lambda m: _dotted(m.group(0)), text)
    text = _SNAKE_CASE.sub(" ", text)
    return _DOT_FILE.sub(r"dot \1", text)


# -- numbers ---------------------------------------------------------------------------------


def _iso_date(m: re.Match[str]) -> str:
    year, month, day = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{_MONTHS[month - 1]} {day}, {year}"


def _us_date(m: re.Match[str]) -> str:
    month, day, year = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{_MONTHS[month - 1]} {day}, {year}"


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    seconds, meridiem = m.group(3), m.group(4)
    if hour > 24 or minute > 59:
        return m.group(0)
    if minute == 0:
        said = f"{hour}" if meridiem else f"{hour} o'clock"
    elif minute < 10:
        said = f"{hour} oh {minute}"
    else:
        said = f"{hour} {minute}"
    if seconds is not None and int(seconds):
        said += f" and {int(seconds)} second{'s' if int(seconds) != 1 else ''}"
    if meridiem:
        said += " AM" if meridiem.lower() == "a" else " PM"
    return said


def _ip(m: re.Match[str]) -> str:
    address, port = m.group(1), m.group(2)
    if any(int(octet) > 255 for octet in address.split(".")):
        return m.group(0)
    said = " dot ".join(str(int(octet)) for octet in address.split("."))
    return f"{said} port {port}" if port else said


def _currency(m: re.Match[str]) -> str:
    symbol, whole, cents, short_magnitude, magnitude = m.groups()
    one, many, sub_one, sub_many = _CURRENCIES[symbol]
    magnitude = _MAGNITUDES.get(short_magnitude or "", magnitude)
    if magnitude:
        amount = whole + (f".{cents}" if cents else "")
        return f"{amount} {magnitude} {many}"
    units = int(whole.replace(",", "") or 0)
    sub = int(cents.ljust(2, "0")) if cents else 0
    parts = []
    if units or not sub or not sub_one:
        parts.append(f"{whole} {one if units == 1 else many}")
    if sub and sub_one:
        parts.append(f"{sub} {sub_one if sub == 1 else sub_many}")
    return " and ".join(parts)


def _unit(m: re.Match[str]) -> str:
    number, unit = m.group(1), m.group(2)
    singular, plural = _UNITS[unit]
    return f"{number} {singular if number == '1' else plural}"


def _numbers_to_words(text: str) -> str:
    text = _ISO_DATE.sub(_iso_date, text)
    text = _US_DATE.sub(_us_date, text)
    text = _TIME.sub(_time, text)
    text = _VERSION.sub(lambda m: "version " + m.group(1).replace(".", " point "), text)
    text = _VERSION_WORD.sub(lambda m: f"{m.group(1)} {m.group(2).replace('.', ' point ')}", text)
    text = _IP.sub(_ip, text)
    text = _MULTI_DOT.sub(lambda m: m.group(1).replace(".", " point "), text)
    text = _CURRENCY_RE.sub(_currency, text)
    text = _PERCENT.sub(r"\1 percent", text)
    text = _FRACTION.sub(lambda m: _FRACTIONS[m.group(1)], text)
    text = _RANGE.sub(r"\1 to \2", text)
    text = _UNIT_RE.sub(_unit, text)
    text = _TRAILING_ZERO.sub(lambda m: f"{m.group(1)} point {' '.join(m.group(2))}", text)
    text = _NUMBER_SIGN.sub(r"number \1", text)
    text = _APPROX.sub("about ", text)
    text = _EQUALS.sub(" equals ", text)
    return _ARROW.sub(" to ", text)


# -- symbols and tidying -----------------------------------------------------------------------


def _is_emoji(ch: str) -> bool:
    if ch in _EMOJI_EXTRA or "\U0001f3fb" <= ch <= "\U0001f3ff":
        return True
    return unicodedata.category(ch) == "So"


def _drop_symbols(text: str) -> str:
    text = text.replace("≈", " approximately ").replace("±", " plus or minus ")
    return _NON_ASCII.sub(lambda m: " " if _is_emoji(m.group(0)) else m.group(0), text)


def _terminal_of(text: str) -> str:
    stripped = text.rstrip()
    return stripped[-1] if stripped and stripped[-1] in ".!?…" else ""


def _tidy(text: str, ending: str) -> str:
    text = _SPACES.sub(" ", text.replace("\n", " "))
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _PUNCT_AFTER_PUNCT.sub("", text)
    text = _STOP_AFTER_COMMA.sub(".", text)
    text = _DOUBLE_STOP.sub("", text)
    text = _LEADING_PUNCT.sub("", text).strip()
    if ending and text and text[-1] not in _TERMINAL and _WORD_CHAR.search(text):
        text += ending
    return text
