"""voicecli's speech wire protocol, version 1, shared by the server and its clients.

Every message says its type, and nothing is guessed from a frame's first byte:

* Control messages are JSON objects ``{"v": 1, "type": ..., ...}``. On a WebSocket
  they travel as text frames, or as binary frames (SageMaker delivers every request
  PayloadPart whose DataType is BINARY, the default, as a binary frame).
* Binary frames from the server start with a fixed header: ``MAGIC`` (4 bytes),
  the protocol version (1 byte) and a frame kind (1 byte). Kind ``AUDIO`` carries
  int16 little-endian mono PCM at ``SAMPLE_RATE`` for one request; kind ``CONTROL``
  carries a control message as UTF-8 JSON (used where a transport has no text
  frames, such as the framed HTTP stream below).
* A binary frame from a client is recognised as control if it carries the same
  header with kind ``CONTROL``, or if it is a UTF-8 JSON object with a ``type``
  field. ``MAGIC`` cannot begin a JSON document, so the two never collide, and
  anything else is rejected with ``error`` code ``bad_frame``.

Audio frame layout, after the 6-byte header::

    u8 request-id length n | n bytes request id (UTF-8) | u32 sequence (big-endian) | PCM

The framed HTTP stream (``POST /invocations`` with ``Accept: STREAM_MEDIA_TYPE``)
sends the same binary frames, each preceded by its length as a big-endian u32,
because HTTP chunks (and SageMaker PayloadParts) may split or merge frames.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

VERSION = 1
MAGIC = b"VCLI"
SAMPLE_RATE = 24_000  # Kokoro's rate; audio inside voicecli stays at this rate too
WS_PATH = "/invocations-bidirectional-stream"  # SageMaker's bidirectional route
STREAM_MEDIA_TYPE = "application/x-voicecli-stream"

KIND_AUDIO = 0x01
KIND_CONTROL = 0x02

_HEADER = struct.Struct("!4sBB")
_SEQ = struct.Struct("!I")
_LENGTH = struct.Struct("!I")

MAX_REQUEST_ID_BYTES = 64
# Unanswered speak requests one session may have; a server answers `overloaded` beyond it,
# so clients keep at most this many in flight.
MAX_IN_FLIGHT = 8

# Client -> server message types.
SPEAK = "speak"  # request_id, text, optional voice, speed and words (WORDS_FORMAT)
CANCEL = "cancel"  # request_id; without one, every request of the session
END = "end"  # no more text from this client: finish, send `done`, close
CLIENT_TYPES = (SPEAK, CANCEL, END)

# Server -> client message types (audio travels in AUDIO frames).
# request_id, frames, samples, cancelled, and "truncated": true when the server cut the
# audio at the most its text may take to say (a model gone astray on odd text).
SENTENCE_DONE = "sentence_done"
# request_id, format, words: [{"text", "start", "end"}], samples from the request's
# first; sent only to a speak that asked for words, before sentence_done, as the
# server learns them (a long text may get several).
WORDS = "words"
ERROR = "error"  # code, message, optional request_id
DONE = "done"  # every request after `end` is answered; the server closes next

# The word timing format this side speaks. A client asks for it in speak ("words": 1);
# a server that knows no word timings ignores the field, and one with an older format
# sends that (its "format" says which), so either side may be the older.
WORDS_FORMAT = 1

# Error codes a client can act on.
BAD_JSON = "bad_json"  # the control message is not a JSON object
BAD_FRAME = "bad_frame"  # a binary frame that is neither control JSON nor a voicecli frame
BAD_VERSION = "bad_version"  # "v" is not a version this server speaks
UNKNOWN_TYPE = "unknown_type"
BAD_REQUEST = "bad_request"  # a field is missing, mistyped or out of range
TEXT_TOO_LONG = "text_too_long"
OVERLOADED = "overloaded"  # the client's own share of the queue is full: wait for replies
BUSY = "busy"  # the server speaks for as many listeners as it can in real time: retry later
SLOW_CONSUMER = "slow_consumer"  # the client stopped reading; the server gives up on it
SYNTHESIS_FAILED = "synthesis_failed"
SERVER_ERROR = "server_error"  # the server failed to handle a message: its bug, not yours


class ProtocolError(Exception):
    """A message that breaks the protocol; ``code`` is the error code to reply with."""

    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass(frozen=True)
class AudioFrame:
    request_id: str
    seq: int
    pcm: bytes  # int16 little-endian mono

    def samples(self) -> np.ndarray:
        """The audio as float32 in [-1, 1), the pipeline's format."""
        return from_pcm16(self.pcm)


def control(type_: str, **fields: Any) -> dict[str, Any]:
    return {"v": VERSION, "type": type_, **fields}


def encode_json(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def encode_control_frame(message: dict[str, Any]) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, KIND_CONTROL) + encode_json(message).encode("utf-8")


def to_pcm16(samples: np.ndarray) -> bytes:
    """float32 audio as int16 little-endian PCM: the one conversion, for files and the wire.

    Full scale is 32767 so that +1.0 and -1.0 map symmetrically; NaN becomes silence.
    """
    clipped = np.clip(np.nan_to_num(np.asarray(samples, dtype=np.float32), nan=0.0), -1.0, 1.0)
    return np.rint(clipped * 32767.0).astype("<i2").tobytes()


def from_pcm16(pcm: bytes) -> np.ndarray:
    """int16 little-endian PCM as float32 in [-1, 1)."""
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def encode_audio_frame(request_id: str, seq: int, pcm: bytes) -> bytes:
    rid = request_id.encode("utf-8")
    if len(rid) > MAX_REQUEST_ID_BYTES:
        raise ValueError(f"request id longer than {MAX_REQUEST_ID_BYTES} bytes")
    return _HEADER.pack(MAGIC, VERSION, KIND_AUDIO) + bytes([len(rid)]) + rid + _SEQ.pack(seq) + pcm


def _parse_json(data: str | bytes) -> dict[str, Any]:
    try:
        message = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ProtocolError(BAD_JSON, "control message is not valid JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError(BAD_JSON, "control message must be a JSON object")
    if not isinstance(message.get("type"), str):
        raise ProtocolError(BAD_REQUEST, 'control message has no "type" string')
    version = message.get("v", VERSION)
    if type(version) is not int or version != VERSION:  # true == 1 in Python, not here
        raise ProtocolError(
            BAD_VERSION,
            f"protocol version {str(version)[:20]!r} is not supported; this server speaks "
            f"version {VERSION}",
        )
    return message


def _split_header(data: bytes) -> tuple[int, bytes] | None:
    """(kind, body) if ``data`` starts with the voicecli header, else None."""
    if len(data) < _HEADER.size or not data.startswith(MAGIC):
        return None
    _, version, kind = _HEADER.unpack_from(data)
    if version != VERSION:
        raise ProtocolError(
            BAD_VERSION,
            f"frame version {version} is not supported; this side speaks version {VERSION}",
        )
    return kind, data[_HEADER.size :]


def decode_client_message(data: str | bytes) -> dict[str, Any]:
    """A client's control message from a text frame (str) or a binary frame (bytes)."""
    if isinstance(data, str):
        return _parse_json(data)
    framed = _split_header(data)
    if framed is not None:
        kind, body = framed
        if kind != KIND_CONTROL:
            raise ProtocolError(BAD_FRAME, f"clients may only send control frames, not kind {kind}")
        return _parse_json(body)
    if data.lstrip()[:1] != b"{":
        raise ProtocolError(BAD_FRAME, "binary frame is neither a voicecli frame nor JSON")
    return _parse_json(data)


def decode_server_frame(data: str | bytes) -> dict[str, Any] | AudioFrame:
    """A server message: a control dict or an AudioFrame."""
    if isinstance(data, str):
        return _parse_json(data)
    framed = _split_header(data)
    if framed is None:
        # SageMaker turns text frames into UTF8 PayloadParts, which arrive as bytes.
        if data.lstrip()[:1] == b"{":
            return _parse_json(data)
        raise ProtocolError(BAD_FRAME, "server frame has no voicecli header")
    kind, body = framed
    if kind == KIND_CONTROL:
        return _parse_json(body)
    if kind != KIND_AUDIO or not body:
        raise ProtocolError(BAD_FRAME, f"unknown frame kind {kind}")
    n = body[0]
    if len(body) < 1 + n + _SEQ.size:
        raise ProtocolError(BAD_FRAME, "audio frame is truncated")
    try:
        request_id = body[1 : 1 + n].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(BAD_FRAME, "audio frame request id is not UTF-8") from None
    (seq,) = _SEQ.unpack_from(body, 1 + n)
    pcm = body[1 + n + _SEQ.size :]
    if len(pcm) % 2:
        raise ProtocolError(BAD_FRAME, "audio frame has an odd number of PCM bytes")
    return AudioFrame(request_id, seq, pcm)


def encode_words(words: Iterable[tuple[str, int, int]]) -> list[dict[str, Any]]:
    return [{"text": text, "start": start, "end": end} for text, start, end in words]


def decode_words(message: dict[str, Any]) -> list[tuple[str, int, int]] | None:
    """The (text, start, end) of a ``words`` message, or None if it is not one this side
    reads (another format, or malformed: word timings are never worth failing a turn)."""
    if message.get("format") != WORDS_FORMAT or not isinstance(message.get("words"), list):
        return None
    words = []
    for item in message["words"]:
        if not isinstance(item, dict):
            return None
        text, start, end = item.get("text"), item.get("start"), item.get("end")
        if (
            not isinstance(text, str)
            or not all(type(v) is int and v >= 0 for v in (start, end))
            or end < start
        ):
            return None
        words.append((text, start, end))
    return words


def length_prefixed(frame: bytes) -> bytes:
    return _LENGTH.pack(len(frame)) + frame


class StreamReassembler:
    """Cuts a byte stream of length-prefixed frames back into frames.

    Transport pieces (HTTP chunks, SageMaker PayloadParts) may end anywhere,
    even inside the length prefix, so bytes wait here until a frame is whole.
    """

    def __init__(self, max_frame: int = 1 << 20) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        while len(self._buffer) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self._buffer)
            if size > self._max_frame:
                raise ProtocolError(BAD_FRAME, f"stream frame of {size} bytes is too large")
            if len(self._buffer) < _LENGTH.size + size:
                return
            frame = bytes(self._buffer[_LENGTH.size : _LENGTH.size + size])
            del self._buffer[: _LENGTH.size + size]
            yield frame

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame; non-zero at the end means a truncated stream."""
        return len(self._buffer)
