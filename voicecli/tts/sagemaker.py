"""Synthesis by a `voicecli serve` container hosted on an Amazon SageMaker endpoint.

Two transports carry voicecli's protocol (``voicecli.protocol``):

* InvokeEndpointWithBidirectionalStream, from the optional package
  ``aws-sdk-sagemaker-runtime-http2`` (Python 3.12+): one duplex stream per turn to
  the container's WebSocket route, exactly like ``--endpoint-url ws://...``.
  ``_BidiTurn`` below is the only code that touches that package.
* Everywhere else, boto3's InvokeEndpointWithResponseStream: one request per
  sentence to ``/invocations``, answered as a framed stream. Requests for the next
  sentences go out while earlier ones are still streaming (up to ``max_in_flight``),
  so this is not lockstep either. Cancelling closes the open streams, which the
  container notices and stops synthesizing.

Credentials and region come from the normal AWS chain (environment, profile,
instance role); ``region`` overrides the chain's region.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from voicecli import protocol as p
from voicecli.cancel import POLL, CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioChunk, Sentence
from voicecli.timeline import Timeline
from voicecli.tts.protocol_turn import RemoteSynthesizer, TurnState

log = logging.getLogger(__name__)

BIDI_PACKAGE = "aws_sdk_sagemaker_runtime_http2"
_END = object()  # a response stream finished


def bidi_available() -> bool:
    return sys.version_info >= (3, 12) and importlib.util.find_spec(BIDI_PACKAGE) is not None


def explain_aws_error(exc: BaseException, endpoint: str, region: str | None) -> VoiceCliError:
    """A VoiceCliError saying what to do about a failed SageMaker call."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    where = f"SageMaker endpoint {endpoint!r} in {region or 'the default region'}"
    if isinstance(exc, VoiceCliError):
        return exc
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return VoiceCliError(
            "No AWS credentials found. Run `aws configure` (or `aws sso login`), or set "
            "AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."
        )
    if isinstance(exc, NoRegionError):
        return VoiceCliError(
            "No AWS region is set for the SageMaker endpoint. Pass --region, "
            "or set AWS_REGION, or add a region to your AWS profile."
        )
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        return VoiceCliError(
            f"Cannot reach the SageMaker runtime for {where}: {exc}. "
            "Check the network and the region."
        )
    if isinstance(exc, ReadTimeoutError):
        return VoiceCliError(f"The {where} stopped answering: {exc}. It may be overloaded.")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "")
        message = error.get("Message", "") or str(exc)
        if code == "ValidationError" and "not found" in message.lower():
            return VoiceCliError(
                f"The {where} does not exist ({message}). Check --sagemaker-endpoint and "
                "--region; `aws sagemaker list-endpoints` lists yours."
            )
        if code in ("ThrottlingException", "Throttling", "TooManyRequestsException"):
            return VoiceCliError(
                f"The {where} is throttling requests ({message}). Retry "
                "later, or raise the endpoint's instance count."
            )
        if code == "ModelStreamError":
            return VoiceCliError(
                f"The model behind the {where} failed mid-stream ({message}). Check the "
                "endpoint's CloudWatch logs; retry the request."
            )
        if code == "InternalStreamFailure":
            return VoiceCliError(
                f"SageMaker broke the stream from the {where} ({message}). Retry the request."
            )
        if code == "ModelError":
            return VoiceCliError(
                f"The container behind the {where} rejected the request: {message}."
            )
        if code in (
            "AccessDeniedException",
            "UnrecognizedClientException",
            "InvalidSignatureException",
            "ExpiredTokenException",
        ):
            return VoiceCliError(
                f"AWS refused access to the {where} ({code}: {message}). "
                "Check your credentials and the sagemaker:InvokeEndpoint* "
                "permissions."
            )
        return VoiceCliError(f"The {where} failed: {code or type(exc).__name__}: {message}.")
    return VoiceCliError(f"The {where} failed: {type(exc).__name__}: {exc}.")


class SageMakerSynthesizer(RemoteSynthesizer):
    """A Synthesizer backed by a SageMaker endpoint running `voicecli serve`."""

    def __init__(
        self,
        endpoint_name: str,
        region: str | None = None,
        voice: str | None = None,
        speed: float | None = None,
        *,
        endpoint_url: str | None = None,
        bidirectional: bool | None = None,
        max_in_flight: int = p.MAX_IN_FLIGHT,
        max_attempts: int = 3,
        read_timeout: float = 60.0,
    ) -> None:
        """``endpoint_url`` overrides the runtime's URL (tests, VPC endpoints).
        ``bidirectional`` None: use the bidirectional API where it is installed."""
        self.endpoint_name = endpoint_name
        super().__init__(voice, speed)
        self.max_in_flight = max_in_flight
        self.bidirectional = bidi_available() if bidirectional is None else bidirectional
        if self.bidirectional and not bidi_available():
            raise VoiceCliError(
                "The bidirectional SageMaker API needs Python 3.12+ and "
                "`pip install aws-sdk-sagemaker-runtime-http2`."
            )
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise VoiceCliError(
                "SageMaker endpoints need boto3: pip install 'voicecli[sagemaker]'."
            ) from None
        try:
            self._session = boto3.Session(region_name=region)
            self.region = self._session.region_name
            self._client = self._session.client(
                "sagemaker-runtime",
                endpoint_url=endpoint_url,
                config=Config(
                    retries={"mode": "standard", "max_attempts": max_attempts},
                    read_timeout=read_timeout,
                    connect_timeout=10,
                    max_pool_connections=max(10, max_in_flight * 2),
                ),
            )
        except Exception as exc:  # noqa: BLE001 - NoRegionError, bad profile, ...
            raise explain_aws_error(exc, endpoint_name, region) from None
        self.where = f"SageMaker endpoint {endpoint_name!r} ({self.region})"

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        if cancel.cancelled:
            return
        if self.bidirectional:
            yield from _BidiTurn(self, cancel, timeline).run(sentences)
        else:
            yield from self._response_streams(sentences, cancel, timeline)

    # -- InvokeEndpointWithResponseStream -------------------------------------------------

    def _response_streams(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        turn = TurnState(timeline, self.where, self.max_in_flight)
        # One reply queue per sentence, in sentence order; each is filled by its request.
        order: queue.Queue[Any] = queue.Queue()
        bodies: list[Any] = []
        bodies_lock = threading.Lock()

        def close_streams() -> None:
            with bodies_lock:
                for body in bodies:
                    body.close()
                bodies.clear()

        def request(message: dict[str, Any], replies: queue.Queue[Any]) -> None:
            try:
                response = self._client.invoke_endpoint_with_response_stream(
                    EndpointName=self.endpoint_name,
                    Body=json.dumps(message).encode("utf-8"),
                    ContentType="application/json",
                    Accept=p.STREAM_MEDIA_TYPE,
                )
                body = response["Body"]
                with bodies_lock:
                    bodies.append(body)
                if cancel.cancelled:
                    return
                for frame in read_response_stream(body):
                    replies.put(p.decode_server_frame(frame))
                replies.put(_END)
            except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread
                if not cancel.cancelled:
                    replies.put(
                        explain_aws_error(exc, self.endpoint_name, self.region)
                        if not isinstance(exc, p.ProtocolError)
                        else VoiceCliError(f"The {self.where} sent a malformed stream: {exc}.")
                    )

        def send_all() -> None:
            try:
                for message in turn.requests(sentences, cancel, self.voice, self.speed):
                    replies: queue.Queue[Any] = queue.Queue()
                    order.put(replies)
                    threading.Thread(
                        target=request,
                        args=(message, replies),
                        daemon=True,
                        name="voicecli-sagemaker-request",
                    ).start()
                if not cancel.cancelled:
                    order.put(_END)
            except BaseException as exc:  # noqa: BLE001 - e.g. the LLM source failed
                order.put(exc)

        threading.Thread(target=send_all, name="voicecli-sagemaker-send", daemon=True).start()
        cancel.on_cancel(close_streams)
        try:
            while (replies := _get(order, cancel)) is not _END and replies is not None:
                if isinstance(replies, BaseException):
                    raise replies
                while (reply := _get(replies, cancel)) is not _END:
                    if reply is None:
                        return
                    if isinstance(reply, BaseException):
                        raise reply
                    chunk = turn.handle(reply)
                    if chunk is not None and not cancel.cancelled:
                        yield chunk
        finally:
            close_streams()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "sagemaker",
            "endpoint": self.endpoint_name,
            "region": self.region,
            "api": "bidirectional" if self.bidirectional else "response-stream",
            "voice": self.voice,
        }

    def close(self) -> None:
        self._client.close()


def read_response_stream(body: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """voicecli frames from a response-stream Body; PayloadParts may split them anywhere."""
    frames = p.StreamReassembler()
    for event in body:
        if "PayloadPart" in event:
            yield from frames.feed(event["PayloadPart"].get("Bytes", b""))
        elif "ModelStreamError" in event or "InternalStreamFailure" in event:
            # botocore usually raises these as EventStreamError; this is the modelled shape.
            from botocore.exceptions import ClientError

            code = "ModelStreamError" if "ModelStreamError" in event else "InternalStreamFailure"
            detail = event[code]
            raise ClientError(
                {"Error": {"Code": code, "Message": detail.get("Message", "")}},
                "InvokeEndpointWithResponseStream",
            )
    if frames.pending:
        raise p.ProtocolError(
            p.BAD_FRAME, f"the stream ended inside a frame ({frames.pending} bytes left over)"
        )


def _get(q: queue.Queue[Any], cancel: CancelToken) -> Any:
    """The next item, or None once cancelled."""
    while not cancel.cancelled:
        try:
            return q.get(timeout=POLL)
        except queue.Empty:
            continue
    return None


class _BidiTurn:
    """One turn over InvokeEndpointWithBidirectionalStream (aws-sdk-sagemaker-runtime-http2).

    The SDK is asyncio-only, so it runs on a private event loop in a thread; the
    messages are the same as over ``--endpoint-url ws://...``.
    """

    def __init__(
        self, synth: SageMakerSynthesizer, cancel: CancelToken, timeline: Timeline
    ) -> None:
        self.synth = synth
        self.cancel = cancel
        self.turn = TurnState(timeline, synth.where)
        self.replies: queue.Queue[Any] = queue.Queue()

    def _client(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2.client import SageMakerRuntimeHTTP2Client
        from aws_sdk_sagemaker_runtime_http2.config import Config, HTTPAuthSchemeResolver
        from smithy_aws_core.auth.sigv4 import SigV4AuthScheme
        from smithy_aws_core.identity import StaticCredentialsResolver

        credentials = self.synth._session.get_credentials()
        if credentials is None:
            from botocore.exceptions import NoCredentialsError

            raise explain_aws_error(
                NoCredentialsError(), self.synth.endpoint_name, self.synth.region
            )
        frozen = credentials.get_frozen_credentials()
        region = self.synth.region
        return SageMakerRuntimeHTTP2Client(
            config=Config(
                endpoint_uri=f"https://runtime.sagemaker.{region}.amazonaws.com:8443",
                region=region,
                aws_credentials_identity_resolver=StaticCredentialsResolver(),
                aws_access_key_id=frozen.access_key,
                aws_secret_access_key=frozen.secret_key,
                aws_session_token=frozen.token,
                auth_scheme_resolver=HTTPAuthSchemeResolver(),
                auth_schemes={"aws.auth#sigv4": SigV4AuthScheme(service="sagemaker")},
            )
        )

    async def _session(self, outgoing: asyncio.Queue[dict[str, Any] | None]) -> None:
        from aws_sdk_sagemaker_runtime_http2.models import (
            InvokeEndpointWithBidirectionalStreamInput,
            RequestPayloadPart,
            RequestStreamEventPayloadPart,
            ResponseStreamEventPayloadPart,
        )

        stream = await self._client().invoke_endpoint_with_bidirectional_stream(
            InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.synth.endpoint_name)
        )
        _, receiver = await stream.await_output()

        async def send() -> None:
            while (message := await outgoing.get()) is not None:
                part = RequestPayloadPart(
                    bytes_=p.encode_json(message).encode("utf-8"),
                    data_type="UTF8",
                    completion_state="COMPLETE",
                )
                await stream.input_stream.send(RequestStreamEventPayloadPart(value=part))

        sender = asyncio.create_task(send())
        try:
            while (event := await receiver.receive()) is not None:
                if not isinstance(event, ResponseStreamEventPayloadPart):
                    raise VoiceCliError(f"The {self.synth.where} failed: {event.value!r}.")
                self.replies.put(p.decode_server_frame(event.value.bytes_))
        finally:
            sender.cancel()
            await stream.close()

    def run(self, sentences: Iterable[Sentence]) -> Iterator[AudioChunk]:
        loop = asyncio.new_event_loop()
        outgoing: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        def put(message: dict[str, Any] | None) -> None:
            try:
                loop.call_soon_threadsafe(outgoing.put_nowait, message)
            except RuntimeError:  # the session is over and its loop closed
                pass

        def drive() -> None:
            try:
                loop.run_until_complete(self._session(outgoing))
                self.replies.put(_END)
            except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread
                self.replies.put(
                    explain_aws_error(exc, self.synth.endpoint_name, self.synth.region)
                )
            finally:
                loop.close()

        def send_all() -> None:
            try:
                for message in self.turn.requests(
                    sentences, self.cancel, self.synth.voice, self.synth.speed
                ):
                    put(message)
                if not self.cancel.cancelled:
                    put(p.control(p.END))
            except BaseException as exc:  # noqa: BLE001 - e.g. the LLM source failed
                self.replies.put(exc)

        threading.Thread(target=drive, name="voicecli-bidi", daemon=True).start()
        threading.Thread(target=send_all, name="voicecli-bidi-send", daemon=True).start()
        self.cancel.on_cancel(lambda: put(p.control(p.CANCEL)))
        try:
            while not self.turn.done and (reply := _get(self.replies, self.cancel)) is not None:
                if reply is _END:
                    return
                if isinstance(reply, BaseException):
                    raise reply
                chunk = self.turn.handle(reply)
                if chunk is not None and not self.cancel.cancelled:
                    yield chunk
        finally:
            put(None)
