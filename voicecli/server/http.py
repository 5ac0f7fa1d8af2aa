"""GET /ping and POST /invocations: one speak per request, answered as WAV, raw PCM or
the framed stream. A client that hangs up stops its synthesis, a body is read no
further than the limit and no longer than ``Limits.body_timeout``, and every error is
the protocol's JSON error."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import uuid
import wave
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from voicecli import protocol as p
from voicecli.server.guard import peer_of
from voicecli.server.outbox import OutAudio, Outbox
from voicecli.server.requests import parse_speak
from voicecli.server.scheduler import Job, Listener, Scheduler

_HTTP_STATUS = {p.OVERLOADED: 429, p.BUSY: 503, p.TEXT_TOO_LONG: 413, p.SYNTHESIS_FAILED: 500}
Handler = Callable[[Request], Awaitable[Response]]


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return out.getvalue()


def error_response(code: str, message: str) -> JSONResponse:
    retry = {"Retry-After": "1"} if code == p.BUSY else None
    return JSONResponse(
        p.control(p.ERROR, code=code, message=message),
        status_code=_HTTP_STATUS.get(code, 400),
        headers=retry,
    )


def ping_route(scheduler: Scheduler) -> Handler:
    """200 once the model has loaded; 503 while it loads, or if it failed. ``warm``
    says whether its idle warm-up (first passes, the voice's prior) is over."""

    async def ping(request: Request) -> Response:
        if scheduler.ready.is_set():
            return JSONResponse({"status": "ready", "warm": scheduler.warm.is_set()})
        if scheduler.load_error is not None:
            return JSONResponse({"status": "failed", "message": scheduler.load_error}, 503)
        return JSONResponse({"status": "loading"}, 503)

    return ping


def invocations_route(scheduler: Scheduler) -> Handler:
    async def invocations(request: Request) -> Response:
        try:
            body = await read_body(
                request, scheduler.limits.max_message_bytes, scheduler.limits.body_timeout
            )
            message = invocation_message(body, request.headers.get("content-type", ""))
            request_id, text, voice, speed, words = parse_speak(message, scheduler.limits)
        except p.ProtocolError as exc:
            return error_response(exc.code, exc.message)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is there to read it
        outbox = Outbox(scheduler.limits, asyncio.get_running_loop())
        listener = scheduler.listener(outbox, *peer_of(request.scope))
        job = Job(request_id, text, voice, speed, outbox, words=words)
        try:
            scheduler.submit(listener, job)
        except p.ProtocolError as exc:
            scheduler.leave(listener)
            return error_response(exc.code, exc.message)
        accept = request.headers.get("accept", "")
        if p.STREAM_MEDIA_TYPE in accept:
            # Starlette ends this stream when the client disconnects; framed() then leaves.
            return StreamingResponse(
                framed(scheduler, listener, job), media_type=p.STREAM_MEDIA_TYPE
            )
        try:
            pcm, final = await _collect(request, outbox)
        finally:
            scheduler.leave(listener)  # done, or the client hung up: either way, stop
        if final is None:
            return Response(status_code=400)
        if final["type"] == p.ERROR:
            return error_response(final["code"], final["message"])
        if "audio/pcm" in accept or "audio/l16" in accept.lower():
            return Response(pcm, media_type=f"audio/pcm;rate={p.SAMPLE_RATE}")
        return Response(wav_bytes(pcm, p.SAMPLE_RATE), media_type="audio/wav")

    return invocations


async def _collect(request: Request, outbox: Outbox) -> tuple[bytes, dict[str, Any] | None]:
    """The job's PCM and its final reply, or None as the reply if the client hung up."""

    async def replies() -> tuple[bytes, dict[str, Any] | None]:
        pcm = bytearray()
        while isinstance(item := await outbox.get(), OutAudio):
            decoded = p.decode_server_frame(item.frame)
            assert isinstance(decoded, p.AudioFrame)
            pcm += decoded.pcm
        return bytes(pcm), item

    async def hung_up() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    work, watch = asyncio.create_task(replies()), asyncio.create_task(hung_up())
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        return work.result() if work in done else (b"", None)
    finally:
        for task in (work, watch):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, refused past ``limit`` bytes before more of it is read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise p.ProtocolError(p.TEXT_TOO_LONG, "request body is too large")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise p.ProtocolError(p.TEXT_TOO_LONG, "request body is too large")
    except TimeoutError:
        raise p.ProtocolError(
            p.BAD_REQUEST, f"the request body did not arrive within {timeout:g} s"
        ) from None
    return bytes(body)


def invocation_message(body: bytes, content_type: str) -> dict[str, Any]:
    """A speak message from an /invocations body: JSON when the content type says so (or
    says nothing and the body looks like JSON), otherwise the text itself."""
    kind = content_type.lower().strip()
    if "json" in kind or (not kind.startswith("text/") and body.lstrip()[:1] == b"{"):
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise p.ProtocolError(p.BAD_JSON, "request body is not valid JSON") from None
        if not isinstance(message, dict):
            raise p.ProtocolError(p.BAD_JSON, "request body must be a JSON object")
    else:
        try:
            message = {"text": body.decode("utf-8")}
        except UnicodeDecodeError:
            raise p.ProtocolError(p.BAD_REQUEST, "request body is not UTF-8 text") from None
    message.setdefault("request_id", uuid.uuid4().hex)
    return message


async def framed(scheduler: Scheduler, listener: Listener, job: Job) -> AsyncIterator[bytes]:
    """The framed HTTP stream of one job; it ends with its sentence_done or error."""
    try:
        while (item := await job.outbox.get()) is not None:
            if isinstance(item, OutAudio):
                yield p.length_prefixed(item.frame)
                continue
            yield p.length_prefixed(p.encode_control_frame(item))
            if item.get("request_id") == job.request_id:
                return
    finally:
        scheduler.leave(listener)  # the client hung up early: free the model
