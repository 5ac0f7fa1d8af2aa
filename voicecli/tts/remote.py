"""Synthesis by a remote `voicecli serve` (or anything speaking voicecli's protocol).

The client is full duplex: a sender thread sends ``speak`` for each sentence as soon
as the sentence iterator yields it, while the caller's thread receives audio. The
next sentence is never held back until the previous one's audio has arrived.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from voicecli import protocol as p
from voicecli.cancel import POLL, CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioChunk, Sentence
from voicecli.timeline import Timeline
from voicecli.tts.remote_turn import RemoteSynthesizer, TurnState, explain_error

log = logging.getLogger(__name__)


class ConnectionLost(VoiceCliError):
    """The speech server could not be reached, or its connection broke mid-turn (as
    opposed to an error it replied with): a caller with another way to speak may use it."""


def websocket_url(endpoint_url: str) -> str:
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        raise VoiceCliError(
            f"Endpoint URL {endpoint_url!r} is not a WebSocket URL: use "
            "ws://HOST:PORT (for example ws://127.0.0.1:8080)."
        )
    path = parts.path if parts.path not in ("", "/") else p.WS_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class WebSocketSynthesizer(RemoteSynthesizer):
    """A Synthesizer backed by a `voicecli serve` WebSocket; one connection per turn."""

    def __init__(
        self,
        endpoint_url: str,
        voice: str | None = None,
        speed: float | None = None,
        *,
        open_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_in_flight: int = p.MAX_IN_FLIGHT,
        unix_socket: str | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(voice, speed)
        self.url = websocket_url(endpoint_url)
        self.unix_socket = unix_socket  # the resident engine's; the URL then names no host
        self.where = where or self.url  # for messages
        self.open_timeout = open_timeout
        self.read_timeout = read_timeout  # silence allowed while sentences are unanswered
        self.max_in_flight = max_in_flight

    def _connect(self) -> Any:
        from websockets.exceptions import InvalidHandshake, InvalidURI
        from websockets.sync.client import connect, unix_connect

        options: dict[str, Any] = {
            "open_timeout": self.open_timeout,
            "max_size": 4 << 20,
            "compression": None,
        }
        try:
            if self.unix_socket is not None:
                return unix_connect(self.unix_socket, self.url, **options)
            return connect(self.url, proxy=None, **options)
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            if self.unix_socket is not None:
                raise ConnectionLost(f"Cannot reach {self.where}: {exc}.") from None
            raise ConnectionLost(
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
            turn = TurnState(timeline, self.where, self.max_in_flight)
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
                        data = conn.recv(timeout=POLL)
                    except TimeoutError:
                        if failure:
                            raise failure[0] from None
                        if turn.in_flight == 0:
                            quiet_since = time.monotonic()
                        elif time.monotonic() - quiet_since > self.read_timeout:
                            raise VoiceCliError(
                                f"The speech server at {self.where} sent nothing for "
                                f"{self.read_timeout:g} s. It may be overloaded or stuck."
                            ) from None
                        continue
                    except ConnectionClosed as exc:
                        if cancel.cancelled:
                            return
                        if failure:
                            raise failure[0] from None
                        raise ConnectionLost(
                            f"The speech server at {self.where} closed the connection ({exc})."
                        ) from None
                    quiet_since = time.monotonic()
                    try:
                        message = p.decode_server_frame(data)
                    except p.ProtocolError as exc:
                        raise VoiceCliError(
                            explain_error({"code": exc.code, "message": exc.message}, self.where)
                        ) from None
                    chunk = turn.handle(message)
                    if chunk is not None and not cancel.cancelled:
                        yield chunk
            finally:
                if turn.in_flight and not cancel.cancelled:
                    send_cancel()  # the consumer stopped early or failed: free the server

    def describe(self) -> dict[str, Any]:
        return {"kind": "websocket", "endpoint_url": self.url, "voice": self.voice}

    def close(self) -> None:
        """Nothing to release: connections live for one turn."""
