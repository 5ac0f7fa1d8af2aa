"""llm_timeout holds end to end, against real local servers that misbehave: one that
never sends headers, one that sends headers and then nothing, one that drips a byte at a
time, and one that drips whole pieces of a reply more slowly than the timeout."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.llm.openai_chat import OpenAIChat
from voicecli.timeline import Timeline

TIMEOUT = 2.0
HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
PIECE = (
    b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"Hi. "},"finish_reason":null}]}\n\n'
)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class MisbehavingServer:
    """Reads each request, then does ``behave(connection)`` in a thread of its own."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.behave = behave
        self.stop = threading.Event()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            self.behave(conn)
        except OSError:
            pass

    def __enter__(self) -> MisbehavingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()


def never_answers(server: MisbehavingServer) -> Callable[[socket.socket], None]:
    return lambda conn: server.stop.wait(60)


def headers_then_nothing(server: MisbehavingServer) -> Callable[[socket.socket], None]:
    def behave(conn: socket.socket) -> None:
        conn.sendall(HEADERS)
        server.stop.wait(60)

    return behave


def drips_bytes(server: MisbehavingServer) -> Callable[[socket.socket], None]:
    """A byte every 0.95 of the timeout: every read is answered in time, no piece ever is."""

    def behave(conn: socket.socket) -> None:
        conn.sendall(HEADERS)
        body = chunk(PIECE * 50)
        for byte in body:
            if server.stop.wait(0.95 * TIMEOUT):
                return
            conn.sendall(bytes([byte]))

    return behave


def drips_pieces(server: MisbehavingServer) -> Callable[[socket.socket], None]:
    """Whole pieces, at first in time, then one that comes too late."""

    def behave(conn: socket.socket) -> None:
        conn.sendall(HEADERS + chunk(PIECE))
        server.stop.wait(0.5 * TIMEOUT)
        conn.sendall(chunk(PIECE))
        server.stop.wait(3 * TIMEOUT)

    return behave


def ask(base_url: str) -> tuple[list[str], VoiceCliError | None, float]:
    client = OpenAIChat(base_url=base_url, api_key="x", model="m", timeout=TIMEOUT)
    pieces: list[str] = []
    started = time.monotonic()
    try:
        for piece in client.stream([{"role": "user", "content": "Hi"}], CancelToken(), Timeline()):
            pieces.append(piece)
    except VoiceCliError as exc:
        return pieces, exc, time.monotonic() - started
    return pieces, None, time.monotonic() - started


@pytest.mark.parametrize(
    "behaviour, words",
    [
        (never_answers, f"did not answer within {TIMEOUT:g} s"),
        (headers_then_nothing, f"stopped sending its reply for {TIMEOUT:g} s"),
        (drips_bytes, f"stopped sending its reply for {TIMEOUT:g} s"),
    ],
)
def test_the_timeout_holds_end_to_end(behaviour, words):
    with MisbehavingServer(lambda conn: None) as server:
        server.behave = behaviour(server)
        pieces, error, seconds = ask(server.base_url)
    assert error is not None and words in str(error), error
    assert pieces == []
    # The promise: within a second of the timeout, retries included.
    assert seconds < TIMEOUT + 1.0, seconds


def test_the_timeout_is_per_piece_and_what_came_is_kept():
    with MisbehavingServer(lambda conn: None) as server:
        server.behave = drips_pieces(server)
        pieces, error, seconds = ask(server.base_url)
    assert pieces == ["Hi. ", "Hi. "]
    assert error is not None and "stopped sending its reply" in str(error)
    assert TIMEOUT < seconds < 0.5 * TIMEOUT + TIMEOUT + 1.0, seconds
