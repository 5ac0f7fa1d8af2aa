"""A browser tab as a turn's audio sink: chunks go to the page as audio frames, and the
page's own reports say what it played (``played``) and when a sentence's first sample
becomes audible (``audible``): the browser's output, not the socket, is the listener.

Backpressure is the device's: at most ``ahead_seconds`` of audio the page has not
played. A page that stops reporting while audio waits is given ``stall_timeout``, then
the turn fails as the server's slow consumers do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from voicecli.audio.ledger import SpanLedger
from voicecli.cancel import POLL, CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import (
    AudioChunk,
    AudioSink,
    Playback,
    PlayedHook,
    SinkCapabilities,
    UnderrunHook,
)
from voicecli.web import messages as m


class PageLink(Protocol):
    """The tab's connection, as its threads see it: sends never block (they queue)."""

    @property
    def closed(self) -> bool: ...

    def send_text(self, text: str) -> None: ...

    def send_bytes(self, data: bytes) -> None: ...

    def end(self, code: str, message: str) -> None:
        """Send an error, then close the connection (from any thread)."""
        ...


class PageStalled(VoiceCliError):
    """The page stopped playing (or reporting) while audio waited for it."""


class BrowserSink(AudioSink):
    capabilities = SinkCapabilities(paced=True)

    def __init__(
        self,
        link: PageLink,
        sample_rate: int,
        *,
        ahead_seconds: float = 10.0,
        stall_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self.link = link
        self.sample_rate = sample_rate
        self.capacity = int(ahead_seconds * sample_rate)
        self.stall_timeout = stall_timeout
        self._cond = threading.Condition()
        self._ledger = SpanLedger()
        self._turn = 0
        self._next_turn = 0
        self._written = 0  # samples of the turn sent to the page
        self._heard = 0  # samples of the turn the page says it played
        self._underruns = 0  # episodes the page reported this turn
        self._seq = 0
        self._flushed = False
        self._progress_at = time.monotonic()  # the page's last report of progress
        self._on_played: PlayedHook | None = None
        self._on_underrun: UnderrunHook | None = None

    def expect_turn(self, turn: int) -> None:
        """The page knows the next turn by this number."""
        self._next_turn = turn

    # --- the pipeline's side ----------------------------------------------------------
    def _begin_turn(self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None) -> None:
        with self._cond:
            self._turn = self._next_turn
            self._written = self._heard = self._underruns = self._seq = 0
            self._flushed = False
            self._progress_at = time.monotonic()
            self._on_played, self._on_underrun = on_played, on_underrun
        self._ledger.reset()

    def _write(self, chunk: AudioChunk, cancel: CancelToken | None) -> None:
        self._ledger.before_write(chunk, self._written)
        samples = chunk.samples
        for start in range(0, len(samples), m.PAGE_FRAME_SAMPLES):
            piece = samples[start : start + m.PAGE_FRAME_SAMPLES]
            if not self._wait(self._room_for(len(piece)), cancel):
                return
            with self._cond:
                frame = m.audio_frame(self._turn, chunk.sentence, self._seq, piece)
                self._seq += 1
                self._written += len(piece)
            self.link.send_bytes(frame)
        self._ledger.after_write(chunk, self._written)

    def _room_for(self, samples: int) -> Callable[[], bool]:
        return lambda: self._written - self._heard + samples <= self.capacity

    def drain(self, cancel: CancelToken) -> bool:
        self.link.send_text(m.message(m.AUDIO_END, turn=self._turn, samples=self._written))
        return self._wait(lambda: self._heard >= self._written, cancel)

    def _wait(self, ready: Callable[[], bool], cancel: CancelToken | None) -> bool:
        """Until ``ready()``; False if the turn was cancelled or flushed, or the tab left."""
        began = time.monotonic()
        with self._cond:
            while not ready():
                if (cancel is not None and cancel.cancelled) or self._flushed or self.link.closed:
                    return False
                # Stalled: no progress since the wait began, or since the page's last.
                if time.monotonic() - max(began, self._progress_at) > self.stall_timeout:
                    raise PageStalled(
                        f"The page played nothing for {self.stall_timeout:g} s with audio "
                        "waiting: it is gone or stuck."
                    )
                self._cond.wait(POLL)
        return not (cancel is not None and cancel.cancelled) and not self._flushed

    def clear(self) -> None:
        with self._cond:
            self._flushed = True
            self._cond.notify_all()
        self.link.send_text(m.message(m.FLUSH, turn=self._turn))

    def playback(self) -> Playback:
        return Playback(self._ledger.snapshot(), self._heard, self.sample_rate)

    # --- the page's side --------------------------------------------------------------
    def played(self, report: m.Played) -> None:
        with self._cond:
            if report.turn != self._turn:
                return  # a report of a turn before: its audio is gone
            if report.position > self._heard:
                self._progress_at = time.monotonic()
            self._heard = max(self._heard, min(report.position, self._written))
            new = report.underruns - self._underruns
            self._underruns = max(self._underruns, report.underruns)
            on_underrun = self._on_underrun
            self._cond.notify_all()
        if on_underrun is not None:
            for _ in range(max(0, new)):
                on_underrun(time.monotonic())

    def audible(self, report: m.Audible) -> None:
        with self._cond:
            if report.turn != self._turn:
                return
            # The turn's hook keeps a sentence's first report only (``mark_once``).
            on_played = self._on_played
        if on_played is not None:
            on_played(report.sentence, time.monotonic() + report.after)

    def _describe(self) -> dict[str, Any]:
        return {"kind": "browser", "sample_rate": self.sample_rate}

    def _close(self) -> None:
        with self._cond:
            self._cond.notify_all()
