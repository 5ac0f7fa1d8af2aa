"""Synthesis by a remote `voicecli serve` (or anything speaking voicecli's protocol) over
a WebSocket, one connection per turn, full duplex (``remote_turn.run_turn``)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from voicecli import protocol as p
from voicecli.errors import VoiceCliError
from voicecli.tts.remote_turn import ConnectionLost, RemoteSynthesizer, Transport, TransportClosed

log = logging.getLogger(__name__)


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
    """A Synthesizer backed by a `voicecli serve` WebSocket, one connection per turn: on
    TCP (``ws://HOST:PORT``), or on the resident engine's Unix socket (``unix_socket``)."""

    def __init__(
        self,
        endpoint_url: str,
        *,
        voice: str | None = None,
        speed: float | None = None,
        open_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_in_flight: int = p.MAX_IN_FLIGHT,
        unix_socket: str | None = None,
        where: str | None = None,
        key: str | None = None,
        ping_interval: float = 20.0,
    ) -> None:
        """``key``: the server's, sent with the handshake (a server beyond loopback
        requires one). ``ping_interval``: a server that leaves a ping unanswered as long
        is gone (one that is stopped, or whose loop is stuck)."""
        super().__init__(voice, speed)
        self.url = websocket_url(endpoint_url)
        self.unix_socket = unix_socket  # the resident engine's; the URL then names no host
        self.where = where or self.url  # for messages
        self.open_timeout = open_timeout
        self.read_timeout = read_timeout  # silence allowed while sentences are unanswered
        self.max_in_flight = max_in_flight
        self._key = key
        self._ping_interval = ping_interval

    def _connect(self) -> Any:
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
        from websockets.sync.client import connect, unix_connect

        options: dict[str, Any] = {
            "open_timeout": self.open_timeout,
            "max_size": 4 << 20,
            "compression": None,
            "ping_interval": self._ping_interval,
            "ping_timeout": self._ping_interval,
        }
        if self._key is not None:
            options["additional_headers"] = {"Authorization": f"Bearer {self._key}"}
        try:
            if self.unix_socket is not None:
                return unix_connect(self.unix_socket, self.url, **options)
            return connect(self.url, proxy=None, **options)
        except InvalidStatus as exc:
            if exc.response.status_code == 403:
                raise VoiceCliError(
                    f"The speech server at {self.url} refused this client (HTTP 403): it "
                    "needs its key. Set server_key (or VOICECLI_SERVER_KEY) to it."
                ) from None
            raise ConnectionLost(f"Cannot open the speech stream at {self.url}: {exc}.") from None
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            if self.unix_socket is not None:
                raise ConnectionLost(f"Cannot reach {self.where}: {exc}.") from None
            raise ConnectionLost(
                f"Cannot open the speech stream at {self.url}: {exc}. Is `voicecli serve` "
                "running there? Check --endpoint-url."
            ) from None

    def open_turn(self) -> tuple[Transport, int]:
        return _WebSocketTransport(self._connect(), self.where), self.max_in_flight

    def describe(self) -> dict[str, Any]:
        return {"kind": "websocket", "endpoint_url": self.url, "voice": self.voice}

    def close(self) -> None:
        """Nothing to release: connections live for one turn."""


class _WebSocketTransport:
    """One turn's WebSocket connection (``websockets``' threading client)."""

    def __init__(self, conn: Any, where: str) -> None:
        self.conn = conn.__enter__()  # left in ``end``: the connection lives for one turn
        self.where = where

    def send(self, message: dict[str, Any]) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            self.conn.send(p.encode_json(message))
        except ConnectionClosed:
            raise TransportClosed from None

    def receive(self, timeout: float) -> str | bytes | None:
        from websockets.exceptions import ConnectionClosed

        try:
            return self.conn.recv(timeout=timeout)
        except TimeoutError:
            return None
        except ConnectionClosed as exc:
            raise ConnectionLost(
                f"The speech server at {self.where} closed the connection ({exc})."
            ) from None

    def cancel(self) -> None:
        try:
            self.send(p.control(p.CANCEL))
        except Exception:  # noqa: BLE001 - the connection is being torn down anyway
            pass

    def end(self) -> None:
        self.conn.__exit__(None, None, None)
