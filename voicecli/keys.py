"""Single key presses from the terminal while speech plays.

Keys come from stdin when it is a terminal, otherwise from /dev/tty (so that
``tail -f log | voicecli say`` can still be interrupted). The terminal is in
cbreak mode only while a listener runs: Ctrl-C still raises SIGINT, and the
key that interrupted is consumed here rather than left for the next prompt.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import threading
import tty
from collections.abc import Callable


class NoTerminal(Exception):
    """There is no terminal to read keys from; the message says why."""


class KeyListener:
    def __init__(self, fd: int, owns_fd: bool) -> None:
        self.fd = fd
        self._owns_fd = owns_fd
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._saved: list | None = None

    @classmethod
    def open(cls) -> KeyListener:
        """A listener on the user's terminal, or NoTerminal."""
        try:
            if sys.stdin is not None and sys.stdin.isatty():
                return cls(sys.stdin.fileno(), owns_fd=False)
        except (ValueError, OSError):
            pass
        try:
            fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
        except OSError as exc:
            raise NoTerminal(f"no terminal to read keys from ({exc.strerror})") from None
        if not os.isatty(fd):
            os.close(fd)
            raise NoTerminal("/dev/tty is not a terminal")
        return cls(fd, owns_fd=True)

    def start(self, on_key: Callable[[str], None]) -> None:
        """Call ``on_key`` for each key pressed until stop()."""
        self.stop()
        try:
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd, termios.TCSANOW)
        except termios.error:
            self._saved = None
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(on_key,), name="voicecli-keys", daemon=True
        )
        self._thread.start()

    def _run(self, on_key: Callable[[str], None]) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.05)
            except (OSError, ValueError):
                return
            if not ready or self._stop.is_set():
                continue
            try:
                data = os.read(self.fd, 32)
            except OSError:
                return
            if not data:
                return
            on_key(data.decode("utf-8", errors="replace"))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
            self._thread = None
        if self._saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            except termios.error:
                pass
            self._saved = None

    def restore_terminal(self) -> None:
        """Put the terminal back as it was, at once (safe from a signal handler)."""
        saved = self._saved
        if saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSANOW, saved)
            except termios.error:
                pass

    def close(self) -> None:
        self.stop()
        if self._owns_fd:
            try:
                os.close(self.fd)
            except OSError:
                pass
