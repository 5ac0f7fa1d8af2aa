"""One turn over voicecli's speech protocol, as a client sees it, whatever carries it
(a WebSocket, SageMaker's bidirectional stream, or one response stream per sentence):
request ids for sentences, the in-flight window, timeline marks and replies."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

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
    if code == p.OVERLOADED:
        return (
            f"The speech server at {where} is overloaded ({text}). Retry later, or add "
            "instances to the endpoint."
        )
    if code == p.TEXT_TOO_LONG:
        return f"The speech server at {where} refused a sentence as too long: {text}."
    if code in (p.BAD_VERSION, p.UNKNOWN_TYPE, p.BAD_FRAME, p.BAD_JSON):
        return (
            f"The speech server at {where} does not understand this client ({code}: "
            f"{text}). Use the same voicecli version on both sides."
        )
    return f"The speech server at {where} failed: {text} ({code})."


class TurnState:
    """One turn over the protocol: request ids for sentences, timeline marks, replies.

    Shared by every transport that carries voicecli's protocol.
    """

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
        if isinstance(message, p.AudioFrame):
            with self._lock:
                index = self._sentences.get(message.request_id)
            if index is None:  # audio of a cancelled request, already written off
                return None
            self.timeline.mark_once(SYNTH_FIRST_CHUNK, index)
            samples = message.samples()
            offset = self._offsets.get(index, 0)
            self._offsets[index] = end = offset + len(samples)
            mine, self._words[index] = split_words(self._words.get(index, []), end)
            return AudioChunk(index, samples, offset, words=mine)
        kind = message.get("type")
        if kind == p.WORDS:
            rid = message.get("request_id")
            with self._lock:
                index = self._sentences.get(rid) if isinstance(rid, str) else None
            words = p.decode_words(message)
            if index is not None and words is not None:
                self._words.setdefault(index, []).extend(Word(*w) for w in words)
            elif index is not None:
                log.debug("ignoring word timings in a format this client does not read")
            return None
        if kind == p.SENTENCE_DONE:
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
        if kind == p.ERROR:
            self._finish(message.get("request_id"))
            raise VoiceCliError(explain_error(message, self.where))
        if kind == p.DONE:
            self.done = True
            return None
        log.debug("ignoring server message of type %r", kind)
        return None

    def _finish(self, request_id: Any) -> int | None:
        with self._lock:
            index = self._sentences.pop(request_id, None) if isinstance(request_id, str) else None
        if index is not None:
            self._slots.release()
        return index


class RemoteSynthesizer:
    """What the remote backends share: the voice and speed sent with every sentence.

    The server synthesizes, so nothing loads here; a bad voice name is caught by its
    syntax now and by the server's voice set on the first sentence.
    """

    sample_rate = p.SAMPLE_RATE
    # The server sends each sentence's audio in frames as it is synthesized, and its
    # words' timings where its voice's language has them (English).
    capabilities = SynthCapabilities(streams_within_sentence=True, word_timings=True)

    def __init__(self, voice: str | None, speed: float | None) -> None:
        self.voice: str | None = None
        self.speed: float | None = None
        if voice is not None:
            self.set_voice(voice)
        if speed is not None:
            self.set_speed(speed)

    def set_voice(self, voice: str) -> None:
        self.voice = str(VoiceSpec.parse(voice))

    def set_speed(self, speed: float) -> None:
        self.speed = check_speed(speed)

    def warm_up(self) -> None:
        """Nothing to warm: the server's model is loaded and kept warm by the server."""
