"""``--cpu-load N``: N busy processes beside the bench, as a laptop has a compiler or a
browser running.

Each spins in pure Python at normal priority, in a session of its own as a program
started from another terminal is: Linux's autogroups share the CPU between sessions
first, so a load inside voicecli's own session would be gentler than a real one.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from voicecli.child import ChildProcess

_SPIN = "while True: pass"

_busy = 0  # processes running now, for the report's machine record


def busy_processes() -> int:
    return _busy


@contextmanager
def cpu_load(processes: int) -> Iterator[list[int]]:
    """N busy processes while the block runs (their pids); stopped after it, however it
    ends."""
    children = [
        ChildProcess(
            [sys.executable, "-c", _SPIN],
            Path(tempfile.gettempdir()) / "voicecli-cpu-load.log",
            grace=1.0,
            own_session=True,
        )
        for _ in range(processes)
    ]
    global _busy
    try:
        for child in children:
            child.start()
        _busy = processes
        yield [child.pid for child in children if child.pid is not None]
    finally:
        _busy = 0
        for child in children:
            child.stop()
