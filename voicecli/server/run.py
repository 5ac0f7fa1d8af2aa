"""Running the container app under uvicorn: ``voicecli serve`` and the Docker entry point.

SageMaker starts a custom container as ``docker run IMAGE serve``, so the image's
entry point is ``python -m voicecli.server.run``, which takes an optional ``serve``
word and listens on 0.0.0.0:8080 by default.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Callable, Sequence

import uvicorn

from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.server.app import Limits, SpeechModel, create_app

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


def make_server(
    synth_factory: Callable[[], SpeechModel], limits: Limits | None = None, log_level: str = "info"
) -> uvicorn.Server:
    limits = limits or Limits()
    config = uvicorn.Config(
        create_app(synth_factory, limits),
        log_level=log_level,
        # Oversized frames are refused by the WebSocket layer (close code 1009).
        ws_max_size=limits.max_message_bytes,
        # SageMaker's sidecar pings every 60 s itself; ours only detects dead peers.
        ws_ping_interval=30.0,
        ws_ping_timeout=60.0,
        # PCM hardly compresses; deflate would only spend the CPU the model needs.
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def serve(
    host: str,
    port: int,
    synth_factory: Callable[[], SpeechModel],
    limits: Limits | None = None,
    log_level: str = "info",
) -> None:
    """Serve until interrupted. The model loads in the background: /ping is 503 until then."""
    sock = bind(host, port)
    make_server(synth_factory, limits, log_level).run(sockets=[sock])


def kokoro_factory(settings: Settings) -> Callable[[], SpeechModel]:
    def load() -> SpeechModel:
        from voicecli.tts.kokoro_local import KokoroSynthesizer

        return KokoroSynthesizer(
            voice=settings.voice,
            speed=settings.speed,
            lang=settings.lang,
            model_dir=settings.model_dir,
        )

    return load


def run_server(settings: Settings, host: str, port: int) -> None:
    """``voicecli serve``: local Kokoro from ``settings`` behind the container app."""
    serve(host, port, kokoro_factory(settings), log_level="debug" if settings.verbose else "info")


def main(argv: Sequence[str] | None = None) -> int:
    """The container entry point (``python -m voicecli.server.run [serve]``)."""
    from voicecli import config

    parser = argparse.ArgumentParser(prog="python -m voicecli.server.run")
    parser.add_argument("command", nargs="?", default="serve", choices=["serve"])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=SAGEMAKER_PORT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        run_server(config.resolve(), args.host, args.port)
    except VoiceCliError as exc:
        logging.error("%s", exc)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
