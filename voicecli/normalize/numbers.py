"""Dates, times, versions, IP addresses, money, percentages, ranges, fractions and
unit symbols, rewritten as words where misaki would read the digits wrongly."""

from __future__ import annotations

import re

MONTHS = (
    "January February March April May June July August September October November December"
).split()

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

_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")

_US_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")

_TIME = re.compile(
    r"(?<![\d:.])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])"
    r"(?:\s?([AaPp])\.?[Mm]\.?(?![A-Za-z]))?"
)

_VERSION = re.compile(r"(?<![\w.])v(\d+(?:\.\d+)*)(?!\w|\.\d)")

_VERSION_WORD = re.compile(r"(?i)\b(version|release|python|node|java)\s+(\d+(?:\.\d+)+)\b")

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


def _iso_date(m: re.Match[str]) -> str:
    year, month, day = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{MONTHS[month - 1]} {day}, {year}"


def _us_date(m: re.Match[str]) -> str:
    month, day, year = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{MONTHS[month - 1]} {day}, {year}"


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


def numbers_to_words(text: str) -> str:
    text = _ISO_DATE.sub(_iso_date, text)
    text = _US_DATE.sub(_us_date, text)
    text = _TIME.sub(_time, text)
    text = _VERSION.sub(lambda m: "version " + m.group(1).replace(".", " point "), text)
    text = _VERSION_WORD.sub(lambda m: f"{m.group(1)} {m.group(2).replace('.', ' point ')}", text)
    text = IP.sub(_ip, text)
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


IP = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?::(\d{1,5}))?(?!\w|\.\d)")
