"""How many cores torch may use for its next piece of work, given what else runs.

torch's OpenMP team waits at a barrier thousands of times per forward pass. When
another program holds one of the two cores, one of the team's threads is descheduled
at every other barrier and the rest wait for it: on this machine, beside one busy
process, Kokoro's real-time factor went from 0.45 with one thread to 3 to 14 with two
(docs/engine.md). So before each piece of torch work the team is fitted to the cores
nobody else wants: the usable cores, less the tasks of other processes that are
runnable (Linux counts them in /proc/stat), averaged over a second.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

TAU = 1.0  # s over which other processes' runnable tasks are averaged
FRESH_READINGS = 4


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
    if ``fixed``.

    Other processes' runnable tasks are averaged over about ``TAU`` seconds: a busy
    program is runnable at every reading, a sound server or an editor only now and
    then, and a team of two costs little beside those. After a pause (between turns)
    a few readings 1 ms apart start the average afresh.
    """

    def __init__(self, most: int, *, fixed: bool = False) -> None:
        self.most = max(1, most)
        self.fixed = fixed
        self._cores = usable_cores()
        self._load = 0.0
        self._read_at: float | None = None

    def threads(self) -> int:
        if self.fixed or self.most == 1:
            return self.most
        now = time.monotonic()
        if self._read_at is None or now - self._read_at > TAU:
            readings = []
            for k in range(FRESH_READINGS):
                if k:
                    time.sleep(0.001)
                readings.append(others_running())
            if None in readings:
                return self.most
            self._load = sum(readings) / len(readings)  # type: ignore[arg-type]
        else:
            others = others_running()
            if others is None:
                return self.most
            self._load += (1.0 - math.exp((self._read_at - now) / TAU)) * (others - self._load)
        self._read_at = now
        free = self._cores - int(self._load + 0.5)
        return max(1, min(self.most, free))
