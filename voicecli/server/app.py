"""The SageMaker container app: GET /ping, POST /invocations and the WebSocket
route /invocations-bidirectional-stream, speaking the protocol in ``protocol.py``.

Concurrency model (CPU, one model):
* One worker thread owns the model and synthesizes one job at a time. Jobs from
  every session wait in one bounded FIFO queue (``Limits.max_queue``); a full
  queue, or a session with ``Limits.max_pending_per_session`` unanswered speak
  requests, gets ``error`` code ``overloaded`` at once instead of a hang.
* Each connection has an outbox holding at most ``Limits.send_queue_frames`` audio
  frames. When a client reads slowly the worker pauses inside the job until there
  is room; after ``Limits.stall_timeout`` it gives up on that job
  (``slow_consumer``) so other sessions get the model back.
* Control replies never wait behind audio, so ``cancel`` is honoured while the
  outbox is full: queued audio of the request is dropped and the worker stops at
  its next chunk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import logging
import queue
import re
import threading
import uuid
import wave
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from voicecli import protocol as p
from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED
from voicecli.tts.voices import VoiceSpec

log = logging.getLogger(__name__)

MAX_VOICE_CHARS = 200

# Kokoro gives no audio for a text until all of it is synthesized, so a long
# speak is cut at sentence ends and its first sentence is heard sooner.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")


class SpeechModel(Protocol):
    """What the server needs from a synthesizer (KokoroSynthesizer fits)."""

    sample_rate: int

    def synthesize(
        self,
        text: str,
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[np.ndarray]: ...


@dataclass(frozen=True)
class Limits:
    max_queue: int = 16  # speak jobs waiting for the model, all sessions together
    max_pending_per_session: int = p.MAX_IN_FLIGHT  # unanswered speak requests per connection
    max_text_chars: int = 2000  # per speak
    send_queue_frames: int = 32  # audio frames buffered per connection
    frame_samples: int = 4800  # 200 ms per audio frame, the granularity of cancel on the wire
    stall_timeout: float = 30.0  # seconds a job waits for a client that does not read
    max_control_backlog: int = 256  # unsent control replies before a session is dropped

    @property
    def max_message_bytes(self) -> int:
        return 4 * self.max_text_chars + 4096  # UTF-8 text plus the JSON around it


@dataclass(frozen=True)
class OutAudio:
    request_id: str
    frame: bytes


class Outbox:
    """Messages waiting for one client. Lives on the event loop thread.

    Audio is bounded (``put_audio`` waits for room); control messages never wait.
    """

    _CLOSE = object()

    def __init__(self, limits: Limits) -> None:
        self._items: deque[Any] = deque()
        self._audio = 0
        self._limits = limits
        self._ready = asyncio.Event()
        self._space = asyncio.Event()
        self.closed = False
        self.overflowed = False  # the client sent without reading replies; it is dropped

    async def put_audio(self, job: Job, frame: bytes) -> bool:
        """False if the frame is not wanted any more (job finished, client gone)."""
        while not (self.closed or job.finished) and self._audio >= self._limits.send_queue_frames:
            self._space.clear()
            await self._space.wait()
        if self.closed or job.finished:
            return False
        self._items.append(OutAudio(job.request_id, frame))
        self._audio += 1
        self._ready.set()
        return True

    def put_control(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        if len(self._items) - self._audio >= self._limits.max_control_backlog:
            self.overflowed = True
            self.close()
            return
        self._items.append(message)
        self._ready.set()

    def finish(self) -> None:
        """Close after everything queued so far is sent."""
        self._items.append(self._CLOSE)
        self._ready.set()

    def drop(self, request_id: str) -> None:
        kept = [
            m for m in self._items if not (isinstance(m, OutAudio) and m.request_id == request_id)
        ]
        self._items = deque(kept)
        self._audio = sum(isinstance(m, OutAudio) for m in kept)
        self._space.set()

    async def get(self) -> dict[str, Any] | OutAudio | None:
        """The next message, or None once the outbox is finished or closed."""
        while not self._items or self.closed:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        item = self._items.popleft()
        if item is self._CLOSE:
            self.close()
            return None
        if isinstance(item, OutAudio):
            self._audio -= 1
            self._space.set()
        return item

    def close(self) -> None:
        self.closed = True
        self._ready.set()
        self._space.set()


@dataclass(eq=False)
class Job:
    """One speak request. ``finished`` and the outbox are touched on the loop only."""

    request_id: str
    text: str
    voice: str | None
    speed: float | None
    outbox: Outbox
    on_finish: Callable[[Job], None] = lambda job: None
    cancel: CancelToken = field(default_factory=CancelToken)
    finished: bool = False

    def _finish(self, message: dict[str, Any]) -> None:
        if self.finished:
            return
        self.finished = True
        self.cancel.cancel("finished")  # stops the worker at its next chunk if still running
        self.outbox.put_control(message)
        self.on_finish(self)

    def complete(self, frames: int, samples: int) -> None:
        self._finish(
            p.control(
                p.SENTENCE_DONE,
                request_id=self.request_id,
                frames=frames,
                samples=samples,
                cancelled=False,
            )
        )

    def fail(self, code: str, message: str) -> None:
        self._finish(p.control(p.ERROR, code=code, message=message, request_id=self.request_id))

    def cancel_now(self) -> None:
        if self.finished:
            return
        self.outbox.drop(self.request_id)
        self._finish(
            p.control(
                p.SENTENCE_DONE, request_id=self.request_id, frames=0, samples=0, cancelled=True
            )
        )


def split_sentences(text: str) -> list[str]:
    return [piece.strip() for piece in _SENTENCE_END.split(text) if piece.strip()]


class Engine:
    """The model, loaded in the background, and the one worker thread that runs it."""

    def __init__(self, factory: Callable[[], SpeechModel], limits: Limits) -> None:
        self._factory = factory
        self.limits = limits
        self._jobs: queue.Queue[Job] = queue.Queue(maxsize=limits.max_queue)
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.model: SpeechModel | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._main, name="voicecli-synth", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def submit(self, job: Job) -> None:
        if self.load_error is not None:
            raise p.ProtocolError(
                p.SYNTHESIS_FAILED, f"the model failed to load: {self.load_error}", job.request_id
            )
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise p.ProtocolError(
                p.OVERLOADED,
                f"the server's queue of {self.limits.max_queue} jobs is full; retry later",
                job.request_id,
            ) from None

    def _main(self) -> None:
        try:
            self.model = self._factory()
        except Exception as exc:  # noqa: BLE001 - reported through /ping and every request
            self.load_error = str(exc) if isinstance(exc, VoiceCliError) else repr(exc)
            log.error("model failed to load: %s", self.load_error)
            self._fail_waiting()
            return
        self.ready.set()
        log.info("model loaded; serving")
        while not self._stopping.is_set():
            try:
                job = self._jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            if not job.cancel.cancelled:
                self._run(job)

    def _fail_waiting(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            self._on_loop(
                job.fail, p.SYNTHESIS_FAILED, f"the model failed to load: {self.load_error}"
            )

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is gone: the server is shutting down
            pass

    def _wait_for(self, job: Job, coro: Coroutine[Any, Any, bool]) -> bool:
        assert self._loop is not None
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:
            coro.close()
            return False
        try:
            return future.result(timeout=self.limits.stall_timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._on_loop(
                job.fail,
                p.SLOW_CONSUMER,
                f"the client read no audio for {self.limits.stall_timeout:g} s; "
                "the request was dropped",
            )
            return False
        except concurrent.futures.CancelledError:
            return False

    def _run(self, job: Job) -> None:
        assert self.model is not None
        step = self.limits.frame_samples
        frames = samples = 0
        try:
            for piece in split_sentences(job.text):
                for audio in self.model.synthesize(
                    piece, job.cancel, voice=job.voice, speed=job.speed
                ):
                    for start in range(0, len(audio), step):
                        if job.cancel.cancelled:
                            return
                        pcm = p.to_pcm16(audio[start : start + step])
                        frame = p.encode_audio_frame(job.request_id, frames, pcm)
                        if not self._wait_for(job, job.outbox.put_audio(job, frame)):
                            return
                        frames += 1
                        samples += len(pcm) // 2
        except VoiceCliError as exc:  # e.g. an unknown voice: the client can fix it
            self._on_loop(job.fail, p.BAD_REQUEST, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - one bad request must not stop the worker
            log.exception("synthesis failed for request %s", job.request_id)
            self._on_loop(job.fail, p.SYNTHESIS_FAILED, f"synthesis failed: {exc!r}")
            return
        self._on_loop(job.complete, frames, samples)


def parse_speak(
    message: dict[str, Any], limits: Limits
) -> tuple[str, str, str | None, float | None]:
    """(request_id, text, voice, speed) of a speak message, validated."""
    request_id = message.get("request_id")
    if (
        not isinstance(request_id, str)
        or not request_id
        or len(request_id.encode("utf-8")) > p.MAX_REQUEST_ID_BYTES
    ):
        raise p.ProtocolError(
            p.BAD_REQUEST, f"speak needs a request_id string of 1 to {p.MAX_REQUEST_ID_BYTES} bytes"
        )
    text = message.get("text")
    if not isinstance(text, str) or not text.strip():
        raise p.ProtocolError(p.BAD_REQUEST, "speak needs a non-empty text", request_id)
    if len(text) > limits.max_text_chars:
        raise p.ProtocolError(
            p.TEXT_TOO_LONG,
            f"text has {len(text)} characters; the limit "
            f"is {limits.max_text_chars}: send one sentence per speak",
            request_id,
        )
    voice = message.get("voice")
    if voice is not None:
        if not isinstance(voice, str) or len(voice) > MAX_VOICE_CHARS:
            raise p.ProtocolError(p.BAD_REQUEST, "voice must be a voice name or blend", request_id)
        try:
            VoiceSpec.parse(voice)
        except VoiceCliError as exc:
            raise p.ProtocolError(p.BAD_REQUEST, str(exc), request_id) from None
    speed = message.get("speed")
    if speed is not None:
        if (
            isinstance(speed, bool)
            or not isinstance(speed, int | float)
            or not MIN_SPEED <= speed <= MAX_SPEED
        ):
            raise p.ProtocolError(
                p.BAD_REQUEST, f"speed must be a number from {MIN_SPEED} to {MAX_SPEED}", request_id
            )
        speed = float(speed)
    return request_id, text, voice, speed


class Session:
    """One WebSocket connection."""

    def __init__(self, ws: WebSocket, engine: Engine) -> None:
        self.ws = ws
        self.engine = engine
        self.limits = engine.limits
        self.outbox = Outbox(self.limits)
        self.pending: dict[str, Job] = {}
        self.ended = False

    async def run(self) -> None:
        await self.ws.accept()
        sender = asyncio.create_task(self._send_loop())
        try:
            while not self.outbox.closed:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("text")
                if data is None:
                    data = message.get("bytes") or b""
                try:
                    self._handle(p.decode_client_message(data))
                except p.ProtocolError as exc:
                    self.outbox.put_control(
                        p.control(
                            p.ERROR, code=exc.code, message=exc.message, request_id=exc.request_id
                        )
                    )
        finally:
            for job in list(self.pending.values()):
                job.cancel_now()
            self.outbox.close()
            sender.cancel()
            try:
                await sender
            except asyncio.CancelledError:
                pass

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == p.SPEAK:
            self._speak(message)
        elif kind == p.CANCEL:
            request_id = message.get("request_id")
            if request_id is None:
                for job in list(self.pending.values()):
                    job.cancel_now()
            elif request_id in self.pending:
                self.pending[request_id].cancel_now()
            # Cancelling a finished or unknown request is not an error: replies cross.
        elif kind == p.END:
            self.ended = True
            self._maybe_done()
        else:
            raise p.ProtocolError(
                p.UNKNOWN_TYPE,
                f"unknown message type {kind!r}; a client sends {', '.join(p.CLIENT_TYPES)}",
            )

    def _speak(self, message: dict[str, Any]) -> None:
        request_id, text, voice, speed = parse_speak(message, self.limits)
        if self.ended:
            raise p.ProtocolError(p.BAD_REQUEST, "speak after end", request_id)
        if request_id in self.pending:
            raise p.ProtocolError(
                p.BAD_REQUEST,
                f"request {request_id!r} is still running; use a new request_id",
                request_id,
            )
        if len(self.pending) >= self.limits.max_pending_per_session:
            raise p.ProtocolError(
                p.OVERLOADED,
                f"this session already has {len(self.pending)} unanswered speak "
                "requests; wait for sentence_done before sending more",
                request_id,
            )
        job = Job(request_id, text, voice, speed, self.outbox, self._finished)
        self.engine.submit(job)
        self.pending[request_id] = job

    def _finished(self, job: Job) -> None:
        self.pending.pop(job.request_id, None)
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.ended and not self.pending and not self.outbox.closed:
            self.outbox.put_control(p.control(p.DONE))
            self.outbox.finish()

    async def _send_loop(self) -> None:
        try:
            while (item := await self.outbox.get()) is not None:
                if isinstance(item, OutAudio):
                    await self.ws.send_bytes(item.frame)
                else:
                    await self.ws.send_text(p.encode_json(item))
            if self.outbox.overflowed:
                log.warning("closing a session that sends without reading its replies")
            await self.ws.close(1008 if self.outbox.overflowed else 1000)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the client went away; the receive loop ends too
            log.debug("send failed; closing the session", exc_info=True)
        finally:
            self.outbox.close()


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return out.getvalue()


def _error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(p.control(p.ERROR, code=code, message=message), status_code=status)


_HTTP_STATUS = {p.OVERLOADED: 429, p.TEXT_TOO_LONG: 413, p.SYNTHESIS_FAILED: 500}


def create_app(
    synth_factory: Callable[[], SpeechModel],
    limits: Limits | None = None,
) -> Starlette:
    """The ASGI app. ``synth_factory`` runs in a thread at startup; /ping says 503 until
    it returns."""
    engine = Engine(synth_factory, limits or Limits())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.start(asyncio.get_running_loop())
        yield
        engine.stop()

    async def ping(request: Request) -> Response:
        if engine.ready.is_set():
            return JSONResponse({"status": "ready"})
        if engine.load_error is not None:
            return JSONResponse({"status": "failed", "message": engine.load_error}, 503)
        return JSONResponse({"status": "loading"}, 503)

    async def invocations(request: Request) -> Response:
        body = await request.body()
        if len(body) > engine.limits.max_message_bytes:
            return _error_response(413, p.TEXT_TOO_LONG, "request body is too large")
        try:
            message = _invocation_message(body, request.headers.get("content-type", ""))
            request_id, text, voice, speed = parse_speak(message, engine.limits)
        except p.ProtocolError as exc:
            return _error_response(_HTTP_STATUS.get(exc.code, 400), exc.code, exc.message)
        outbox = Outbox(engine.limits)
        job = Job(request_id, text, voice, speed, outbox)
        try:
            engine.submit(job)
        except p.ProtocolError as exc:
            return _error_response(_HTTP_STATUS.get(exc.code, 400), exc.code, exc.message)
        accept = request.headers.get("accept", "")
        if p.STREAM_MEDIA_TYPE in accept:
            return StreamingResponse(_framed(job), media_type=p.STREAM_MEDIA_TYPE)
        pcm = bytearray()
        try:
            while isinstance(item := await outbox.get(), OutAudio):
                decoded = p.decode_server_frame(item.frame)
                assert isinstance(decoded, p.AudioFrame)
                pcm += decoded.pcm
        finally:
            job.cancel_now()  # a client that hung up stops the synthesis
        if item is not None and item["type"] == p.ERROR:
            return _error_response(
                _HTTP_STATUS.get(item["code"], 400), item["code"], item["message"]
            )
        if "audio/pcm" in accept or "audio/l16" in accept.lower():
            return Response(bytes(pcm), media_type=f"audio/pcm;rate={p.SAMPLE_RATE}")
        return Response(wav_bytes(bytes(pcm), p.SAMPLE_RATE), media_type="audio/wav")

    async def websocket(ws: WebSocket) -> None:
        await Session(ws, engine).run()

    app = Starlette(
        routes=[
            Route("/ping", ping, methods=["GET"]),
            Route("/invocations", invocations, methods=["POST"]),
            WebSocketRoute(p.WS_PATH, websocket),
        ],
        lifespan=lifespan,
    )
    app.state.engine = engine
    return app


def _invocation_message(body: bytes, content_type: str) -> dict[str, Any]:
    """A speak message from an /invocations body: JSON, or the text itself as text/plain."""
    if "json" in content_type or body.lstrip()[:1] == b"{":
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError):
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


async def _framed(job: Job) -> AsyncIterator[bytes]:
    """The framed HTTP stream of one job; the stream ends with its sentence_done or error."""
    try:
        while (item := await job.outbox.get()) is not None:
            if isinstance(item, OutAudio):
                yield p.length_prefixed(item.frame)
                continue
            yield p.length_prefixed(p.encode_control_frame(item))
            if item.get("request_id") == job.request_id:
                return
    finally:
        job.cancel_now()  # the client hung up early: free the model
