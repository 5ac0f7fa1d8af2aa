"""Synthesis by a remote `voicecli serve` (or anything speaking voicecli's protocol).

The client is full duplex: a sender thread sends ``speak`` for each sentence as soon
as the sentence iterator yields it, while the caller's thread receives audio. The
next sentence is never held back until the previous one's audio has arrived.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.server import protocol as p
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts import AudioChunk, Sentence

log = logging.getLogger(__name__)

WS_PATH = "/invocations-bidirectional-stream"
# The server's default per-session limit; staying at or below it avoids `overloaded`.
DEFAULT_MAX_IN_FLIGHT = 8
_POLL = 0.05  # seconds between checks of the cancel token while waiting


def explain_error(message: dict[str, Any], where: str) -> str:
    code = message.get("code", "?")
    text = message.get("message", "")
    if code == p.OVERLOADED:
        return (
            f"The speech server at {where} is overloaded ({text}). Retry later, or add "
            "instances to the endpoint."
        )
    if code == p.TEXT_TOO_LONG:
        return f"The speech server at {where} refused a sentence as too long: {text}."
    if code in (p.BAD_VERSION, p.UNKNOWN_TYPE, p.BAD_FRAME, p.BAD_JSON):
        return (
            f"The speech server at {where} does not understand this client ({code}: "
            f"{text}). Use the same voicecli version on both sides."
        )
    return f"The speech server at {where} failed: {text} ({code})."


class TurnState:
    """One turn over the protocol: request ids for sentences, timeline marks, replies.

    Shared by every transport that carries voicecli's protocol.
    """

    def __init__(
        self, timeline: Timeline, where: str, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    ) -> None:
        self.timeline = timeline
        self.where = where
        self._prefix = uuid.uuid4().hex[:8]
        self._sentences: dict[str, int] = {}
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_in_flight)
        self.done = False

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._sentences)

    def wait_for_slot(self, cancel: CancelToken) -> bool:
        """Block while ``max_in_flight`` sentences are unanswered; False once cancelled."""
        while not self._slots.acquire(timeout=_POLL):
            if cancel.cancelled:
                return False
        if cancel.cancelled:
            self._slots.release()
            return False
        return True

    def speak(
        self,
        sentence: Sentence,
        voice: str | None,
        speed: float | None,
    ) -> dict[str, Any]:
        """The speak message for ``sentence``; marks SYNTH_START as it is about to go out."""
        request_id = f"{self._prefix}-{sentence.index}"
        with self._lock:
            self._sentences[request_id] = sentence.index
        self.timeline.mark(SYNTH_START, sentence.index)
        fields: dict[str, Any] = {"request_id": request_id, "text": sentence.text}
        if voice is not None:
            fields["voice"] = voice
        if speed is not None:
            fields["speed"] = speed
        return p.control(p.SPEAK, **fields)

    def requests(
        self,
        sentences: Iterable[Sentence],
        cancel: CancelToken,
        voice: str | None,
        speed: float | None,
    ) -> Iterator[dict[str, Any]]:
        """The speak message for each sentence with words, as soon as a slot is free.

        Stops early once ``cancel`` fires; callers check it before sending ``end``.
        """
        for sentence in sentences:
            if not sentence.text.strip():
                continue
            if not self.wait_for_slot(cancel):
                return
            yield self.speak(sentence, voice, speed)

    def handle(self, message: dict[str, Any] | p.AudioFrame) -> AudioChunk | None:
        """The chunk to yield for a server message, if any; raises VoiceCliError on `error`."""
        if isinstance(message, p.AudioFrame):
            with self._lock:
                index = self._sentences.get(message.request_id)
            if index is None:  # audio of a cancelled request, already written off
                return None
            self.timeline.mark_once(SYNTH_FIRST_CHUNK, index)
            return AudioChunk(index, message.samples())
        kind = message.get("type")
        if kind == p.SENTENCE_DONE:
            index = self._finish(message.get("request_id"))
            if index is None or message.get("cancelled"):
                return None
            self.timeline.mark(SYNTH_END, index)
            return AudioChunk(index, np.zeros(0, np.float32), last=True)
        if kind == p.ERROR:
            self._finish(message.get("request_id"))
            raise VoiceCliError(explain_error(message, self.where))
        if kind == p.DONE:
            self.done = True
            return None
        log.debug("ignoring server message of type %r", kind)
        return None

    def _finish(self, request_id: Any) -> int | None:
        with self._lock:
            index = self._sentences.pop(request_id, None) if isinstance(request_id, str) else None
        if index is not None:
            self._slots.release()
        return index


def websocket_url(endpoint_url: str) -> str:
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        raise VoiceCliError(
            f"Endpoint URL {endpoint_url!r} is not a WebSocket URL: use "
            "ws://HOST:PORT (for example ws://127.0.0.1:8080)."
        )
    path = parts.path if parts.path not in ("", "/") else WS_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class WebSocketSynthesizer:
    """A Synthesizer backed by a `voicecli serve` WebSocket; one connection per turn."""

    sample_rate = p.SAMPLE_RATE

    def __init__(
        self,
        endpoint_url: str,
        voice: str | None = None,
        speed: float | None = None,
        *,
        open_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.url = websocket_url(endpoint_url)
        self.voice = voice
        self.speed = speed
        self.open_timeout = open_timeout
        self.read_timeout = read_timeout  # silence allowed while sentences are unanswered
        self.max_in_flight = max_in_flight

    def _connect(self) -> Any:
        from websockets.exceptions import InvalidHandshake, InvalidURI
        from websockets.sync.client import connect

        try:
            return connect(
                self.url,
                open_timeout=self.open_timeout,
                max_size=4 << 20,
                compression=None,
                proxy=None,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise VoiceCliError(
                f"Cannot open the speech stream at {self.url}: {exc}. Is `voicecli serve` "
                "running there? Check --endpoint-url."
            ) from None

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        from websockets.exceptions import ConnectionClosed

        if cancel.cancelled:
            return
        # The connection lives for one turn; leaving the block closes it.
        with self._connect() as conn:
            turn = TurnState(timeline, self.url, self.max_in_flight)
            failure: list[BaseException] = []

            def send_cancel() -> None:
                try:
                    conn.send(p.encode_json(p.control(p.CANCEL)))
                except Exception:  # noqa: BLE001 - the connection is being torn down anyway
                    pass

            def send_all() -> None:
                try:
                    for message in turn.requests(sentences, cancel, self.voice, self.speed):
                        conn.send(p.encode_json(message))
                    if not cancel.cancelled:
                        conn.send(p.encode_json(p.control(p.END)))
                except ConnectionClosed:
                    pass  # the receiver reports why
                except BaseException as exc:  # noqa: BLE001 - e.g. the LLM source failed: re-raised
                    failure.append(exc)

            sender = threading.Thread(target=send_all, name="voicecli-ws-send", daemon=True)
            sender.start()
            cancel.on_cancel(send_cancel)
            quiet_since = time.monotonic()
            try:
                while not turn.done:
                    if cancel.cancelled:
                        return
                    try:
                        data = conn.recv(timeout=_POLL)
                    except TimeoutError:
                        if failure:
                            raise failure[0] from None
                        if turn.in_flight == 0:
                            quiet_since = time.monotonic()
                        elif time.monotonic() - quiet_since > self.read_timeout:
                            raise VoiceCliError(
                                f"The speech server at {self.url} sent nothing for "
                                f"{self.read_timeout:g} s. It may be overloaded or stuck."
                            ) from None
                        continue
                    except ConnectionClosed as exc:
                        if cancel.cancelled:
                            return
                        if failure:
                            raise failure[0] from None
                        raise VoiceCliError(
                            f"The speech server at {self.url} closed the connection ({exc})."
                        ) from None
                    quiet_since = time.monotonic()
                    try:
                        message = p.decode_server_frame(data)
                    except p.ProtocolError as exc:
                        raise VoiceCliError(
                            explain_error({"code": exc.code, "message": exc.message}, self.url)
                        ) from None
                    chunk = turn.handle(message)
                    if chunk is not None and not cancel.cancelled:
                        yield chunk
            finally:
                if turn.in_flight and not cancel.cancelled:
                    send_cancel()  # the consumer stopped early or failed: free the server

    def close(self) -> None:
        """Nothing to release: connections live for one turn."""
