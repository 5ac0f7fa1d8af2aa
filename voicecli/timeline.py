"""The turn timeline: every latency figure voicecli reports comes from here.

Stages mark named events with ``time.monotonic()`` timestamps. The audio
callback converts PortAudio's ``outputBufferDacTime`` into the same clock so
that "played" means "reached the device", not "left the synthesizer".
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

# Event names, in pipeline order.
REQUEST_SENT = "request_sent"  # the LLM request left (or input reading began)
FIRST_TOKEN = "first_token"  # first text arrived from the source
TEXT_DONE = "text_done"  # the source finished
SENTENCE_READY = "sentence_ready"  # the segmenter released a sentence
SYNTH_START = "synth_start"  # the synthesizer took a sentence
SYNTH_FIRST_CHUNK = "synth_first_chunk"  # first audio of a sentence came out
SYNTH_END = "synth_end"  # the synthesizer finished a sentence
QUEUED = "queued"  # first samples of a sentence went into the ring buffer
PLAYED = "played"  # first samples of a sentence reached the device (DAC time)
UNDERRUN = "underrun"  # the device asked for audio the ring did not have
INTERRUPTED = "interrupted"  # the user cancelled the turn
TURN_END = "turn_end"  # the last sample was played, or the turn was cancelled

PER_SENTENCE = (SENTENCE_READY, SYNTH_START, SYNTH_FIRST_CHUNK, SYNTH_END, QUEUED, PLAYED)


@dataclass
class Event:
    name: str
    t: float
    sentence: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Timeline:
    """Thread-safe, append-only record of one turn."""

    def __init__(self, label: str = "turn") -> None:
        self.label = label
        self.t0 = time.monotonic()
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def mark(
        self, name: str, sentence: int | None = None, t: float | None = None, **detail: Any
    ) -> float:
        when = time.monotonic() if t is None else t
        with self._lock:
            self._events.append(Event(name, when, sentence, detail))
        return when

    def mark_once(
        self, name: str, sentence: int | None = None, t: float | None = None, **detail: Any
    ) -> bool:
        """Mark ``name`` only the first time for this sentence; True if it was marked."""
        when = time.monotonic() if t is None else t
        with self._lock:
            for event in self._events:
                if event.name == name and event.sentence == sentence:
                    return False
            self._events.append(Event(name, when, sentence, detail))
        return True

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return sorted(self._events, key=lambda e: e.t)

    def first(self, name: str, sentence: int | None = None) -> float | None:
        """Earliest time of ``name`` (for one sentence, or for any if None)."""
        times = [
            e.t
            for e in self.events
            if e.name == name and (sentence is None or e.sentence == sentence)
        ]
        return min(times) if times else None

    def count(self, name: str) -> int:
        return sum(1 for e in self.events if e.name == name)

    def since_start_ms(self, name: str, sentence: int | None = None) -> float | None:
        t = self.first(name, sentence)
        return None if t is None else (t - self.t0) * 1000.0

    def sentences(self) -> list[int]:
        return sorted({e.sentence for e in self.events if e.sentence is not None})

    def summary(self) -> dict[str, Any]:
        """Headline figures in milliseconds from the start of the turn."""
        out: dict[str, Any] = {
            "first_token_ms": self.since_start_ms(FIRST_TOKEN),
            "first_sentence_ms": self.since_start_ms(SENTENCE_READY),
            "first_synth_start_ms": self.since_start_ms(SYNTH_START),
            "first_audio_chunk_ms": self.since_start_ms(SYNTH_FIRST_CHUNK),
            "first_queued_ms": self.since_start_ms(QUEUED),
            "first_played_ms": self.since_start_ms(PLAYED),
            "text_done_ms": self.since_start_ms(TEXT_DONE),
            "turn_end_ms": self.since_start_ms(TURN_END),
            "sentences": len(self.sentences()),
            "underruns": self.count(UNDERRUN),
            "interrupted": self.count(INTERRUPTED) > 0,
        }
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "t0": self.t0,
            "summary": self.summary(),
            "events": [{**asdict(e), "ms": (e.t - self.t0) * 1000.0} for e in self.events],
        }
