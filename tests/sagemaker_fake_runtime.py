"""A local stand-in for the SageMaker runtime's InvokeEndpointWithResponseStream.

It speaks AWS event-stream framing over chunked HTTP (without chunking botocore
would see the events only at the end), so boto3 runs its real parsing code. What it
answers is scripted; ``relay`` is the script of a real container. Run by hand, it
relays to one for ``voicecli bench`` (see docs/sagemaker.md)::

    python tests/sagemaker_fake_runtime.py --container http://127.0.0.1:8080 --port 8444
"""

from __future__ import annotations

import argparse
import json
import struct
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from voicecli import protocol as p

# What a script yields: ("part", bytes), ("exception", type, message), ("sleep", seconds).
Event = tuple[Any, ...]
Script = Callable[[str, dict[str, Any]], Iterable[Event]]


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude, CRCs, string headers, payload."""
    encoded = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack("!H", len(value))
        + value.encode()
        for name, value in headers.items()
    )
    prelude = struct.pack("!II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack("!I", zlib.crc32(message))


def payload_part(data: bytes) -> bytes:
    return event_message(
        {
            ":event-type": "PayloadPart",
            ":message-type": "event",
            ":content-type": "application/octet-stream",
        },
        data,
    )


def exception(kind: str, message: str) -> bytes:
    body = {"Message": message}
    if kind == "ModelStreamError":
        body["ErrorCode"] = "StreamBroken"
    return event_message(
        {
            ":exception-type": kind,
            ":message-type": "exception",
            ":content-type": "application/json",
        },
        json.dumps(body).encode(),
    )


class FakeRuntime:
    """Endpoints by name: ``missing`` does not exist, ``throttled`` always throttles,
    any other name runs ``script(endpoint, request_json)``."""

    def __init__(self, script: Script, port: int = 0) -> None:
        self.script = script
        self.requests: list[tuple[float, dict[str, Any]]] = []  # (arrival, body)
        runtime = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                runtime.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeRuntime:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        self.requests.append((time.monotonic(), body))
        endpoint = h.path.split("/")[2]
        if endpoint == "missing":
            return self._error(
                h, 400, "ValidationError", f"Endpoint {endpoint} of account 123456789012 not found."
            )
        if endpoint == "throttled":
            return self._error(h, 400, "ThrottlingException", "Rate exceeded")
        h.send_response(200)
        h.send_header("Content-Type", "application/vnd.amazon.eventstream")
        h.send_header("X-Amzn-SageMaker-Content-Type", "application/x-voicecli-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            for event in self.script(endpoint, body):
                if event[0] == "sleep":
                    time.sleep(event[1])
                    continue
                data = payload_part(event[1]) if event[0] == "part" else exception(*event[1:])
                h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client closed the stream: a cancel

    @staticmethod
    def _error(h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        data = json.dumps({"message": message}).encode()
        h.send_response(status)
        h.send_header("x-amzn-ErrorType", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def relay(container: str) -> Script:
    """The script of a real ``voicecli serve`` at ``container``: each request becomes a
    ``POST /invocations`` to it, whose body goes out as parts as it arrives."""

    def script(endpoint: str, body: dict[str, Any]) -> Iterable[Event]:
        request = urllib.request.Request(
            container + "/invocations",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": p.STREAM_MEDIA_TYPE},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            while data := response.read1(65536):
                yield ("part", data)

    return script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--container", default="http://127.0.0.1:8080")
    parser.add_argument("--port", type=int, default=8444)
    args = parser.parse_args()
    with FakeRuntime(relay(args.container), port=args.port) as runtime:
        print(
            f"SageMaker response-stream stand-in on {runtime.url}, relaying to "
            f"{args.container}\nexport AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "
            "AWS_REGION=us-east-1",
            flush=True,
        )
        threading.Event().wait()


if __name__ == "__main__":
    main()
