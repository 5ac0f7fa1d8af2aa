"""Running the container app under uvicorn: ``voicecli serve`` and the Docker entry point.

SageMaker starts a custom container as ``docker run IMAGE serve``, so the image's
entry point is ``python -m voicecli.server.run``, which takes an optional ``serve``
word and listens on 0.0.0.0:8080 by default.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import socket
from collections.abc import Callable, Sequence
from typing import Any

import h11
import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol

from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.server.app import create_app
from voicecli.server.guard import Guard, bearer, is_loopback
from voicecli.server.openai_api import AudioAPI
from voicecli.server.requests import Limits
from voicecli.tts.steps import SpeechModel

SAGEMAKER_PORT = 8080


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one), so that a busy port is a clear error."""
    try:
        return socket.create_server((host, port), reuse_port=False)
    except OSError as exc:
        raise VoiceCliError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}. "
            "Pick another --port or stop the process using it."
        ) from None


class HeadTimeoutH11(H11Protocol):
    """uvicorn's HTTP/1.1, with a deadline for each request's head. uvicorn closes idle
    keep-alive connections, but a client that trickles its headers a byte at a time
    would hold a connection (and a file descriptor) forever. Every connection, the
    WebSockets it is upgraded to included, also gets a fixed send buffer."""

    head_timeout = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        limit_send_buffer(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on a kept-alive connection gets a deadline too

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head has arrived
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout, self._expire)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


# Bytes the kernel may hold for a client that has not read them: about 1.4 s of audio.
# Linux grows a socket's send buffer to megabytes (a minute of audio) for a client that
# stops reading, and the scheduler would go on synthesizing for it; a fixed buffer makes
# it back up into the outbox at once, where the scheduler sees it (``Outbox.has_room``).
SEND_BUFFER_BYTES = 64 * 1024


def limit_send_buffer(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


class _ClientMistakes(logging.Filter):
    """A client's malformed frame is the client's mistake, answered already (a close with
    1007): one line in the log, not uvicorn's traceback of it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Invalid UTF-8 sequence received from client"):
            record.exc_info = record.exc_text = None
        return True


def uvicorn_config(app: Any, log_level: str, **options: Any) -> uvicorn.Config:
    """uvicorn's config for every TCP server of voicecli: a deadline for each request's
    head, a fixed send buffer, PCM unencumbered by deflate, and clients' mistakes logged
    in one line."""
    logging.getLogger("uvicorn.error").addFilter(_CLIENT_MISTAKES)
    return uvicorn.Config(
        app,
        log_level=log_level,
        http=HeadTimeoutH11,
        # PCM hardly compresses; deflate would only spend the CPU the model needs.
        ws_per_message_deflate=False,
        **options,
    )


_CLIENT_MISTAKES = _ClientMistakes()


def make_server(
    synth_factory: Callable[[], SpeechModel],
    limits: Limits | None = None,
    log_level: str = "info",
    *,
    host: str = "127.0.0.1",
    key: str | None = None,
    app: Starlette | None = None,
    audio_api: AudioAPI | None = None,
) -> uvicorn.Server:
    """uvicorn serving ``create_app(synth_factory, limits)`` (with OpenAI's audio routes
    if ``audio_api``), guarded for a server bound to ``host`` (``key``: required of
    every client), or ``app`` (the resident engine's, built on the same)."""
    limits = limits or Limits()
    guard = Guard(host, authorized=bearer(key) if key else None)
    config = uvicorn_config(
        app or create_app(synth_factory, limits, guard=guard, audio_api=audio_api),
        log_level,
        # Oversized frames are refused by the WebSocket layer (close code 1009).
        ws_max_size=limits.max_message_bytes,
        # SageMaker's sidecar pings every 60 s itself; ours only detects dead peers.
        ws_ping_interval=30.0,
        ws_ping_timeout=60.0,
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def serve(
    host: str,
    port: int,
    synth_factory: Callable[[], SpeechModel],
    limits: Limits | None = None,
    log_level: str = "info",
    key: str | None = None,
    audio_api: AudioAPI | None = None,
) -> None:
    """Serve until interrupted. The model loads in the background: /ping is 503 until then."""
    sock = bind(host, port)
    server = make_server(synth_factory, limits, log_level, host=host, key=key, audio_api=audio_api)
    server.run(sockets=[sock])


def kokoro_factory(settings: Settings) -> Callable[[], SpeechModel]:
    """Local Kokoro from ``settings`` (the scheduler warms it up once idle)."""

    def load() -> SpeechModel:
        from voicecli.speech import local_synthesizer

        return local_synthesizer(settings)

    return load


def run_server(
    settings: Settings, host: str, port: int, *, notify: Callable[[str], None] | None = None
) -> None:
    """``voicecli serve``: local Kokoro from ``settings`` behind the container app. Beyond
    loopback every client needs the key (``server_key``, else one made up and said)."""
    key = settings.server_key
    if key is None and not is_loopback(host):
        key = secrets.token_urlsafe(18)
        if notify is not None:
            notify(
                f"Listening on {host}, beyond this machine: every request needs the key "
                f"(Authorization: Bearer {key}; set server_key to choose it)."
            )
    level = "debug" if settings.verbose else "info"
    serve(
        host, port, kokoro_factory(settings), Limits(listeners=settings.listeners),
        log_level=level, key=key, audio_api=AudioAPI.of(settings),
    )  # fmt: skip


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    """The container entry point (``python -m voicecli.server.run [serve]``)."""
    from voicecli import config

    parser = argparse.ArgumentParser(prog="python -m voicecli.server.run")
    parser.add_argument("command", nargs="?", default="serve", choices=["serve"])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=_port, default=SAGEMAKER_PORT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        # SageMaker's runtime sends no key, and is all that reaches the container: its
        # guard still refuses other sites' pages, and its Host is SageMaker's.
        settings = config.resolve()
        serve(
            args.host, args.port, kokoro_factory(settings), key=settings.server_key,
            audio_api=AudioAPI.of(settings),
        )  # fmt: skip
    except VoiceCliError as exc:
        logging.error("%s", exc)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
