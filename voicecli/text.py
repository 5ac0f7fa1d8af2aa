"""Text from anywhere (arguments, stdin, the config and the environment, the page, the
wire, an LLM's reply), decoded and checked in one place, with one policy: what is not
valid UTF-8 is refused in one line that says where, before any part of the pipeline sees
it. Python hands on an argument's or a variable's bad bytes as lone surrogates
(``surrogateescape``), and JSON may carry them escaped; either would break the G2P and
the socket downstream, so neither goes further than here."""

from __future__ import annotations

import codecs

from voicecli.errors import VoiceCliError

CONVERT_HINT = "Convert it first, for example: iconv -f latin1 -t utf-8 FILE"


def first_bad(text: str) -> int | None:
    """Where the first character of ``text`` that is not Unicode text is (a lone
    surrogate), or None."""
    for i, ch in enumerate(text):
        if "\ud800" <= ch <= "\udfff":
            return i
    return None


def why_bad(text: str) -> str | None:
    """What is wrong with ``text``, said as a user would read it; None if nothing is."""
    i = first_bad(text)
    if i is None:
        return None
    code = ord(text[i])
    if 0xDC80 <= code <= 0xDCFF:  # a byte that surrogateescape kept
        return f"not valid UTF-8 (byte 0x{code - 0xDC00:02x} at character {i + 1})"
    return f"not valid Unicode (a lone surrogate at character {i + 1})"


def checked(text: str, what: str) -> str:
    """``text``, if it is valid Unicode; a VoiceCliError naming ``what`` otherwise."""
    why = why_bad(text)
    if why is not None:
        raise VoiceCliError(f"{what} is {why}. {CONVERT_HINT}.")
    return text


class Utf8Stream:
    """UTF-8 bytes as they arrive (a character may be split across reads): the text so
    far, and a VoiceCliError naming the byte offset of the first bad byte."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._pending = b""  # the start of a multi-byte character split across reads
        self._offset = 0  # bytes before ``_pending``

    def decode(self, data: bytes, final: bool = False) -> tuple[str, VoiceCliError | None]:
        """The text ``data`` completes, and the error that stops the stream, if any
        (the text before the bad byte is still given)."""
        buf = self._pending + data
        try:
            text, used = codecs.utf_8_decode(buf, "strict", final)
        except UnicodeDecodeError as exc:
            error = VoiceCliError(
                f"{self.what} is not valid UTF-8 (bad byte at offset "
                f"{self._offset + exc.start}). {CONVERT_HINT}."
            )
            return buf[: exc.start].decode("utf-8"), error
        self._pending = buf[used:]
        self._offset += used
        return text, None
