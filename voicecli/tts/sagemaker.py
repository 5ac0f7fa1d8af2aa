"""Synthesis by a `voicecli serve` container hosted on an Amazon SageMaker endpoint.

Two transports carry voicecli's protocol (``voicecli.protocol``):

* InvokeEndpointWithBidirectionalStream (``sagemaker_bidi``, Python 3.12+ with
  ``aws-sdk-sagemaker-runtime-http2``): one duplex stream per turn to the container's
  WebSocket route, exactly like ``--endpoint-url ws://...``.
* Everywhere else, boto3's InvokeEndpointWithResponseStream: one request per
  sentence to ``/invocations``, answered as a framed stream, one at a time: each
  request is a client of its own to the container, which shares its model among its
  clients, so sentences asked for together would be synthesized side by side and the
  one playing would starve (7 s gaps, measured). Cancelling closes the open stream,
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
from voicecli.cancel import POLL, CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioChunk, Sentence
from voicecli.timeline import Timeline
from voicecli.tts import sagemaker_bidi
from voicecli.tts.aws_errors import explain_aws_error
from voicecli.tts.remote_turn import RemoteSynthesizer, TurnState

log = logging.getLogger(__name__)

_END = object()  # a response stream finished

AUTO, BIDIRECTIONAL, RESPONSE_STREAM = "auto", "bidirectional", "response-stream"
APIS = (AUTO, BIDIRECTIONAL, RESPONSE_STREAM)


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
        api: str = AUTO,
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
        if api not in APIS:
            raise VoiceCliError(f"Unknown SageMaker API {api!r}: use one of {', '.join(APIS)}.")
        if api == BIDIRECTIONAL and not sagemaker_bidi.available():
            raise VoiceCliError(
                "The bidirectional SageMaker API needs Python 3.12+ and "
                "`pip install 'voicecli[bidi]'` (aws-sdk-sagemaker-runtime-http2)."
            )
        self.api = (
            (BIDIRECTIONAL if sagemaker_bidi.available() else RESPONSE_STREAM)
            if api == AUTO
            else api
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
                ),
            )
        except Exception as exc:  # noqa: BLE001 - NoRegionError, bad profile, ...
            raise explain_aws_error(exc, endpoint_name, region) from None
        self.where = f"SageMaker endpoint {endpoint_name!r} ({self.region})"
        self._bidi: sagemaker_bidi.BidiConnection | None = None
        if self.api == BIDIRECTIONAL:
            self._bidi = sagemaker_bidi.BidiConnection(
                endpoint_name,
                self._client.meta.region_name,  # set: boto3 has refused to go without one
                self._credentials,
                endpoint_url=endpoint_url,
                where=self.where,
                read_timeout=read_timeout,
            )

    def _credentials(self) -> tuple[str, str, str | None]:
        """The chain's credentials now (they may have been refreshed since the last call)."""
        credentials = self._session.get_credentials()
        if credentials is None:
            from botocore.exceptions import NoCredentialsError

            raise explain_aws_error(NoCredentialsError(), self.endpoint_name, self.region)
        frozen = credentials.get_frozen_credentials()
        return frozen.access_key, frozen.secret_key, frozen.token

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        if cancel.cancelled:
            return
        if self._bidi is not None:
            yield from self._bidi.turn(
                sentences, cancel, timeline, self.voice, self.speed, self.max_in_flight
            )
        else:
            yield from self._response_streams(sentences, cancel, timeline)

    # -- InvokeEndpointWithResponseStream -------------------------------------------------

    def _response_streams(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        # One sentence at a time: see the module's docstring.
        turn = TurnState(timeline, self.where, max_in_flight=1)
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


def _get(q: queue.Queue[Any], cancel: CancelToken) -> Any:
    """The next item, or None once cancelled."""
    while not cancel.cancelled:
        try:
            return q.get(timeout=POLL)
        except queue.Empty:
            continue
    return None
