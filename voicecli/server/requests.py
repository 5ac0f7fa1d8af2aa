"""What a speak request may hold, and the limits that bound the server's work."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from voicecli import protocol as p
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED
from voicecli.normalize import NO_WORDS, bounded
from voicecli.text import why_bad
from voicecli.tts.voices import VoiceSpec

MAX_VOICE_CHARS = 200

# Kokoro gives no audio for a text until all of it is synthesized, so a long
# speak is cut at sentence ends and its first sentence is heard sooner.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")


@dataclass(frozen=True)
class Limits:
    max_pending_per_session: int = p.MAX_IN_FLIGHT  # unanswered speak requests per connection
    # ...and per client address beyond this machine, all its connections together.
    max_pending_per_address: int = 4 * p.MAX_IN_FLIGHT
    # Listeners spoken for at once: ``listeners`` if set, else as many as the model keeps
    # up with in real time (found from its own work), never more than ``max_listeners``;
    # the next is told it is busy.
    listeners: int | None = None
    max_listeners: int = 64
    listeners_before_measuring: int = 4  # until the model's speed is known
    # Of the throughput found, what the listeners admitted may need: the rest is the
    # margin that keeps each of them without gaps.
    realtime_margin: float = 0.8
    # A listener keeps its place while it has work, and this long after: between the
    # sentences of one turn it has none for a moment.
    listener_grace: float = 3.0
    # Messages read from one connection a second (and at once), and from one client
    # address, all its connections together: past them, a client is read later.
    messages_per_second: float = 50.0
    message_burst: int = 100
    address_messages_per_second: float = 400.0
    # What a refused message costs of those rates, in messages: refusing is work the
    # server does for nothing, and a client asking for what it cannot have is read slower.
    refusal_cost: float = 8.0
    max_text_chars: int = 2000  # per speak
    send_queue_frames: int = 32  # audio frames buffered per connection
    frame_samples: int = 4800  # per audio frame (a fifth of a second): cancel's granularity
    stall_timeout: float = 30.0  # seconds a client may read nothing before it is ended
    max_control_backlog: int = 256  # unsent control replies before a session is dropped
    # Audio one speak may produce, whatever its text: 2000 characters of prose are about
    # 115 s at speed 1, so 230 s at 0.5.
    max_request_seconds: float = 300.0
    # ...and no more than its text can take to say, at speed 1: Kokoro says a letter or
    # digit in about 0.07 s, a spelled-out hash's in 0.3 and a number's digit in 0.6,
    # so a speak that runs past this is a model gone astray, and is cut.
    base_request_seconds: float = 3.0
    seconds_per_char: float = 0.6
    shared_part_seconds: float = 0.4  # decoding per part while other clients wait...
    short_parts_ahead: float = 1.0  # ...or while the client has this much audio queued
    body_timeout: float = 30.0  # seconds to receive an /invocations body
    release_after: float = 1.0  # idle seconds before freed memory goes back to the system
    warm_after: float = 0.5  # idle seconds after loading before the model is warmed up

    @property
    def max_message_bytes(self) -> int:
        # Every character as JSON's longest escape, a surrogate pair ("\\ud83d\\ude00",
        # 12 bytes), plus the JSON around it: any legal text fits in a frame.
        return 12 * self.max_text_chars + 4096

    def audio_budget(self, text: str, speed: float | None) -> float:
        """Seconds of audio ``text`` may produce at ``speed``."""
        chars = sum(1 for ch in text if ch.isalnum())
        seconds = (self.base_request_seconds + self.seconds_per_char * chars) / (speed or 1.0)
        return min(self.max_request_seconds, seconds)


def split_sentences(text: str) -> list[str]:
    return [piece.strip() for piece in _SENTENCE_END.split(text) if piece.strip()]


def parse_speak(
    message: dict[str, Any], limits: Limits
) -> tuple[str, str, str | None, float | None, bool]:
    """(request_id, text, voice, speed, words) of a speak message, validated, its text
    bounded as the CLI bounds what it speaks; ``words``: whether to send the words'
    timings (``words`` messages)."""
    request_id = message.get("request_id")
    encoded = _utf8(request_id) if isinstance(request_id, str) else None
    if not encoded or len(encoded) > p.MAX_REQUEST_ID_BYTES:
        raise p.ProtocolError(
            p.BAD_REQUEST,
            f"speak needs a request_id of 1 to {p.MAX_REQUEST_ID_BYTES} bytes of Unicode text",
        )
    text = message.get("text")
    if not isinstance(text, str) or not text.strip():
        raise p.ProtocolError(p.BAD_REQUEST, "speak needs a non-empty text", request_id)
    why = why_bad(text)
    if why is not None:
        raise p.ProtocolError(p.BAD_REQUEST, f"text is {why}", request_id)
    if len(text) > limits.max_text_chars:
        raise p.ProtocolError(
            p.TEXT_TOO_LONG,
            f"text has {len(text)} characters; the limit "
            f"is {limits.max_text_chars}: send one sentence per speak",
            request_id,
        )
    voice = message.get("voice")
    if voice is not None:
        if not isinstance(voice, str) or len(voice) > MAX_VOICE_CHARS or _utf8(voice) is None:
            raise p.ProtocolError(p.BAD_REQUEST, "voice must be a voice name or blend", request_id)
        try:
            VoiceSpec.parse(voice)
        except VoiceCliError as exc:
            raise p.ProtocolError(p.BAD_REQUEST, str(exc), request_id) from None
    speed = message.get("speed")
    if speed is not None:
        if (
            isinstance(speed, bool)
            or not isinstance(speed, int | float)
            or not MIN_SPEED <= speed <= MAX_SPEED
        ):
            raise p.ProtocolError(
                p.BAD_REQUEST, f"speed must be a number from {MIN_SPEED} to {MAX_SPEED}", request_id
            )
        speed = float(speed)
    words = message.get("words")
    if words is not None and (type(words) is not int or words < 1):
        raise p.ProtocolError(
            p.BAD_REQUEST,
            f"words must be the word timing format to send, from 1 (this server sends "
            f"{p.WORDS_FORMAT})",
            request_id,
        )
    text = bounded(text)
    if not text:
        raise p.ProtocolError(p.BAD_REQUEST, NO_WORDS, request_id)
    return request_id, text, voice, speed, words is not None


def _utf8(text: str) -> bytes | None:
    return None if why_bad(text) is not None else text.encode("utf-8")
