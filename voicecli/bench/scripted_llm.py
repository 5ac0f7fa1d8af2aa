"""A local OpenAI-compatible chat server that replays a scripted reply.

It speaks the chat-completions streaming protocol (SSE ``chat.completion.chunk``
events, then ``data: [DONE]``) on 127.0.0.1, at a set token rate with optional
pauses. ``voicecli bench`` uses it as a repeatable LLM, and the tests use it as
a real server for the real ``openai`` client. It records when each token left,
on the same monotonic clock as the turn timeline.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def tokenize(text: str) -> list[str]:
    """Split text into LLM-like tokens: words with their leading space, punctuation apart."""
    return re.findall(r"\s*[\w']+|\s*[^\w\s]|\s+", text)


@dataclass
class Script:
    """What the server answers to the next requests."""

    tokens: list[str]
    token_interval: float = 0.02  # seconds between tokens
    pauses: dict[int, float] = field(default_factory=dict)  # token index -> extra pause before it
    model: str = "scripted"

    @classmethod
    def from_text(cls, text: str, tokens_per_second: float = 50.0, **kw: Any) -> Script:
        return cls(tokenize(text), token_interval=1.0 / tokens_per_second, **kw)


@dataclass
class Served:
    """What one request got: its messages and when each token was sent."""

    messages: list[dict[str, Any]]
    sent_at: list[float] = field(default_factory=list)
    finished_at: float | None = None
    disconnected: bool = False


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (the openai client dropping a kept-alive
        # connection, or a stream closed on interrupt) is normal here; the
        # default handler would print a traceback into the caller's terminal.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ScriptedLLM:
    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
        self.script = script
        self.requests: list[Served] = []
        self._lock = threading.Lock()
        self._httpd = _Server((host, port), self._handler())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="scripted-llm", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def last(self) -> Served:
        return self.requests[-1]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": server.script.model,
                                    "object": "model",
                                    "owned_by": "scripted",
                                }
                            ],
                        },
                    )
                else:
                    self._json(404, {"error": {"message": "not found", "type": "invalid_request"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "bad json", "type": "invalid_request"}})
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "not found", "type": "invalid_request"}})
                    return
                served = Served(messages=body.get("messages", []))
                with server._lock:
                    server.requests.append(served)
                try:
                    server.respond(Reply(self), server.script, served, body)
                except (BrokenPipeError, ConnectionResetError):
                    served.disconnected = True

            def _json(self, status: int, payload: dict) -> None:
                Reply(self).json(status, payload)

        return Handler

    def respond(self, reply: Reply, script: Script, served: Served, body: dict) -> None:
        """Answer one chat request: the script, streamed. Tests override this to misbehave."""
        reply.start_stream()
        created = int(time.time())
        model = body.get("model", script.model)
        for i, token in enumerate(script.tokens):
            time.sleep(script.token_interval + script.pauses.get(i, 0.0))
            delta = {"content": token} if i else {"role": "assistant", "content": token}
            reply.event(_chunk(created, model, delta, None))
            served.sent_at.append(time.monotonic())
        reply.event(_chunk(created, model, {}, "stop"))
        reply.write(b"data: [DONE]\n\n")
        reply.end()
        served.finished_at = time.monotonic()


class Reply:
    """One response of the scripted server: a chunked server-sent-event stream or JSON."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self.handler = handler

    def start_stream(self) -> None:
        h = self.handler
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

    def event(self, payload: dict) -> None:
        self.write(f"data: {json.dumps(payload)}\n\n".encode())

    def write(self, data: bytes) -> None:
        """One HTTP chunk."""
        self.handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.handler.wfile.flush()

    def end(self) -> None:
        self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()

    def json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        h = self.handler
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def _chunk(created: int, model: str, delta: dict, finish: str | None) -> dict:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
