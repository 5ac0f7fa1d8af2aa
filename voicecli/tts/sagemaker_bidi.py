"""InvokeEndpointWithBidirectionalStream: one duplex stream per turn to a SageMaker endpoint.

The only code that touches ``aws-sdk-sagemaker-runtime-http2`` (Python 3.12+). The SDK
is asyncio-only, so it runs on a private event loop in a thread, which keeps one
HTTP/2 connection to the runtime for the synthesizer's life: a turn opens a stream on
it, not a TLS handshake. SageMaker relays each ``PayloadPart`` to the container's
WebSocket, so the messages are exactly those of ``--endpoint-url ws://...``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import logging
import queue
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

from voicecli import protocol as p
from voicecli.errors import VoiceCliError
from voicecli.tts.aws_errors import explain_code

log = logging.getLogger(__name__)

PACKAGE = "aws_sdk_sagemaker_runtime_http2"
PORT = 8443  # the runtime serves the bidirectional API on its own port
_END = object()  # the response stream ended


def available() -> bool:
    return sys.version_info >= (3, 12) and importlib.util.find_spec(PACKAGE) is not None


def default_endpoint(region: str) -> str:
    return f"https://runtime.sagemaker.{region}.amazonaws.com:{PORT}"


# (access key, secret key, session token or None), read afresh for every stream so
# that refreshed credentials (SSO, instance roles) are picked up.
Credentials = Callable[[], tuple[str, str, str | None]]


class BidiConnection:
    """The runtime's HTTP/2 connection, and the turns that run over it."""

    def __init__(
        self,
        endpoint_name: str,
        region: str,
        credentials: Credentials,
        *,
        endpoint_url: str | None = None,
        where: str,
    ) -> None:
        self.endpoint_name = endpoint_name
        self.region = region
        self.url = endpoint_url or default_endpoint(region)
        self.where = where
        self._credentials = credentials
        self._client: Any = None
        self._sessions: set[concurrent.futures.Future[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="voicecli-bidi", daemon=True
        )
        self._thread.start()

    def open_turn(self) -> _BidiTransport:
        """One turn's stream on this connection."""
        transport = _BidiTransport(self)
        session = asyncio.run_coroutine_threadsafe(
            self._stream(transport.outgoing, transport.replies), self._loop
        )
        self._sessions.add(session)
        session.add_done_callback(self._sessions.discard)
        session.add_done_callback(lambda done: _report(done, transport.replies))
        return transport

    async def _stream(self, outgoing: asyncio.Queue[Any], replies: queue.Queue[Any]) -> None:
        from aws_sdk_sagemaker_runtime_http2.models import (
            InvokeEndpointWithBidirectionalStreamInput,
            RequestPayloadPart,
            RequestStreamEventPayloadPart,
            ResponseStreamEventPayloadPart,
        )

        client = await self._connect()
        stream = await client.invoke_endpoint_with_bidirectional_stream(
            InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.endpoint_name)
        )

        async def send() -> None:
            while (message := await outgoing.get()) is not None:
                part = RequestPayloadPart(
                    bytes_=p.encode_json(message).encode("utf-8"),
                    data_type="UTF8",
                    completion_state="COMPLETE",
                )
                await stream.input_stream.send(RequestStreamEventPayloadPart(value=part))
            await stream.input_stream.close()

        sender = asyncio.create_task(send())
        try:
            _, receiver = await stream.await_output()
            partial = bytearray()
            # ModelStreamError and InternalStreamFailure are raised by the receiver.
            async for event in receiver:
                match event:
                    case ResponseStreamEventPayloadPart(value=part):
                        # A part may be a piece of a frame: PARTIAL until the last piece.
                        partial += part.bytes_ or b""
                        if part.completion_state == "PARTIAL":
                            continue
                        frame = bytes(partial)
                        partial.clear()
                        replies.put(frame.decode("utf-8") if part.data_type == "UTF8" else frame)
                    case _:
                        log.debug("ignoring a response event of type %s", type(event).__name__)
            if sender.done() and not sender.cancelled() and sender.exception():
                raise sender.exception()  # type: ignore[misc]
        finally:
            sender.cancel()
            await stream.close()

    async def _connect(self) -> Any:
        if self._client is None:
            from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
            from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
            from smithy_http.aio.crt import AWSCRTHTTPClient

            config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
                endpoint_uri=self.url,
                region=self.region,
                aws_credentials_identity_resolver=_credentials_resolver(self._credentials),
                # The SDK's default transport (aiohttp) cannot carry a duplex stream.
                transport=AWSCRTHTTPClient(),
            )
            self._client = AsyncSageMakerRuntimeHTTP2Client(config=config)
        return self._client

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on the connection's loop (from any thread)."""
        self._loop.call_soon_threadsafe(fn, *args)

    def explain(self, exc: BaseException) -> VoiceCliError:
        return explain_bidi_error(exc, self.where, self.url)

    def close(self) -> None:
        async def shut() -> None:
            if self._client is not None:
                await self._client.close()

        # Streams still closing would be cut off mid-write by closing the client.
        concurrent.futures.wait(list(self._sessions), timeout=2)
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
            except Exception:  # noqa: BLE001 - closing a connection that already broke
                log.debug("closing the bidirectional client failed", exc_info=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)


class _BidiTransport:
    """One turn's stream on the connection: messages go out through the loop's queue,
    frames (and the stream's end, or why it failed) come back through a thread's."""

    def __init__(self, connection: BidiConnection) -> None:
        self.connection = connection
        self.replies: queue.Queue[Any] = queue.Queue()
        self.outgoing: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def _put(self, message: dict[str, Any] | None) -> None:
        self.connection.post(self.outgoing.put_nowait, message)

    def send(self, message: dict[str, Any]) -> None:
        self._put(message)

    def receive(self, timeout: float) -> str | bytes | None:
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            return None
        if reply is _END:
            raise VoiceCliError(
                f"The {self.connection.where} ended the stream before answering every sentence."
            )
        if isinstance(reply, BaseException):
            raise self.connection.explain(reply) from None
        return reply

    def cancel(self) -> None:
        # `cancel` stops the container's synthesis whatever SageMaker does with the
        # container's WebSocket once our side has ended, which AWS does not document.
        # (Cancelling the task instead would leave the CRT resolving futures that are gone.)
        self._put(p.control(p.CANCEL))
        self._put(None)

    def end(self) -> None:
        self._put(None)  # close our side; the runtime then ends the response


def _report(session: Any, replies: queue.Queue[Any]) -> None:
    """Hand the end of the stream, or why it failed, to the consuming thread."""
    if session.cancelled():
        return
    exc = session.exception()
    replies.put(_END if exc is None else exc)


def _credentials_resolver(credentials: Credentials) -> Any:
    from smithy_aws_core.identity import AWSCredentialsIdentity
    from smithy_core.aio.interfaces.identity import IdentityResolver

    class Resolver(IdentityResolver):  # type: ignore[misc]
        async def get_identity(self, *, properties: Any) -> AWSCredentialsIdentity:
            access_key, secret_key, token = await asyncio.to_thread(credentials)
            return AWSCredentialsIdentity(
                access_key_id=access_key, secret_access_key=secret_key, session_token=token
            )

    return Resolver()


def explain_bidi_error(exc: BaseException, where: str, url: str) -> VoiceCliError:
    """A VoiceCliError for what the SDK or its transport raised."""
    from awscrt.exceptions import AwsCrtError
    from smithy_core.exceptions import CallError, ModeledError

    if isinstance(exc, VoiceCliError):
        return exc
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, AwsCrtError):
        cause = cause.__cause__
    if isinstance(cause, AwsCrtError):  # the SDK wraps transport failures
        if "TLS" in cause.name:
            return VoiceCliError(
                f"TLS with the SageMaker runtime at {url} failed ({cause.name}). If it uses "
                "a private CA, point SSL_CERT_FILE at the CA's certificate."
            )
        return VoiceCliError(
            f"Cannot reach the SageMaker runtime at {url} for the {where} ({cause.name}: "
            f"{cause.message}) Check the network and the region."
        )
    if isinstance(exc, CallError):
        code = _error_code(exc)
        status = exc.response_metadata.http_status_code
        # The SDK keeps the service's message only for modelled errors.
        message = exc.message if isinstance(exc, ModeledError) else f"HTTP {status}"
        return explain_code(code, message, where)
    return VoiceCliError(f"The {where} failed: {type(exc).__name__}: {exc}.")


def _error_code(exc: BaseException) -> str:
    """The AWS error code of an SDK error: its modelled name, or the service's for the rest."""
    from aws_sdk_sagemaker_runtime_http2.models import (
        InputValidationError,
        InternalServerError,
        InternalStreamFailure,
        ModelError,
        ModelStreamError,
        ServiceUnavailableError,
    )

    for kind in (
        ModelError,
        ModelStreamError,
        InternalStreamFailure,
        InputValidationError,
        ServiceUnavailableError,
        InternalServerError,
    ):
        if isinstance(exc, kind):
            return kind.__name__
    # The SDK names an unmodelled error (auth, throttling) only in its message:
    # "Unknown error for operation ... - status: 400 - id: namespace#ThrottlingException".
    found = re.search(r"#(\w+)\s*$", str(exc))
    return found.group(1) if found else ""
