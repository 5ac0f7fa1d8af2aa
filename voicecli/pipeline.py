"""Wires one turn: text source -> segmenter -> synthesizer thread -> audio sink.

    source thread:  text pieces -> Segmenter -> speakable() -> sentence queue
    synth thread:   sentence queue -> Synthesizer.stream() -> sink (ring buffer)
    audio callback: ring buffer -> device (audio.player)

Backpressure: the sentence queue holds at most ``max_sentences_ahead``
sentences, and the ring buffer at most ``max_audio_ahead`` seconds; a full
stage blocks the one before it. One cancel token stops all three: the source
closes its HTTP stream, queued sentences are dropped, the synthesizer stops at
its next chunk, and the sink is flushed from the thread that cancelled, so the
device goes quiet at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.normalize import speakable
from voicecli.segment import Segmenter
from voicecli.timeline import (
    INTERRUPTED,
    PLAYED,
    QUEUED,
    SENTENCE_READY,
    TEXT_DONE,
    TURN_END,
    UNDERRUN,
    Timeline,
)
from voicecli.tts import Sentence, Synthesizer

log = logging.getLogger(__name__)

_END = object()
POLL = 0.05  # seconds between cancel checks in blocking waits


class AudioSink(Protocol):
    def set_hooks(
        self,
        on_played: Callable[[int, float], None] | None,
        on_underrun: Callable[[float], None] | None,
    ) -> None: ...
    def begin_turn(self) -> None: ...
    def begin_sentence(self, sentence: int) -> None: ...
    def write(self, samples: np.ndarray, cancel: CancelToken) -> object: ...
    def end_sentence(self) -> None: ...
    def drain(self, cancel: CancelToken) -> bool: ...
    def flush(self) -> object: ...
    def close(self) -> None: ...


@dataclass
class TurnOptions:
    buffered: bool = False  # release text only once the source is complete
    fast_first: bool = False  # cut the first chunk early at a clause boundary
    newline_is_boundary: bool = False  # piped text: every line is a unit
    code: str = "placeholder"  # how code is spoken
    max_sentences_ahead: int = 32


@dataclass
class TurnResult:
    timeline: Timeline
    text: str  # everything the source produced, as displayed
    sentences: list[Sentence] = field(default_factory=list)
    interrupted: bool = False
    error: VoiceCliError | None = None
    heard: str = ""  # the displayed text of what reached the listener


class SpeechPipeline:
    """Runs turns through one synthesizer and one sink, reused across turns."""

    def __init__(self, synth: Synthesizer, sink: AudioSink) -> None:
        self.synth = synth
        self.sink = sink

    def run(
        self,
        source: Iterable[str],
        options: TurnOptions,
        *,
        cancel: CancelToken,
        timeline: Timeline,
        on_text: Callable[[str], None] | None = None,
    ) -> TurnResult:
        result = TurnResult(timeline, "")
        sentences: queue.Queue = queue.Queue(maxsize=options.max_sentences_ahead)
        pieces: list[str] = []
        errors: list[VoiceCliError] = []
        self.sink.begin_turn()
        self.sink.set_hooks(
            lambda s, t: timeline.mark_once(PLAYED, s, t), lambda t: timeline.mark(UNDERRUN, t=t)
        )
        cancel.on_cancel(self.sink.flush)

        def produce() -> None:
            try:
                self._produce(source, options, sentences, pieces, result, cancel, timeline, on_text)
            except VoiceCliError as exc:
                errors.append(exc)
            except Exception as exc:  # noqa: BLE001 - report, and stop the other stages
                log.exception("text source failed")
                errors.append(VoiceCliError(f"Reading the text failed: {exc}"))
                cancel.cancel("error")
            finally:
                _put(sentences, _END, cancel)

        def consume() -> None:
            try:
                self._consume(sentences, cancel, timeline)
            except VoiceCliError as exc:
                errors.append(exc)
                cancel.cancel("error")
            except Exception as exc:  # noqa: BLE001
                log.exception("synthesis failed")
                errors.append(VoiceCliError(f"Speech synthesis failed: {exc}"))
                cancel.cancel("error")

        producer = threading.Thread(target=produce, name="voicecli-source", daemon=True)
        consumer = threading.Thread(target=consume, name="voicecli-synth", daemon=True)
        producer.start()
        consumer.start()
        try:
            while consumer.is_alive():
                consumer.join(POLL)
                if cancel.cancelled:
                    # The synth may sit in a forward pass for a while: its output is
                    # discarded, so the turn need not wait for it.
                    consumer.join(0.2)
                    break
        except KeyboardInterrupt:
            cancel.cancel("ctrl-c")
            raise
        finally:
            if cancel.cancelled and cancel.reason != "error":
                timeline.mark(INTERRUPTED, reason=cancel.reason)
                result.interrupted = True
            timeline.mark(TURN_END)
        producer.join(0.2 if cancel.cancelled else None)
        result.text = "".join(pieces)
        result.error = errors[0] if errors else None
        result.heard = self._heard(result)
        return result

    # --- source thread --------------------------------------------------------
    def _produce(
        self,
        source: Iterable[str],
        options: TurnOptions,
        out: queue.Queue,
        pieces: list[str],
        result: TurnResult,
        cancel: CancelToken,
        timeline: Timeline,
        on_text: Callable[[str], None] | None,
    ) -> None:
        segmenter = Segmenter(
            fast_first=options.fast_first, newline_is_boundary=options.newline_is_boundary
        )

        def release(displays: list[str]) -> None:
            for display in displays:
                spoken = speakable(display, code=options.code)
                if not spoken.strip():
                    continue  # only markup: nothing to say
                sentence = Sentence(len(result.sentences), spoken, display)
                result.sentences.append(sentence)
                timeline.mark(SENTENCE_READY, sentence.index, text=display)
                if not _put(out, sentence, cancel):
                    return

        try:
            for piece in source:
                if cancel.cancelled:
                    return
                pieces.append(piece)
                if on_text is not None:
                    on_text(piece)
                if not options.buffered:
                    release(segmenter.feed(piece))
        finally:
            if not cancel.cancelled:
                timeline.mark(TEXT_DONE)
                if options.buffered:
                    release(segmenter.feed("".join(pieces)))
                release(segmenter.flush())

    # --- synth thread ---------------------------------------------------------
    def _consume(self, sentences: queue.Queue, cancel: CancelToken, timeline: Timeline) -> None:
        current: int | None = None
        for chunk in self.synth.stream(_take(sentences, cancel), cancel, timeline):
            if cancel.cancelled:
                return
            if chunk.sentence != current:
                if current is not None:
                    self.sink.end_sentence()
                current = chunk.sentence
                self.sink.begin_sentence(current)
            if chunk.samples.size:
                timeline.mark_once(QUEUED, chunk.sentence)
                self.sink.write(chunk.samples, cancel)
            if chunk.last:
                self.sink.end_sentence()
                current = None
        if not cancel.cancelled:
            self.sink.drain(cancel)

    def _heard(self, result: TurnResult) -> str:
        """The displayed text that reached the listener, from the play position."""
        by_index = {s.index: s for s in result.sentences}
        spans_of = getattr(self.sink, "spans", None)
        heard_position = getattr(self.sink, "heard_position", None)
        if spans_of is None or heard_position is None:
            if result.interrupted:
                played = {e.sentence for e in result.timeline.events if e.name == PLAYED}
                return " ".join(by_index[i].display for i in sorted(played) if i in by_index)
            return " ".join(s.display for s in result.sentences)
        position = heard_position()
        heard: list[str] = []
        for span in spans_of():
            sentence = by_index.get(span.sentence)
            # A skipped sentence was heard only up to the skip.
            limit = position if span.skipped_at is None else min(position, span.skipped_at)
            if sentence is None or span.start >= limit:
                continue
            if span.end is not None and span.end <= limit:
                heard.append(sentence.display)
                continue
            if span.end is None or span.end <= span.start:
                continue
            heard.append(
                _leading_words(sentence.display, (limit - span.start) / (span.end - span.start))
            )
        return " ".join(h for h in heard if h)


def _leading_words(text: str, fraction: float) -> str:
    """The whole words within the first ``fraction`` of ``text``'s speaking time.

    Speaking time is taken as proportional to characters, not words: a long word takes
    longer to say than a short one. A word cut in the middle was not heard.
    """
    words = text.split()
    budget = fraction * sum(len(w) + 1 for w in words)
    kept: list[str] = []
    for word in words:
        budget -= len(word) + 1
        if budget < 0:
            break
        kept.append(word)
    return " ".join(kept)


def _put(q: queue.Queue, item: object, cancel: CancelToken) -> bool:
    """Blocking put that gives up when the turn is cancelled (the END marker always goes in)."""
    while True:
        try:
            q.put(item, timeout=POLL)
            return True
        except queue.Full:
            if cancel.cancelled:
                if item is _END:
                    _drop_all(q)
                    continue
                return False


def _drop_all(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


def _take(q: queue.Queue, cancel: CancelToken) -> Iterator[Sentence]:
    while True:
        try:
            item = q.get(timeout=POLL)
        except queue.Empty:
            if cancel.cancelled:
                return
            continue
        if item is _END or cancel.cancelled:
            return
        yield item
