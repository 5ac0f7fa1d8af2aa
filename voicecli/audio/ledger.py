"""Which sentence lies where on a sink's sample timeline, as its chunks are written.

Both sinks keep one: the device to map its play position back to sentences (live
view, heard text, skip), the file because every written sample counts as heard.
"""

from __future__ import annotations

import dataclasses
import threading

from voicecli.frames import AudioChunk, Span


class SpanLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []

    def reset(self) -> None:
        with self._lock:
            self._spans.clear()

    def open_sentence(self) -> int | None:
        """The sentence whose samples are being written, if its end is not known yet."""
        with self._lock:
            last = self._spans[-1] if self._spans else None
        return last.sentence if last is not None and last.end is None else None

    def before_write(self, chunk: AudioChunk, position: int) -> bool:
        """Note ``chunk`` about to go in at ``position``; True if it starts its sentence."""
        if self.open_sentence() == chunk.sentence:
            with self._lock:
                span = self._spans[-1]
                self._spans[-1] = dataclasses.replace(
                    span,
                    length=span.length if chunk.length is None else chunk.length,
                    words=span.words + chunk.words,
                )
            return False
        with self._lock:
            self._close(position)
            self._spans.append(
                Span(chunk.sentence, position, length=chunk.length, words=chunk.words)
            )
        return True

    def after_write(self, chunk: AudioChunk, position: int) -> None:
        if chunk.last:
            with self._lock:
                self._close(position)

    def _close(self, position: int) -> None:
        if self._spans and self._spans[-1].end is None:
            self._spans[-1] = dataclasses.replace(self._spans[-1], end=position)

    def at(self, position: int) -> Span | None:
        """The span that ``position`` falls in."""
        with self._lock:
            return next(
                (
                    s
                    for s in self._spans
                    if s.start <= position and (s.end is None or position < s.end)
                ),
                None,
            )

    def skip(self, span: Span, heard: int) -> int | None:
        """Mark ``span`` heard only up to ``heard``; the start of the next span, if queued."""
        with self._lock:
            index = self._spans.index(span)
            self._spans[index] = dataclasses.replace(span, skipped_at=heard)
            later = [s.start for s in self._spans[index + 1 :]]
        return later[0] if later else None

    def snapshot(self) -> tuple[Span, ...]:
        with self._lock:
            return tuple(self._spans)
