"""``POST /v1/audio/speech``, as OpenAI's clients call it: the reply streams as the
scheduler makes it, encoded on the way (``stream_format`` ``audio``: the bytes of
``response_format``; ``sse``: ``speech.audio.delta`` events of them in base64, then
``speech.audio.done``), so its first bytes follow the first phrase, not the whole text.

The text goes to the scheduler as speak jobs of one listener (its first sentence alone,
so that its phonemes are ready soonest; the rest in pieces up to the speak limit), under
the same admission, shares and limits as every other client. A client that hangs up
leaves, and its synthesis stops at the worker's next step. ``instructions`` is accepted
and ignored: Kokoro takes no direction.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from voicecli import protocol as p
from voicecli.audio.encode import AudioFormat, StreamEncoder
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED
from voicecli.server.guard import peer_of
from voicecli.server.http import read_body
from voicecli.server.openai_api.api_error import SERVER, APIError, invalid
from voicecli.server.openai_api.catalog import kokoro_voice, speech_model
from voicecli.server.outbox import OutAudio, Outbox
from voicecli.server.requests import parse_speak, split_sentences
from voicecli.server.scheduler import Job, Listener, Scheduler
from voicecli.text import why_bad
from voicecli.tts.voices import VoiceSpec, check_voice_name

log = logging.getLogger(__name__)

MAX_INPUT_CHARS = 4096  # OpenAI's own limit for ``input``
STREAM_FORMATS = ("audio", "sse")


@dataclass(frozen=True)
class SpeechRequest:
    input: str
    voice: str
    format: AudioFormat
    speed: float
    sse: bool
    words: bool  # voicecli's own: word timings as ``speech.audio.words`` events (sse)


def parse_request(body: bytes, voices: list[str], default_voice: str) -> SpeechRequest:
    """The fields of a speech request, each checked against what OpenAI accepts and what
    this model has; an APIError naming the field otherwise."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise invalid("The body is not valid JSON: send a JSON object.") from None
    if not isinstance(message, dict):
        raise invalid("The body must be a JSON object.")
    speech_model(message.get("model"))
    text = message.get("input")
    if not isinstance(text, str) or not text.strip():
        raise invalid("`input` must be a non-empty string: the text to speak.", "input")
    why = why_bad(text)
    if why is not None:
        raise invalid(f"`input` is {why}.", "input")
    if len(text) > MAX_INPUT_CHARS:
        raise invalid(
            f"`input` has {len(text)} characters; the limit is {MAX_INPUT_CHARS}.",
            "input",
            "string_above_max_length",
        )
    voice = message.get("voice", default_voice)
    if isinstance(voice, dict):  # the SDK's {"id": ...} form of a custom voice
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice.strip() or len(voice) > 200:
        raise invalid("`voice` must be a voice name: Kokoro's, a blend, or OpenAI's.", "voice")
    voice = kokoro_voice(voice.strip(), voices, default_voice)
    try:
        for name in VoiceSpec.parse(voice).names:
            check_voice_name(name, voices)
    except VoiceCliError as exc:
        raise invalid(str(exc), "voice") from None
    fmt = message.get("response_format", AudioFormat.MP3.value)
    try:
        audio_format = AudioFormat(fmt)
    except ValueError:
        raise invalid(
            f"`response_format` {str(fmt)[:20]!r} is not one of "
            f"{', '.join(f.value for f in AudioFormat)}.",
            "response_format",
        ) from None
    speed = message.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float):
        raise invalid("`speed` must be a number.", "speed")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise invalid(
            f"`speed` {speed:g} is out of Kokoro's range, {MIN_SPEED} to {MAX_SPEED}.", "speed"
        )
    stream_format = message.get("stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise invalid("`stream_format` must be audio or sse.", "stream_format")
    words = message.get("words", False)
    if not isinstance(words, bool):
        raise invalid("`words` must be true or false.", "words")
    return SpeechRequest(text, voice, audio_format, float(speed), stream_format == "sse", words)


def pieces(text: str, limit: int) -> list[str]:
    """``text`` as the texts of speak jobs: its first sentence alone, then sentences
    together up to ``limit`` characters (one longer than that is cut at a space)."""
    sentences: list[str] = []
    for sentence in split_sentences(text):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > 0 else limit
            sentences.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            sentences.append(sentence)
    out = sentences[:1]
    for sentence in sentences[1:]:
        if len(out) > 1 and len(out[-1]) + 1 + len(sentence) <= limit:
            out[-1] = f"{out[-1]} {sentence}"
        else:
            out.append(sentence)
    return out


def speech_route(scheduler: Scheduler, default_voice: str):  # noqa: ANN201 - a handler
    limits = scheduler.limits

    async def speech(request: Request) -> Response:
        try:
            if not scheduler.ready.is_set():
                if scheduler.load_error is not None:
                    raise APIError(500, f"The model failed to load: {scheduler.load_error}", SERVER)
                raise APIError(503, "The model is loading: retry in a moment.", SERVER)
            try:
                body = await read_body(request, 64 * 1024, limits.body_timeout)
            except p.ProtocolError as exc:
                raise APIError.of(exc) from None
            voices = scheduler.model.voices() if scheduler.model is not None else []
            asked = parse_request(body, voices, default_voice)
            return _start(scheduler, request, asked)
        except APIError as exc:
            return exc.response()
        except ClientDisconnect:
            return Response(status_code=400)

    return speech


def _start(scheduler: Scheduler, request: Request, asked: SpeechRequest) -> Response:
    limits = scheduler.limits
    base = uuid.uuid4().hex[:12]
    messages = [
        {"request_id": f"{base}-{k}", "text": text, "voice": asked.voice, "speed": asked.speed}
        | ({"words": p.WORDS_FORMAT} if asked.words else {})
        for k, text in enumerate(pieces(asked.input, limits.max_text_chars))
    ]
    outbox = Outbox(limits, asyncio.get_running_loop())
    listener = scheduler.listener(outbox, *peer_of(request.scope))
    jobs: list[Job] = []
    try:
        for message in messages:
            try:
                request_id, text, voice, speed, words = parse_speak(message, limits)
            except p.ProtocolError as exc:
                raise APIError.of(exc, "input") from None
            job = Job(request_id, text, voice, speed, outbox, words=words)
            try:
                scheduler.submit(listener, job)
            except p.ProtocolError as exc:
                raise APIError.of(exc) from None
            jobs.append(job)
    except APIError:
        scheduler.leave(listener)
        raise
    stream = _Stream(scheduler, listener, outbox, jobs, asked)
    if asked.sse:
        from sse_starlette import EventSourceResponse

        return EventSourceResponse(stream.events())
    return StreamingResponse(stream.audio(), media_type=stream.encoder.media_type)


class _Stream:
    """One request's audio from its outbox, encoded; it leaves the scheduler when done,
    failed or hung up on (Starlette stops the generator when the client goes)."""

    def __init__(
        self,
        scheduler: Scheduler,
        listener: Listener,
        outbox: Outbox,
        jobs: list[Job],
        asked: SpeechRequest,
    ) -> None:
        self.scheduler = scheduler
        self.listener = listener
        self.outbox = outbox
        self.ids = {job.request_id for job in jobs}
        self.encoder = StreamEncoder(asked.format, p.SAMPLE_RATE)
        self.words = asked.words
        self.input_words = len(asked.input.split())
        self.failure: str | None = None

    async def _items(self) -> AsyncIterator[bytes | list[dict[str, Any]]]:
        """Encoded audio (and, if asked for, word timings) until every job has ended."""
        left = set(self.ids)
        offsets: dict[str, int] = {}  # samples before each job's, in the whole stream
        written = 0
        try:
            while left:
                item = await self.outbox.get()
                match item:
                    case None:
                        return
                    case OutAudio(request_id=rid, frame=frame) if rid in self.ids:
                        match p.decode_server_frame(frame):
                            case p.AudioFrame() as audio:
                                samples = audio.samples()
                                offsets.setdefault(rid, written)
                                written += samples.size
                                data = self.encoder.encode(samples)
                                if data:
                                    yield data
                    case {"type": p.WORDS, "request_id": rid} if self.words and rid in left:
                        timed = p.decode_words(item) or []
                        start = offsets.get(rid, written)
                        yield [
                            {
                                "word": text,
                                "start": round((start + a) / p.SAMPLE_RATE, 3),
                                "end": round((start + b) / p.SAMPLE_RATE, 3),
                            }
                            for text, a, b in timed
                        ]
                    case {"type": p.SENTENCE_DONE, "request_id": rid} if rid in left:
                        left.discard(rid)
                    case {"type": p.ERROR, "request_id": rid} if rid in left:
                        self.failure = str(item.get("message", "synthesis failed"))
                        log.warning("speech request ended early: %s", self.failure)
                        return
                    case _:
                        pass
            tail = self.encoder.finish()
            if tail:
                yield tail
        finally:
            self.encoder.close()
            self.scheduler.leave(self.listener)

    async def audio(self) -> AsyncIterator[bytes]:
        async for item in self._items():
            match item:
                case bytes():
                    yield item

    async def events(self) -> AsyncIterator[Any]:
        async for item in self._items():
            match item:
                case bytes():
                    delta = {"type": "speech.audio.delta", "audio": base64.b64encode(item).decode()}
                    yield _event(delta)
                case list():
                    yield _event({"type": "speech.audio.words", "words": item})
        if self.failure is not None:
            error = APIError(500, self.failure, SERVER, None, p.SYNTHESIS_FAILED)
            yield _event({"type": "error", **error.body()})
            return
        usage = {"input_tokens": self.input_words, "output_tokens": 0}
        usage["total_tokens"] = usage["input_tokens"]
        yield _event({"type": "speech.audio.done", "usage": usage})


def _event(data: dict[str, Any]) -> Any:
    from sse_starlette import ServerSentEvent

    return ServerSentEvent(data=json.dumps(data, separators=(",", ":")))
