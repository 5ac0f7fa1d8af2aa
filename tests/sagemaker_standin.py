"""A local stand-in for Amazon SageMaker's runtime InvokeEndpointWithBidirectionalStream.

It lets the real AWS client (``aws-sdk-sagemaker-runtime-http2``, Python 3.12+) talk to
a real ``voicecli serve`` on this machine, as SageMaker would:

* HTTP/2 over TLS with ALPN ``h2`` (the client's CRT transport speaks nothing else),
  with a certificate from a test CA made at start-up: point ``SSL_CERT_FILE`` at
  ``ca_file`` before the client makes its TLS context.
* ``POST /endpoints/{name}/invocations-bidirectional-stream`` with a body of signed
  event-stream envelopes, each carrying one ``PayloadPart``. Each part is relayed to
  the container's WebSocket ``/invocations-bidirectional-stream``: ``UTF8`` parts as
  text frames, ``BINARY`` (the documented default) as binary frames. The container's
  frames come back as ``PayloadPart`` events of the same data type.
* WebSocket pings to the container every ``ping_interval`` seconds (SageMaker: 60 s);
  ``ping_misses`` unanswered pings in a row (SageMaker: 5) close the connection.
* A container that cannot be reached is a 424 ``ModelError`` before the stream starts.
* The response ends only after the client's END_STREAM.

What AWS does not document is marked GUESS where it is decided, and the tests do not
assert on it beyond "the client reports a clear error".

Run it by hand for ``voicecli bench`` (see docs/sagemaker.md)::

    python tests/sagemaker_standin.py --container http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trustme
import websockets
from smithy_aws_event_stream.events import Event, EventMessage

WS_PATH = "/invocations-bidirectional-stream"
NAME = r"[A-Za-z0-9](?:-*[A-Za-z0-9]){0,62}"  # SageMaker's endpoint-name pattern
ROUTE = re.compile(rf"/endpoints/({NAME}){WS_PATH}")
EVENTSTREAM = "application/vnd.amazon.eventstream"
ACCOUNT = "123456789012"


@dataclass
class Record:
    """What the stand-in saw, for tests: parts in, frames relayed, pings, closes."""

    parts: list[tuple[str, str, int]] = field(default_factory=list)  # (type, state, bytes)
    # (monotonic time, "text" | "binary", bytes)
    to_container: list[tuple[float, str, int]] = field(default_factory=list)
    from_container: list[tuple[float, str, int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # the text frames relayed to the container
    pings: int = 0
    requests: list[dict[str, str]] = field(default_factory=list)  # request headers
    ended: list[str] = field(default_factory=list)  # how each stream ended


class _Connection:
    """One client's HTTP/2 connection: a few streams, sharing flow control."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.window = asyncio.Event()

    async def flush(self) -> None:
        if data := self.h2.data_to_send():
            self.writer.write(data)
            await self.writer.drain()

    async def send_headers(
        self, stream_id: int, headers: list[tuple[str, str]], end: bool = False
    ) -> None:
        self.h2.send_headers(stream_id, headers, end_stream=end)
        await self.flush()

    async def send_data(self, stream_id: int, data: bytes, end: bool = False) -> None:
        view = memoryview(data)
        while True:
            window = self.h2.local_flow_control_window(stream_id)
            room = min(window, self.h2.max_outbound_frame_size)
            if room <= 0 and view:
                self.window.clear()
                await self.window.wait()
                continue
            chunk, view = view[:room], view[room:]
            self.h2.send_data(stream_id, bytes(chunk), end_stream=end and not view)
            await self.flush()
            if not view:
                return


class _Stream:
    """One InvokeEndpointWithBidirectionalStream call, relayed to one WebSocket."""

    def __init__(
        self, runtime: StandIn, conn: _Connection, stream_id: int, headers: dict[str, str]
    ) -> None:
        self.runtime = runtime
        self.conn = conn
        self.id = stream_id
        self.headers = headers
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()  # body bytes; None: ended
        self.client_ended = asyncio.Event()
        self.buffer = bytearray()
        self.reset = False
        self.failed = False

    def feed(self, data: bytes) -> None:
        self.inbox.put_nowait(data)

    def end(self) -> None:
        self.inbox.put_nowait(None)

    async def run(self) -> None:
        record = self.runtime.record
        record.requests.append(self.headers)
        path = self.headers.get(":path", "").split("?")[0]
        route = ROUTE.fullmatch(path)
        if self.headers.get(":method") != "POST" or route is None:
            return await self.refuse(404, "UnknownOperationException", f"No route for {path}.")
        if not self.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return await self.refuse(403, "MissingAuthenticationTokenException", "Not signed.")
        if f"Credential={self.runtime.access_key}/" not in self.headers["authorization"]:
            return await self.refuse(
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        name = route.group(1)
        if self.runtime.endpoints is not None and name not in self.runtime.endpoints:
            # GUESS: the bidirectional API's code for an unknown endpoint is not documented;
            # InvokeEndpoint answers a ValidationError worded like this.
            return await self.refuse(
                400,
                "ValidationError",
                f"Endpoint {name} of account {ACCOUNT} not found.",
            )
        if self.runtime.throttle:
            return await self.refuse(400, "ThrottlingException", "Rate exceeded")
        try:
            ws = await websockets.connect(
                self.runtime.container_ws,
                ping_interval=None,  # the pings are ours, below, as SageMaker's are
                max_size=None,
                open_timeout=10,
                close_timeout=2,
            )
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            return await self.refuse(
                424,
                "ModelError",
                f"Received server error (0) from primary with message "
                f'"the container is unreachable: {exc}".',
                OriginalStatusCode=0,
            )
        await self.conn.send_headers(
            self.id,
            [
                (":status", "200"),
                ("content-type", EVENTSTREAM),
                ("x-amzn-invoked-production-variant", "AllTraffic"),
            ],
        )
        tasks = [
            asyncio.create_task(self.uplink(ws)),
            asyncio.create_task(self.downlink(ws)),
            asyncio.create_task(self.pings(ws)),
        ]
        try:
            await self.client_ended.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # GUESS: once the client has ended its side, the container's WebSocket closes.
            await ws.close()
            if not self.reset:
                await self.finish()

    async def refuse(self, status: int, error_type: str, message: str, **extra: Any) -> None:
        body = json.dumps({"Message": message, **extra}).encode()
        await self.conn.send_headers(
            self.id,
            [
                (":status", str(status)),
                ("content-type", "application/json"),
                ("x-amzn-errortype", error_type),
                ("content-length", str(len(body))),
            ],
        )
        await self.conn.send_data(self.id, body, end=True)
        self.runtime.record.ended.append(error_type)

    async def finish(self) -> None:
        try:
            await self.conn.send_data(self.id, b"", end=True)
            self.runtime.record.ended.append("completed")
        except h2.exceptions.ProtocolError:  # the client has gone: nothing to end
            pass

    async def send_event(self, headers: dict[str, Any], payload: bytes) -> None:
        message = EventMessage(headers=headers, payload=payload).encode()
        try:
            await self.conn.send_data(self.id, message)
        except h2.exceptions.ProtocolError:  # the client reset the stream or hung up
            self.client_ended.set()

    async def send_exception(self, kind: str, message: str, error_code: str | None) -> None:
        if self.failed:  # one failure per stream: what broke first
            return
        self.failed = True
        body = {"Message": message} | ({"ErrorCode": error_code} if error_code else {})
        await self.send_event(
            {
                ":message-type": "exception",
                ":exception-type": kind,
                ":content-type": "application/json",
            },
            json.dumps(body).encode(),
        )
        self.runtime.record.ended.append(kind)

    async def uplink(self, ws: Any) -> None:
        """Client parts → WebSocket frames."""
        partial = bytearray()
        while (data := await self.inbox.get()) is not None:
            self.buffer += data
            for envelope in self.envelopes():
                if not envelope.payload:  # the client's signed end-of-input envelope
                    continue
                inner = Event.decode(io.BytesIO(envelope.payload))
                assert inner is not None
                headers = inner.message.headers
                if headers.get(":event-type") != "PayloadPart":
                    continue
                data_type = str(headers.get("DataType", "BINARY"))
                state = str(headers.get("CompletionState", "COMPLETE"))
                self.runtime.record.parts.append((data_type, state, len(inner.message.payload)))
                partial += inner.message.payload
                if state == "PARTIAL":
                    # GUESS: SageMaker does not say how PARTIAL parts map onto frames;
                    # here they are joined into one frame at the COMPLETE part.
                    continue
                frame, partial = bytes(partial), bytearray()
                if data_type == "UTF8":
                    self.runtime.record.to_container.append((time.monotonic(), "text", len(frame)))
                    self.runtime.record.texts.append(frame.decode("utf-8"))
                    await ws.send(frame.decode("utf-8"))
                else:
                    self.runtime.record.to_container.append(
                        (time.monotonic(), "binary", len(frame))
                    )
                    await ws.send(frame)
        self.client_ended.set()

    def envelopes(self) -> list[EventMessage]:
        """The signed envelopes complete in the buffer, which keeps the rest."""
        out = []
        while len(self.buffer) >= 4:
            total = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < total:
                break
            event = Event.decode(io.BytesIO(bytes(self.buffer[:total])))
            del self.buffer[:total]
            assert event is not None
            headers = event.message.headers
            assert ":chunk-signature" in headers and ":date" in headers, headers
            out.append(event.message)
        return out

    async def downlink(self, ws: Any) -> None:
        """WebSocket frames → PayloadPart events, then how the container ended."""
        try:
            async for frame in ws:
                text = isinstance(frame, str)
                payload = frame.encode("utf-8") if text else frame
                self.runtime.record.from_container.append(
                    (time.monotonic(), "text" if text else "binary", len(payload))
                )
                chunk = self.runtime.response_part_bytes or len(payload) or 1
                pieces = [payload[i : i + chunk] for i in range(0, len(payload), chunk)] or [b""]
                for n, piece in enumerate(pieces):
                    await self.send_event(
                        {
                            ":message-type": "event",
                            ":event-type": "PayloadPart",
                            ":content-type": "application/octet-stream",
                            "DataType": "UTF8" if text else "BINARY",
                            "CompletionState": "COMPLETE" if n == len(pieces) - 1 else "PARTIAL",
                        },
                        piece,
                    )
        except websockets.ConnectionClosed:
            pass
        if self.client_ended.is_set():
            return
        code = ws.close_code
        if code != 1000:
            # GUESS: how SageMaker reports a container that drops the connection is not
            # documented; a ModelStreamError is the documented event for a broken model stream.
            await self.send_exception(
                "ModelStreamError",
                f"The model container closed the connection (code {code}).",
                "ModelStreamError",
            )

    async def pings(self, ws: Any) -> None:
        misses = 0
        while True:
            await asyncio.sleep(self.runtime.ping_interval)
            self.runtime.record.pings += 1
            try:
                pong = await ws.ping()
                await asyncio.wait_for(pong, self.runtime.ping_interval)
                misses = 0
            except TimeoutError:
                misses += 1
                if misses >= self.runtime.ping_misses:
                    ws.transport.abort()
                    # GUESS: the event the client sees after the pings time out.
                    await self.send_exception(
                        "ModelStreamError",
                        f"The model container did not answer {misses} pings.",
                        "PingTimeout",
                    )
                    return
            except websockets.ConnectionClosed:
                return


class StandIn:
    """The runtime: give it the container's URL (http://HOST:PORT), then ``start()``."""

    def __init__(
        self,
        container: str,
        *,
        ping_interval: float = 60.0,
        ping_misses: int = 5,
        endpoints: set[str] | None = None,
        access_key: str = "AKIDVOICECLITEST",
        ca: trustme.CA | None = None,
        directory: Path | None = None,
    ) -> None:
        """``ca``: share one test CA between stand-ins, since a client process reads
        ``SSL_CERT_FILE`` once."""
        self.container_ws = re.sub(r"^http", "ws", container.rstrip("/")) + WS_PATH
        self.ping_interval = ping_interval
        self.ping_misses = ping_misses
        self.endpoints = endpoints  # None: every name exists
        self.access_key = access_key
        self.throttle = False
        self.response_part_bytes = 0  # > 0: cut each container frame into PARTIAL parts
        self.record = Record()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="voicecli-standin-"))
        self.ca_file = self.directory / "ca.pem"
        self.port = 0
        self._ca = ca or trustme.CA()
        self._ca.cert_pem.write_to_path(str(self.ca_file))
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert("127.0.0.1", "localhost").configure_cert(self._tls)
        self._tls.set_alpn_protocols(["h2"])
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        this = asyncio.current_task()
        assert this is not None
        self._connections.add(this)
        conn = _Connection(writer)
        streams: dict[int, _Stream] = {}
        tasks: set[asyncio.Task[None]] = set()
        conn.h2.initiate_connection()
        try:
            await conn.flush()
            while data := await reader.read(65536):
                for event in conn.h2.receive_data(data):
                    self._dispatch(event, conn, streams, tasks)
                await conn.flush()
        except (ConnectionError, h2.exceptions.ProtocolError, ssl.SSLError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            writer.close()
            self._connections.discard(this)

    def _dispatch(
        self,
        event: h2.events.Event,
        conn: _Connection,
        streams: dict[int, _Stream],
        tasks: set[asyncio.Task[None]],
    ) -> None:
        if isinstance(event, h2.events.RequestReceived):
            stream = _Stream(self, conn, event.stream_id, dict(event.headers))
            streams[event.stream_id] = stream
            task = asyncio.create_task(stream.run())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif isinstance(event, h2.events.DataReceived):
            conn.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if stream := streams.get(event.stream_id):
                stream.feed(event.data)
        elif isinstance(event, h2.events.StreamEnded):
            if stream := streams.get(event.stream_id):
                stream.end()
        elif isinstance(event, h2.events.StreamReset):
            if stream := streams.pop(event.stream_id, None):
                stream.reset = True
                stream.end()
                self.record.ended.append("reset")
        elif isinstance(event, h2.events.WindowUpdated):
            conn.window.set()


class StandInThread:
    """A StandIn on its own event loop in a thread, for synchronous tests."""

    def __init__(self, container: str, **options: Any) -> None:
        self.runtime = StandIn(container, **options)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        self.call(self.runtime.start)
        return self.runtime

    def __exit__(self, *exc: object) -> None:
        self.call(self.runtime.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    def call(self, coroutine: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine(), self.loop).result(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--container", default="http://127.0.0.1:8080")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--ping-interval", type=float, default=60.0)
    parser.add_argument("--access-key", default="AKIDVOICECLITEST")
    args = parser.parse_args()

    async def run() -> None:
        runtime = StandIn(
            args.container, ping_interval=args.ping_interval, access_key=args.access_key
        )
        await runtime.start(port=args.port)
        print(
            f"SageMaker stand-in on {runtime.url}, relaying to {runtime.container_ws}\n"
            f"export SSL_CERT_FILE={runtime.ca_file} AWS_ACCESS_KEY_ID={args.access_key} "
            "AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1",
            flush=True,
        )
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
