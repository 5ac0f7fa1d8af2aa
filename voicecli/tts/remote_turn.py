"""One turn over voicecli's speech protocol, as a client sees it, whatever carries it:
the ``Transport`` (a WebSocket, SageMaker's bidirectional stream, or one response stream
per sentence) is injected into the one loop that runs it (``run_turn``). A sender thread
sends ``speak`` for each sentence as soon as the sentence iterator yields it, while the
caller's thread receives audio: the next sentence is never held back until the previous
one's audio has arrived, beyond the in-flight window."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from voicecli import protocol as p
from voicecli.cancel import POLL, CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import (
    AudioChunk,
    Sentence,
    SynthCapabilities,
    Word,
    check_speed,
    split_words,
)
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts.voices import VoiceSpec

log = logging.getLogger(__name__)


def explain_error(message: dict[str, Any], where: str) -> str:
    code = message.get("code", "?")
    text = message.get("message", "")
    if code == p.BUSY:
        return f"The speech server at {where} is {text}. Or add instances to the endpoint."
    if code == p.OVERLOADED:
        return f"The speech server at {where} is overloaded: {text}."
    if code == p.TEXT_TOO_LONG:
        return f"The speech server at {where} refused a sentence as too long: {text}."
    if code in (p.BAD_VERSION, p.UNKNOWN_TYPE, p.BAD_FRAME, p.BAD_JSON):
        return (
            f"The speech server at {where} does not understand this client ({code}: "
            f"{text}). Use the same voicecli version on both sides."
        )
    return f"The speech server at {where} failed: {text} ({code})."


class ServerBusy(VoiceCliError):
    """The server speaks for as many listeners as it can and refused this one a place."""


class RemoteTurn:
    """One turn over the protocol: request ids for sentences, the in-flight window,
    timeline marks and replies."""

    def __init__(
        self, timeline: Timeline, where: str, max_in_flight: int = p.MAX_IN_FLIGHT
    ) -> None:
        self.timeline = timeline
        self.where = where
        self._prefix = uuid.uuid4().hex[:8]
        self._sentences: dict[str, int] = {}
        self._words: dict[int, list[Word]] = {}  # timed, and not yet in a chunk
        self._offsets: dict[int, int] = {}  # samples of each sentence received so far
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_in_flight)
        self.done = False

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._sentences)

    def wait_for_slot(self, cancel: CancelToken) -> bool:
        """Block while ``max_in_flight`` sentences are unanswered; False once cancelled."""
        while not self._slots.acquire(timeout=POLL):
            if cancel.cancelled:
                return False
        if cancel.cancelled:
            self._slots.release()
            return False
        return True

    def speak(
        self,
        sentence: Sentence,
        voice: str | None,
        speed: float | None,
    ) -> dict[str, Any]:
        """The speak message for ``sentence``; marks SYNTH_START as it is about to go out."""
        request_id = f"{self._prefix}-{sentence.index}"
        with self._lock:
            self._sentences[request_id] = sentence.index
        self.timeline.mark(SYNTH_START, sentence.index)
        fields: dict[str, Any] = {
            "request_id": request_id,
            "text": sentence.text,
            "words": p.WORDS_FORMAT,
        }
        if voice is not None:
            fields["voice"] = voice
        if speed is not None:
            fields["speed"] = speed
        return p.control(p.SPEAK, **fields)

    def requests(
        self,
        sentences: Iterable[Sentence],
        cancel: CancelToken,
        voice: str | None,
        speed: float | None,
    ) -> Iterator[dict[str, Any]]:
        """The speak message for each sentence with words, as soon as a slot is free.

        Stops early once ``cancel`` fires; callers check it before sending ``end``.
        """
        for sentence in sentences:
            if not sentence.text.strip():
                continue
            if not self.wait_for_slot(cancel):
                return
            yield self.speak(sentence, voice, speed)

    def handle(self, message: dict[str, Any] | p.AudioFrame) -> AudioChunk | None:
        """The chunk to yield for a server message, if any; raises VoiceCliError on `error`."""
        match message:
            case p.AudioFrame(request_id=request_id):
                with self._lock:
                    index = self._sentences.get(request_id)
                if index is None:  # audio of a cancelled request, already written off
                    return None
                self.timeline.mark_once(SYNTH_FIRST_CHUNK, index)
                samples = message.samples()
                offset = self._offsets.get(index, 0)
                self._offsets[index] = end = offset + len(samples)
                mine, self._words[index] = split_words(self._words.get(index, []), end)
                return AudioChunk(index, samples, offset, words=mine)
            case {"type": p.WORDS}:
                rid = message.get("request_id")
                with self._lock:
                    index = self._sentences.get(rid) if isinstance(rid, str) else None
                words = p.decode_words(message)
                if index is not None and words is not None:
                    self._words.setdefault(index, []).extend(Word(*w) for w in words)
                elif index is not None:
                    log.debug("ignoring word timings in a format this client does not read")
                return None
            case {"type": p.SENTENCE_DONE}:
                index = self._finish(message.get("request_id"))
                if index is None or message.get("cancelled"):
                    return None
                if message.get("truncated") is True:
                    log.warning(
                        "The speech server at %s cut sentence %d short: its speech ran longer "
                        "than its text can take to say.",
                        self.where,
                        index + 1,
                    )
                self.timeline.mark(SYNTH_END, index)
                offset = self._offsets.pop(index, 0)
                words = tuple(self._words.pop(index, ()))
                return AudioChunk(index, np.zeros(0, np.float32), offset, last=True, words=words)
            case {"type": p.ERROR, "code": p.BUSY}:
                self._finish(message.get("request_id"))
                raise ServerBusy(explain_error(message, self.where))
            case {"type": p.ERROR}:
                self._finish(message.get("request_id"))
                raise VoiceCliError(explain_error(message, self.where))
            case {"type": p.DONE}:
                self.done = True
                return None
            case _:
                log.debug("ignoring server message of type %r", message.get("type"))
                return None

    def _finish(self, request_id: Any) -> int | None:
        with self._lock:
            index = self._sentences.pop(request_id, None) if isinstance(request_id, str) else None
        if index is not None:
            self._slots.release()
        return index


class TransportClosed(Exception):
    """The other side is gone: a send that cannot be made (the receiver says why)."""


class Transport(Protocol):
    """How one turn's messages travel."""

    def send(self, message: dict[str, Any]) -> None:
        """Send a control message (from the sender thread); TransportClosed if the
        connection is gone."""
        ...

    def receive(self, timeout: float) -> str | bytes | None:
        """The server's next frame, or None if none came within ``timeout``. Raises
        VoiceCliError (``ConnectionLost`` where the connection broke) for the rest."""
        ...

    def cancel(self) -> None:
        """Stop the server's work on this turn (from any thread, at most once)."""
        ...

    def end(self) -> None:
        """The turn is over: release what the transport holds for it."""
        ...


class ConnectionLost(VoiceCliError):
    """The speech server could not be reached, its connection broke mid-turn, or it
    stopped answering (as opposed to an error it replied with): a caller with another way
    to speak may use it."""


def run_turn(
    transport: Transport,
    sentences: Iterable[Sentence],
    cancel: CancelToken,
    timeline: Timeline,
    *,
    where: str,
    voice: str | None,
    speed: float | None,
    max_in_flight: int = p.MAX_IN_FLIGHT,
    read_timeout: float = 60.0,
) -> Iterator[AudioChunk]:
    """The audio of ``sentences``, over ``transport``, as it comes back. ``read_timeout``:
    silence allowed while sentences are unanswered."""
    turn = RemoteTurn(timeline, where, max_in_flight)
    failure: list[BaseException] = []
    cancelled_once = threading.Lock()

    def send_cancel() -> None:
        if cancelled_once.acquire(blocking=False):
            transport.cancel()

    def send_all() -> None:
        try:
            for message in turn.requests(sentences, cancel, voice, speed):
                transport.send(message)
            if not cancel.cancelled:
                transport.send(p.control(p.END))
        except TransportClosed:
            pass  # the receiver reports why
        except BaseException as exc:  # noqa: BLE001 - e.g. the LLM source failed: re-raised
            failure.append(exc)

    if cancel.cancelled:
        transport.end()
        return
    threading.Thread(target=send_all, name="voicecli-remote-send", daemon=True).start()
    cancel.on_cancel(send_cancel)
    quiet_since = time.monotonic()
    try:
        while not turn.done:
            if cancel.cancelled:
                return
            try:
                data = transport.receive(POLL)
            except VoiceCliError:
                if cancel.cancelled:
                    return
                if failure:
                    raise failure[0] from None
                raise
            if cancel.cancelled:
                return
            if data is None:
                if failure:
                    raise failure[0] from None
                if turn.in_flight == 0:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > read_timeout:
                    raise ConnectionLost(
                        f"The speech server at {where} sent nothing for {read_timeout:g} s. "
                        "It may be overloaded or stuck."
                    )
                continue
            quiet_since = time.monotonic()
            try:
                message = p.decode_server_frame(data)
            except p.ProtocolError as exc:
                raise VoiceCliError(
                    explain_error({"code": exc.code, "message": exc.message}, where)
                ) from None
            chunk = turn.handle(message)
            if chunk is not None and not cancel.cancelled:
                yield chunk
    finally:
        if turn.in_flight and not cancel.cancelled:
            send_cancel()  # the consumer stopped early or failed: free the server
        transport.end()


class RemoteSynthesizer(ABC):
    """A synthesizer on the far side of a ``Transport``: the voice and speed sent with
    every sentence, and the turn run by ``run_turn``. The server synthesizes, so nothing
    loads here; a bad voice name is caught by its syntax now and by the server's voice
    set on the first sentence."""

    sample_rate = p.SAMPLE_RATE
    # The server sends each sentence's audio in frames as it is synthesized, and its
    # words' timings where its voice's language has them (English).
    capabilities = SynthCapabilities(streams_within_sentence=True, word_timings=True)
    where: str  # the server, for messages
    read_timeout: float = 60.0  # silence allowed while sentences are unanswered

    def __init__(self, voice: str | None, speed: float | None) -> None:
        self.voice: str | None = None
        self.speed: float | None = None
        if voice is not None:
            self.set_voice(voice)
        if speed is not None:
            self.set_speed(speed)

    @abstractmethod
    def open_turn(self) -> tuple[Transport, int]:
        """A transport for one turn, and how many sentences it may carry unanswered."""

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        if cancel.cancelled:
            return
        transport, window = self.open_turn()
        yield from run_turn(
            transport,
            sentences,
            cancel,
            timeline,
            where=self.where,
            voice=self.voice,
            speed=self.speed,
            max_in_flight=window,
            read_timeout=self.read_timeout,
        )

    def set_voice(self, voice: str) -> None:
        self.voice = str(VoiceSpec.parse(voice))

    def set_speed(self, speed: float) -> None:
        self.speed = check_speed(speed)

    def warm_up(self) -> None:  # noqa: B027 - nothing to do, by design
        """Nothing to warm: the server's model is loaded and kept warm by the server."""
