"""What the page and ``voicecli web`` say to each other over the tab's WebSocket.

Control messages are the speech protocol's JSON objects (``{"v": 1, "type": ...}``, text
frames). Audio goes to the page as the protocol's AUDIO frames: int16 PCM at
``SAMPLE_RATE``, the request id naming the turn and sentence (``"3:0"``), the sequence
counting frames within the turn. Time on the page is the page's clock, so the page
reports *how long from now* a sample becomes audible, never a time of its own.

Like ``voicecli.protocol``, this module imports nothing else from voicecli.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from voicecli import protocol as p
from voicecli.text import why_bad

# Page -> server.
ASK = "ask"  # text; optional buffered: release the reply's text only once it is complete
INTERRUPT = "interrupt"  # flush the turn: LLM stream, queued text, synthesis, audio
PLAYED_POSITION = (
    "played"  # turn, position (samples of the turn heard), underruns (episodes so far)
)
AUDIBLE = "audible"  # turn, sentence, after: seconds from now until its first sample sounds
PAGE_TYPES = (ASK, INTERRUPT, PLAYED_POSITION, AUDIBLE)

# Server -> page.
HELLO = "hello"  # sample_rate, llm, synthesizer
TURN = "turn"  # turn, question, buffered
TEXT = "text"  # turn, piece: the reply as the LLM writes it
SENTENCE = "sentence"  # turn, sentence, display: a unit handed to speech
NOW = "now"  # turn, sentence, word ([start, end) in its display, or null), state
FLUSH = "flush"  # turn: drop every sample of it not yet played
AUDIO_END = "audio_end"  # turn, samples: the turn's audio is all sent
TURN_END = "turn_end"  # turn, interrupted, heard, error
ERROR = p.ERROR  # code, message

MAX_QUESTION_CHARS = 4000
# Any legal question as JSON's longest escapes, plus the object around it.
MAX_MESSAGE_BYTES = 12 * MAX_QUESTION_CHARS + 1024
PAGE_FRAME_SAMPLES = 2400  # per audio frame (a tenth of a second): a flush's granularity


@dataclass(frozen=True)
class Ask:
    text: str
    buffered: bool = False


@dataclass(frozen=True)
class Interrupt:
    pass


@dataclass(frozen=True)
class Played:
    turn: int
    position: int
    underruns: int


@dataclass(frozen=True)
class Audible:
    turn: int
    sentence: int
    after: float  # seconds from the message's sending; negative: already sounding


PageMessage = Ask | Interrupt | Played | Audible


def parse_page_message(data: str | bytes) -> PageMessage:
    """One message from the page; ``p.ProtocolError`` (with the code to answer) if bad."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise p.ProtocolError(
            p.TEXT_TOO_LONG, f"message of {len(data)} bytes: at most {MAX_MESSAGE_BYTES}"
        )
    message = p.decode_client_message(data)
    kind = message["type"]
    if kind == ASK:
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            raise p.ProtocolError(p.BAD_REQUEST, '"text" must be a non-empty string')
        why = why_bad(text)
        if why is not None:
            raise p.ProtocolError(p.BAD_REQUEST, f'"text" is {why}')
        if len(text) > MAX_QUESTION_CHARS:
            raise p.ProtocolError(
                p.TEXT_TOO_LONG, f"question of {len(text)} characters: at most {MAX_QUESTION_CHARS}"
            )
        buffered = message.get("buffered", False)
        if not isinstance(buffered, bool):
            raise p.ProtocolError(p.BAD_REQUEST, '"buffered" must be true or false')
        return Ask(text, buffered)
    if kind == INTERRUPT:
        return Interrupt()
    if kind == PLAYED_POSITION:
        return Played(
            _count(message, "turn"), _count(message, "position"), _count(message, "underruns")
        )
    if kind == AUDIBLE:
        after = message.get("after")
        if type(after) not in (int, float) or not math.isfinite(after) or abs(after) > 60:
            raise p.ProtocolError(p.BAD_REQUEST, '"after" must be seconds, within a minute')
        return Audible(_count(message, "turn"), _count(message, "sentence"), float(after))
    raise p.ProtocolError(p.UNKNOWN_TYPE, f"unknown message type {kind[:40]!r}")


def _count(message: dict[str, Any], name: str) -> int:
    value = message.get(name)
    if type(value) is not int or not 0 <= value < 2**53:
        raise p.ProtocolError(p.BAD_REQUEST, f'"{name}" must be a whole number >= 0')
    return value


def audio_frame(turn: int, sentence: int, seq: int, samples: np.ndarray) -> bytes:
    return p.encode_audio_frame(f"{turn}:{sentence}", seq, p.to_pcm16(samples))


def message(type_: str, **fields: Any) -> str:
    return p.encode_json(p.control(type_, **fields))
