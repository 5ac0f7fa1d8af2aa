"""A real `voicecli serve` app under uvicorn in a thread, on a free port of 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from voicecli import protocol as p
from voicecli.config import Settings
from voicecli.server.requests import Limits
from voicecli.server.run import bind, kokoro_factory, make_server
from voicecli.tts.steps import SpeechModel


class StandInModel:
    """The part of a stand-in SpeechModel every server test shares: each text is one
    phoneme chunk, and the model is every connection's speaker, with no playhead (all
    listeners alike, so they take plain turns) and parts of its own fixed size.
    Subclasses say how they speak (``speak_steps``)."""

    sample_rate = p.SAMPLE_RATE

    def phonemes(self, text: str) -> list[str]:
        return [text]

    def speaker(self) -> StandInModel:
        return self

    def voices(self) -> list[str]:
        return ["af_heart", "am_adam"]

    def ahead(self) -> float:
        return 0.0

    def limit_parts(self, seconds: float | None) -> None:
        pass

    def warm_up_steps(self) -> Iterator[None]:
        return iter(())


class RunningServer:
    def __init__(
        self,
        synth_factory: Callable[[], SpeechModel],
        limits: Limits | None = None,
        **options: Any,
    ) -> None:
        """``options``: make_server's (host, key, audio_api)."""
        # As many listeners as a test connects: only admission's own tests limit them.
        self.limits = limits or Limits(listeners=64)
        self.server = make_server(synth_factory, self.limits, log_level="warning", **options)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self.sock]},
            name="uvicorn-test",
            daemon=True,
        )

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> RunningServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.server.config.app.state.scheduler.ready.wait(0.05):
            if time.monotonic() > deadline:
                raise RuntimeError("model did not load")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextmanager
def kokoro_server(
    model_dir: Path, voice: str, lang: str, **options: Any
) -> Iterator[RunningServer]:
    """A real server of a Kokoro model directory (the tiny one, in tests), loaded."""
    settings = Settings(voice=voice, lang=lang, model_dir=model_dir)
    running = RunningServer(kokoro_factory(settings), **options).start()
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


WS = "/invocations-bidirectional-stream"
RECV_TIMEOUT = 120  # generous: two busy cores; no test depends on it for timing


def ping_status(server: RunningServer) -> int:
    try:
        with urllib.request.urlopen(server.http_url + "/ping", timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def ping(server: RunningServer) -> dict[str, object]:
    """GET /ping's answer, once it is 200."""
    with urllib.request.urlopen(server.http_url + "/ping", timeout=10) as response:
        return json.load(response)


def ws_connect(server: RunningServer, source: str | None = None) -> ClientConnection:
    """A WebSocket to the server, from the address ``source`` (another loopback
    address, or this machine's own on the network) if given."""
    sock = None
    if source is not None:
        import socket

        host = "127.0.0.1" if source.startswith("127.") else source
        sock = socket.create_connection((host, server.port), source_address=(source, 0))
    return connect(server.ws_url + WS, open_timeout=10, max_size=None, proxy=None, sock=sock)


def speak(request_id: str, text: str, **extra: object) -> str:
    return json.dumps({"v": 1, "type": "speak", "request_id": request_id, "text": text, **extra})


def recv(ws: ClientConnection) -> dict | p.AudioFrame:
    return p.decode_server_frame(ws.recv(timeout=RECV_TIMEOUT))


def recv_control(ws: ClientConnection) -> dict:
    """The next control message, skipping audio."""
    while isinstance(message := recv(ws), p.AudioFrame):
        pass
    return message


def collect(ws: ClientConnection, request_id: str) -> tuple[list[p.AudioFrame], dict]:
    """Audio frames of one request up to its terminal message (sentence_done or error)."""
    frames: list[p.AudioFrame] = []
    while True:
        message = recv(ws)
        if isinstance(message, p.AudioFrame):
            assert message.request_id == request_id
            frames.append(message)
        elif message.get("request_id") == request_id:
            return frames, message
