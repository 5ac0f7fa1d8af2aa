"""Messages waiting to go to one client: audio from the scheduler's worker thread, control
replies from the event loop, and a sender on the loop that takes them in order.

Audio is bounded softly: the worker adds a part's frames only while fewer than
``Limits.send_queue_frames`` wait, so at most that plus one part is ever held, and a
client that stops reading stops getting new work (``Scheduler`` ends it after
``Limits.stall_timeout``). Control replies never wait behind audio.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from voicecli.server.requests import Limits


@dataclass(frozen=True)
class OutAudio:
    request_id: str
    frame: bytes


_FINISH = object()


class Outbox:
    def __init__(self, limits: Limits, loop: asyncio.AbstractEventLoop) -> None:
        self._items: deque[Any] = deque()
        self._audio = 0
        self._limits = limits
        self._loop = loop
        self._lock = threading.Lock()
        self._ready = asyncio.Event()
        self.closed = False
        self.close_code = 1000  # the WebSocket close code once everything is sent
        self.last_taken = time.monotonic()  # when the client last took audio

    @property
    def has_room(self) -> bool:
        """Whether the scheduler may add audio: the client is keeping up."""
        return self._audio < self._limits.send_queue_frames

    @property
    def waiting_audio(self) -> int:
        return self._audio

    def put_audio(self, request_id: str, frames: list[bytes]) -> None:
        """From any thread."""
        with self._lock:
            if self.closed:
                return
            if not self._audio:
                self.last_taken = time.monotonic()  # the stall clock starts with a backlog
            self._items.extend(OutAudio(request_id, f) for f in frames)
            self._audio += len(frames)
        self._wake()

    def put_control(self, message: dict[str, Any]) -> None:
        with self._lock:
            if self.closed:
                return
            if len(self._items) - self._audio >= self._limits.max_control_backlog:
                # The client sends without reading replies: it is dropped.
                self.close_code = 1008
                self._close()
            else:
                self._items.append(message)
        self._wake()

    def finish(self) -> None:
        """Close after everything queued so far is sent."""
        with self._lock:
            self._items.append(_FINISH)
        self._wake()

    def abandon(self, message: dict[str, Any]) -> None:
        """The client stopped reading: forget its audio, tell it why, then close (1008)."""
        with self._lock:
            self._items = deque(m for m in self._items if not isinstance(m, OutAudio))
            self._audio = 0
            self._items.extend((message, _FINISH))
            self.close_code = 1008
        self._wake()

    def drop(self, request_id: str) -> None:
        """Forget the audio of one request that is not sent yet."""
        with self._lock:
            kept = [
                m
                for m in self._items
                if not (isinstance(m, OutAudio) and m.request_id == request_id)
            ]
            self._items = deque(kept)
            self._audio = sum(isinstance(m, OutAudio) for m in kept)

    async def get(self) -> dict[str, Any] | OutAudio | None:
        """The next message, or None once the outbox is finished or closed. On the loop."""
        while True:
            with self._lock:
                if self.closed:
                    return None
                if self._items:
                    item = self._items.popleft()
                    if item is _FINISH:
                        self._close()
                        return None
                    if isinstance(item, OutAudio):
                        self._audio -= 1
                        self.last_taken = time.monotonic()
                    return item
                self._ready.clear()
            await self._ready.wait()

    def close(self) -> None:
        with self._lock:
            self._close()
        self._wake()

    def _close(self) -> None:
        self.closed = True
        self._items.clear()
        self._audio = 0

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass
