"""Synthesis by a `voicecli serve` container hosted on an Amazon SageMaker endpoint.

Two transports carry voicecli's protocol (``voicecli.protocol``):

* InvokeEndpointWithBidirectionalStream (``sagemaker_bidi``, Python 3.12+ with
  ``aws-sdk-sagemaker-runtime-http2``): one duplex stream per turn to the container's
  WebSocket route, exactly like ``--endpoint-url ws://...``.
* Everywhere else, boto3's InvokeEndpointWithResponseStream: one request per
  sentence to ``/invocations``, answered as a framed stream, one at a time: each
  request is a client of its own to the container, which shares its model among its
  clients, so sentences asked for together would be synthesized side by side and the
  one playing would starve (docs/sagemaker.md). Cancelling closes the open stream,
  which the container notices and stops synthesizing.

Credentials and region come from the normal AWS chain (environment, profile,
instance role); ``region`` overrides the chain's region.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from voicecli import protocol as p
from voicecli.config import SageMakerAPI, parse_choice
from voicecli.errors import VoiceCliError
from voicecli.tts import sagemaker_bidi
from voicecli.tts.aws_errors import explain_aws_error
from voicecli.tts.remote_turn import RemoteSynthesizer, Transport

log = logging.getLogger(__name__)

_END = object()  # a response stream finished


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
        api: str = SageMakerAPI.AUTO,
        max_in_flight: int = p.MAX_IN_FLIGHT,
        max_attempts: int = 3,
        read_timeout: float = 60.0,
    ) -> None:
        """``endpoint_url`` overrides the runtime's URL (tests, VPC endpoints). ``api``:
        ``auto`` takes the bidirectional API where its package is installed.
        ``max_in_flight``: sentences sent ahead of their answers on a bidirectional
        stream (the response-stream API asks for one at a time)."""
        self.endpoint_name = endpoint_name
        super().__init__(voice, speed)
        self.max_in_flight = max_in_flight
        self.read_timeout = read_timeout
        chosen = parse_choice(SageMakerAPI, api, "SageMaker API")
        if chosen is SageMakerAPI.BIDIRECTIONAL and not sagemaker_bidi.available():
            raise VoiceCliError(
                "The bidirectional SageMaker API needs Python 3.12+ and "
                "`pip install 'voicecli[bidi]'` (aws-sdk-sagemaker-runtime-http2)."
            )
        if chosen is SageMakerAPI.AUTO:
            available = sagemaker_bidi.available()
            chosen = SageMakerAPI.BIDIRECTIONAL if available else SageMakerAPI.RESPONSE_STREAM
        self.api = chosen
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
                ),
            )
        except Exception as exc:  # noqa: BLE001 - NoRegionError, bad profile, ...
            raise explain_aws_error(exc, endpoint_name, region) from None
        self.where = f"SageMaker endpoint {endpoint_name!r} ({self.region})"
        self._bidi: sagemaker_bidi.BidiConnection | None = None
        if self.api is SageMakerAPI.BIDIRECTIONAL:
            self._bidi = sagemaker_bidi.BidiConnection(
                endpoint_name,
                self._client.meta.region_name,  # set: boto3 has refused to go without one
                self._credentials,
                endpoint_url=endpoint_url,
                where=self.where,
            )

    def _credentials(self) -> tuple[str, str, str | None]:
        """The chain's credentials now (they may have been refreshed since the last call)."""
        credentials = self._session.get_credentials()
        if credentials is None:
            from botocore.exceptions import NoCredentialsError

            raise explain_aws_error(NoCredentialsError(), self.endpoint_name, self.region)
        frozen = credentials.get_frozen_credentials()
        return frozen.access_key, frozen.secret_key, frozen.token

    def open_turn(self) -> tuple[Transport, int]:
        if self._bidi is not None:
            return self._bidi.open_turn(), self.max_in_flight
        # One sentence at a time on response streams: see the module's docstring.
        return _ResponseStreams(self), 1

    def _invoke(self, message: dict[str, Any]) -> Any:
        """The response stream's body for one speak message."""
        response = self._client.invoke_endpoint_with_response_stream(
            EndpointName=self.endpoint_name,
            Body=json.dumps(message).encode("utf-8"),
            ContentType="application/json",
            Accept=p.STREAM_MEDIA_TYPE,
        )
        return response["Body"]

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "sagemaker",
            "endpoint": self.endpoint_name,
            "region": self.region,
            "api": self.api,
            "voice": self.voice,
        }

    def close(self) -> None:
        if self._bidi is not None:
            self._bidi.close()
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


class _ResponseStreams:
    """A turn as one request per speak message: each request's frames come back on a
    queue of its own, taken in the order they were sent, and ``end`` is answered with
    ``done`` once every stream before it has ended."""

    def __init__(self, synth: SageMakerSynthesizer) -> None:
        self.synth = synth
        self._order: queue.Queue[Any] = queue.Queue()  # each request's replies, or _END
        self._current: queue.Queue[Any] | None = None
        self._bodies: list[Any] = []
        self._lock = threading.Lock()
        self._ended = False

    def send(self, message: dict[str, Any]) -> None:
        match message:
            case {"type": p.SPEAK}:
                replies: queue.Queue[Any] = queue.Queue()
                self._order.put(replies)
                threading.Thread(
                    target=self._request,
                    args=(message, replies),
                    daemon=True,
                    name="voicecli-sagemaker-request",
                ).start()
            case {"type": p.END}:
                self._order.put(_END)
            case _:
                pass  # a cancel: see ``cancel``

    def _request(self, message: dict[str, Any], replies: queue.Queue[Any]) -> None:
        synth = self.synth
        try:
            body = synth._invoke(message)
            with self._lock:
                if self._ended:
                    body.close()
                    return
                self._bodies.append(body)
            for frame in read_response_stream(body):
                replies.put(frame)
            replies.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the receiving thread
            replies.put(
                VoiceCliError(f"The {synth.where} sent a malformed stream: {exc}.")
                if isinstance(exc, p.ProtocolError)
                else explain_aws_error(exc, synth.endpoint_name, synth.region)
            )

    def receive(self, timeout: float) -> str | bytes | None:
        if self._current is None:
            try:
                item = self._order.get(timeout=timeout)
            except queue.Empty:
                return None
            if item is _END:
                return p.encode_json(p.control(p.DONE))
            self._current = item
        try:
            reply = self._current.get(timeout=timeout)
        except queue.Empty:
            return None
        if reply is _END:
            self._current = None
            return None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def cancel(self) -> None:
        """Closing the open stream is what the container notices and stops for."""
        self.end()

    def end(self) -> None:
        with self._lock:
            self._ended = True
            bodies, self._bodies = self._bodies, []
        for body in bodies:
            body.close()
