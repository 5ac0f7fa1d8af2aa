"""How many cores torch may use for its next piece of work, given what else runs.

torch's OpenMP team waits at a barrier thousands of times per forward pass. When
another program holds one of the two cores, one of the team's threads is descheduled
at every other barrier and the rest wait for it: on this machine, beside one busy
process, Kokoro's real-time factor went from 0.45 with one thread to 3 to 14 with two
(docs/engine.md). So before each piece of torch work the team is fitted to the cores
nobody else wants: the usable cores, less the tasks of other processes that are
runnable right now (Linux counts them in /proc/stat), and it stays small for a few
seconds after the last sight of one, as loads come in bursts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD = 3.0  # s a contended reading keeps counting


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def others_running() -> int | None:
    """Tasks of other processes on a core or waiting for one, now; None where Linux's
    /proc cannot say."""
    try:
        with open("/proc/stat", "rb") as stat:
            running = next(
                int(line.split()[1]) for line in stat if line.startswith(b"procs_running")
            )
        ours = 0
        for task in Path("/proc/self/task").iterdir():
            try:
                state = (task / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # the thread ended meanwhile
            ours += state == b"R"
    except (OSError, StopIteration, ValueError):
        return None
    return max(0, running - ours)


class CpuShare:
    """The team size for torch's next piece of work, from 1 to ``most``; always ``most``
    if ``fixed``."""

    def __init__(self, most: int, *, fixed: bool = False) -> None:
        self.most = max(1, most)
        self.fixed = fixed
        self._cores = usable_cores()
        self._fewest_free = self._cores
        self._held_until = 0.0

    def threads(self) -> int:
        if self.fixed or self.most == 1:
            return self.most
        others = others_running()
        if others is None:
            return self.most
        now = time.monotonic()
        free = max(1, self._cores - others)
        if free < self._fewest_free or now >= self._held_until:
            self._fewest_free = free
        if free < self._cores:
            self._held_until = now + HOLD
        return min(self.most, self._fewest_free)
