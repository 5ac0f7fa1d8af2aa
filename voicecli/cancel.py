"""One cancel token per turn, shared by every stage of the pipeline."""

from __future__ import annotations

import threading
from collections.abc import Callable

# Seconds between checks of a token by a wait that cancelling cannot wake (a queue, a
# socket read): the longest a stage may lag behind a cancel.
POLL = 0.05


class CancelToken:
    """A one-shot flag that every stage polls or waits on.

    Stages that hold resources (an HTTP stream, a socket, the audio device)
    register a callback so that cancelling releases them at once instead of
    at the stage's next poll.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - a failing release must not stop the others
                pass

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when cancelled (at once if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds; True if cancelled meanwhile."""
        return self._event.wait(timeout)
