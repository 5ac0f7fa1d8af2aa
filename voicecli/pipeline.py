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
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from voicecli.cancel import POLL, CancelToken
from voicecli.config import CodeReading
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioSink, Sentence, Synthesizer
from voicecli.heard import heard_text
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

log = logging.getLogger(__name__)

_END = object()
# An interrupted turn returns at once; its synth thread may still be in a forward pass
# and is joined on close, this long at most (a second Ctrl-C cuts it short).
CLOSE_TIMEOUT = 15.0


@dataclass
class TurnOptions:
    buffered: bool = False  # release text only once the source is complete
    fast_first: bool = False  # cut the first chunk early at a clause boundary
    newline_is_boundary: bool = False  # piped text: every line is a unit
    code: CodeReading = CodeReading.PLACEHOLDER
    max_sentences_ahead: int = 32


@dataclass
class TurnResult:
    timeline: Timeline
    text: str  # everything the source produced, as displayed
    sentences: list[Sentence] = field(default_factory=list)
    interrupted: bool = False
    error: VoiceCliError | None = None
    heard: str = ""  # the displayed text of what reached the listener


class TextUnits:
    """Text pieces in, speakable units out, as a turn releases them: the segmenter cuts,
    the normalizer says what is spoken, and units with nothing to say are dropped."""

    def __init__(self, options: TurnOptions) -> None:
        self._segmenter = Segmenter(
            fast_first=options.fast_first, newline_is_boundary=options.newline_is_boundary
        )
        self._code = options.code

    def feed(self, piece: str) -> list[tuple[str, str]]:
        """(display, spoken) for each unit that ``piece`` completed."""
        return self._spoken(self._segmenter.feed(piece))

    def flush(self) -> list[tuple[str, str]]:
        return self._spoken(self._segmenter.flush())

    def _spoken(self, displays: list[str]) -> list[tuple[str, str]]:
        units = [(display, speakable(display, code=self._code)) for display in displays]
        return [(display, spoken) for display, spoken in units if spoken.strip()]


class SpeechPipeline:
    """Runs turns through one synthesizer and one sink, reused across turns."""

    def __init__(self, synth: Synthesizer, sink: AudioSink) -> None:
        self.synth = synth
        self.sink = sink
        self._synth_threads: list[threading.Thread] = []  # of turns that may still run

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Wait for interrupted turns' threads to notice the cancel and return.

        If the process exited while a synth thread sat in a forward pass, torch's native
        threads would be torn down under it and abort the process ("terminate called").
        A source thread may block on stdin forever and holds nothing native: not joined.
        """
        deadline = time.monotonic() + timeout
        for thread in self._synth_threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._synth_threads = [t for t in self._synth_threads if t.is_alive()]

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
        self.sink.begin_turn(
            lambda s, t: timeline.mark_once(PLAYED, s, t), lambda t: timeline.mark(UNDERRUN, t=t)
        )
        cancel.on_cancel(self.sink.clear)

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
        self._synth_threads = [t for t in self._synth_threads if t.is_alive()] + [consumer]
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
        result.heard = heard_text(self.sink.playback(), result.sentences)
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
        units = TextUnits(options)

        def release(released: list[tuple[str, str]]) -> None:
            for display, spoken in released:
                sentence = Sentence(len(result.sentences), spoken, display)
                result.sentences.append(sentence)
                timeline.mark(SENTENCE_READY, sentence.index, text=display, spoken=spoken)
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
                    release(units.feed(piece))
        finally:
            if not cancel.cancelled:
                timeline.mark(TEXT_DONE)
                if options.buffered:
                    release(units.feed("".join(pieces)))
                release(units.flush())

    # --- synth thread ---------------------------------------------------------
    def _consume(self, sentences: queue.Queue, cancel: CancelToken, timeline: Timeline) -> None:
        for chunk in self.synth.stream(_take(sentences, cancel), cancel, timeline):
            if cancel.cancelled:
                return
            if chunk.samples.size:
                timeline.mark_once(QUEUED, chunk.sentence)
            self.sink.write(chunk, cancel)
        if not cancel.cancelled:
            self.sink.drain(cancel)


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
