"""``POST /v1/audio/transcriptions``, as OpenAI's clients call it: a multipart upload
(parsed by python-multipart, through Starlette) transcribed by the configured Whisper,
answered as ``json``, ``text``, ``srt``, ``vtt`` or ``verbose_json``.

Nothing in the upload is trusted: its bytes are counted as they arrive and refused past
``MAX_UPLOAD_BYTES`` (OpenAI's own limit), and it is decoded as ``voicecli transcribe``
decodes a file, bounded by its size and by ``max_transcribe_seconds`` whatever its
header claims. Whisper loads on the first request and transcribes one file at a time;
a few more may wait, and the next is told the server is busy.
"""

from __future__ import annotations

import asyncio
import io
import logging
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from voicecli.errors import VoiceCliError
from voicecli.server.openai_api.api_error import SERVER, APIError, invalid
from voicecli.server.openai_api.catalog import TRANSCRIPTION_MODEL, transcription_model

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 25 * 1024 * 1024
MAX_WAITING = 4  # transcriptions waiting for the one in progress
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("segment", "word")
MAX_PROMPT_CHARS = 2000


@dataclass(frozen=True)
class TranscriptionOptions:
    asr_model: str  # the faster-whisper model every name maps to
    max_seconds: float  # of audio transcribed from one file


class _TooLarge(Exception):
    pass


class Hearing:
    """The Whisper model, loaded once on the first request, and the queue in front of it."""

    def __init__(self, options: TranscriptionOptions) -> None:
        self.options = options
        self._transcriber: Any = None
        self._loading = asyncio.Lock()
        self._turn = asyncio.Semaphore(1)
        self._waiting = 0

    async def transcriber(self) -> Any:
        async with self._loading:
            if self._transcriber is None:
                from voicecli.listen.asr import Transcriber

                try:
                    self._transcriber = await asyncio.to_thread(Transcriber, self.options.asr_model)
                except VoiceCliError as exc:
                    raise APIError(503, f"Transcription is not available: {exc}", SERVER) from None
            return self._transcriber

    async def run(self, work: Any, *args: Any, **kwargs: Any) -> Any:
        if self._waiting >= MAX_WAITING + 1:
            raise APIError(
                503, "Busy: other files are being transcribed; retry in a moment.", SERVER,
                None, "busy",
            )  # fmt: skip
        self._waiting += 1
        try:
            async with self._turn:
                return await asyncio.to_thread(work, *args, **kwargs)
        finally:
            self._waiting -= 1


def _bounded(request: Request, limit: int) -> Request:
    """``request`` whose body is refused once more than ``limit`` bytes have come."""
    received = 0
    receive = request.receive

    async def counted() -> Any:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _TooLarge
        return message

    return Request(request.scope, counted)


def transcriptions_route(hearing: Hearing):  # noqa: ANN201 - a handler
    async def transcriptions(request: Request) -> Response:
        try:
            return await _transcribe(hearing, request)
        except APIError as exc:
            return exc.response()
        except ClientDisconnect:
            return Response(status_code=400)

    return transcriptions


async def _transcribe(hearing: Hearing, request: Request) -> Response:
    too_large = APIError(
        413,
        f"The upload is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB.",
        param="file",
        code="file_too_large",
    )
    kind = request.headers.get("content-type", "")
    if not kind.lower().startswith("multipart/form-data"):
        raise invalid("Send the file as multipart/form-data, in a field named `file`.", "file")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:
        raise too_large
    try:
        form = await _bounded(request, MAX_UPLOAD_BYTES).form(
            max_files=1, max_fields=32, max_part_size=64 * 1024
        )
    except _TooLarge:
        raise too_large from None
    except HTTPException as exc:  # python-multipart's complaint, as Starlette words it
        raise invalid(f"The multipart body is malformed: {exc.detail}") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid("`file` is missing: upload the audio in a field named `file`.", "file")
        transcription_model(form.get("model", TRANSCRIPTION_MODEL))
        fmt = _field(form, "response_format") or "json"
        if fmt not in RESPONSE_FORMATS:
            raise invalid(
                f"`response_format` must be one of {', '.join(RESPONSE_FORMATS)}.",
                "response_format",
            )
        language = _field(form, "language")
        if language is not None and not (language.isalpha() and 2 <= len(language) <= 3):
            raise invalid("`language` must be an ISO 639-1 code such as en.", "language")
        prompt = _field(form, "prompt")
        if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
            raise invalid(f"`prompt` is longer than {MAX_PROMPT_CHARS} characters.", "prompt")
        temperature = _temperature(_field(form, "temperature"))
        granularities = [
            str(g) for g in form.getlist("timestamp_granularities[]") or
            form.getlist("timestamp_granularities")
        ]  # fmt: skip
        if any(g not in GRANULARITIES for g in granularities):
            raise invalid(
                "`timestamp_granularities` may hold segment and word.", "timestamp_granularities"
            )
        if granularities and fmt != "verbose_json":
            raise invalid(
                "`timestamp_granularities` needs response_format verbose_json.",
                "timestamp_granularities",
            )
        if (_field(form, "stream") or "false").lower() == "true":
            raise invalid("Streamed transcription is not supported: leave `stream` out.", "stream")
        from voicecli.listen.asr import decode_audio

        name = (upload.filename or "the upload")[:80]
        try:
            decoded = await hearing.run(
                decode_audio, upload.file, upload.size or 0, hearing.options.max_seconds, name
            )
        except VoiceCliError as exc:
            raise invalid(str(exc), "file", "invalid_file_format") from None
        transcriber = await hearing.transcriber()
        try:
            result = await hearing.run(
                transcriber.transcribe_file,
                decoded.audio,
                language=language.lower() if language else None,
                prompt=prompt,
                temperature=temperature,
                words="word" in granularities,
            )
        except VoiceCliError as exc:
            raise invalid(str(exc), "language") from None
        if decoded.cut:
            log.info(
                "%s is longer than max_transcribe_seconds: its first %g s transcribed",
                name,
                hearing.options.max_seconds,
            )
        return _answer(result, fmt, granularities)
    finally:
        await form.close()


def _field(form: Any, name: str) -> str | None:
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"`{name}` must be a plain form field, not a file.", name)
    return value.strip() or None


def _temperature(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        temperature = float(value)
    except ValueError:
        raise invalid("`temperature` must be a number from 0 to 1.", "temperature") from None
    if not 0.0 <= temperature <= 1.0:
        raise invalid("`temperature` must be a number from 0 to 1.", "temperature")
    return temperature


def _answer(result: Any, fmt: str, granularities: list[str]) -> Response:
    match fmt:
        case "text":
            return PlainTextResponse(result.text + "\n")
        case "srt" | "vtt":
            return PlainTextResponse(
                _captions(result.segments, fmt),
                media_type="text/vtt" if fmt == "vtt" else "application/x-subrip",
            )
        case "verbose_json":
            body: dict[str, Any] = {
                "task": "transcribe",
                "language": result.language,
                "duration": round(result.seconds, 3),
                "text": result.text,
            }
            if not granularities or "segment" in granularities:
                body["segments"] = [
                    {
                        "id": n,
                        "seek": 0,
                        "start": s.start,
                        "end": s.end,
                        "text": s.text,
                        "tokens": list(s.tokens),
                        "temperature": s.temperature,
                        "avg_logprob": s.avg_logprob,
                        "compression_ratio": s.compression_ratio,
                        "no_speech_prob": s.no_speech_prob,
                    }
                    for n, s in enumerate(result.segments)
                ]
            if "word" in granularities:
                body["words"] = [
                    {"word": w.text, "start": w.start, "end": w.end} for w in result.words
                ]
            return JSONResponse(body)
        case _:
            return JSONResponse({"text": result.text})


def _captions(segments: list[Any], fmt: str) -> str:
    import webvtt
    from webvtt.models import Timestamp

    captions = [
        webvtt.Caption(
            str(Timestamp.from_seconds(s.start)),
            str(Timestamp.from_seconds(max(s.end, s.start + 0.001))),
            s.text,
        )
        for s in segments
        if s.text
    ]
    out = io.StringIO()
    webvtt.WebVTT(captions=captions).write(out, format=fmt)
    return out.getvalue() + "\n"
