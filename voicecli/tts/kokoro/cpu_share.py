"""How many cores torch may use for its next piece of work, given what else runs.

torch's OpenMP team waits at a barrier thousands of times per forward pass. When
another program holds one of the two cores, one of the team's threads is descheduled
at every other barrier and the rest wait for it: on this machine, beside one busy
process, Kokoro's real-time factor went from 0.45 with one thread to 3 to 14 with two
(docs/engine.md). So before each piece of torch work the team is fitted to the cores
nobody else wants: the usable cores, less the CPU other processes used over about the
last second.

How much they used is read from the kernel's CPU time (/proc/stat's busy time less this
process's own), not from how many of their tasks are runnable at the moment of asking:
that moment is when this process has just sent a client its audio, so the client is
runnable then, busy or not. An engine beside its own `say`, which uses a tenth of a core,
had dropped to one thread at most passes and decoded them 1.6 times slower. Only after a
pause, with no CPU time read for a while, do runnable tasks decide: a busy program is
runnable at every one of a few readings, a program that merely woke up is not. That
glimpse holds only until a tenth of a second of CPU time has been read, and the average
since the pause decides until a second of it has: blended into the running average
instead, a program caught at work for a few milliseconds kept the team at one thread for
most of a second.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

TAU = 1.0  # s over which other processes' CPU use is averaged
FRESH_READINGS = 4
# CPU time is counted in clock ticks (``_TICK``): a shorter span than this would be
# mostly rounding, so readings closer together wait to be averaged in.
MIN_SPAN = 0.05  # s
AFTER_PAUSE = 0.1  # s of CPU time read after a pause that replace a glimpse of runnable tasks
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _stat_fields(path: Path) -> list[bytes]:
    """A /proc stat file's fields from the state on (field 3 of proc_pid_stat(5)): the
    command before it is in parentheses and may hold spaces."""
    return path.read_bytes().rsplit(b")", 1)[1].split()


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
                state = _stat_fields(task / "stat")[0]
            except (OSError, IndexError):
                continue  # the thread ended meanwhile
            ours += state == b"R"
    except (OSError, StopIteration, ValueError):
        return None
    return max(0, running - ours)


def cpu_seconds() -> tuple[float, float] | None:
    """Seconds of CPU that every process together has used since boot (user, nice and
    system time, all cores), and that this process has; None where Linux's /proc cannot
    say. Both in the kernel's ticks, so that they round alike."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
        mine = _stat_fields(Path("/proc/self/stat"))
        everyone = int(fields[1]) + int(fields[2]) + int(fields[3])
        ours = int(mine[11]) + int(mine[12])  # utime, stime: fields 14 and 15
    except (OSError, IndexError, ValueError):
        return None
    return everyone * _TICK, ours * _TICK


class CpuShare:
    """The team size for torch's next piece of work, from 1 to ``most``; always ``most``
    if ``fixed``.

    Other processes' CPU use is averaged over about ``TAU`` seconds: a busy program uses
    a core, a sound server, an editor or voicecli's own client a tenth of one, and a
    team of two costs little beside those. After a pause (between turns) a few readings
    of runnable tasks a millisecond apart decide for the first tenth of a second (only one
    runnable at all of them counts), then the CPU time used since the pause, until a
    second of it starts the running average afresh.
    """

    def __init__(self, most: int, *, fixed: bool = False) -> None:
        self.most = max(1, most)
        self.fixed = fixed
        self._cores = usable_cores()
        self._load = 0.0  # cores other processes use, averaged
        self._read_at: float | None = None  # when threads() last read anything
        self._since: tuple[float, float, float] | None = None  # (when, everyone, ours)
        self._since_pause = False  # the load is a glimpse, then the average since a pause

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
            self._load = float(min(readings))  # type: ignore[type-var]
            self._since = None
            self._since_pause = True
        if self._since is None:
            seconds = cpu_seconds()
            self._since = None if seconds is None else (now, *seconds)
        else:
            self._average(now)
        self._read_at = now
        free = self._cores - int(self._load + 0.5)
        return max(1, min(self.most, free))

    def _average(self, now: float) -> None:
        assert self._since is not None
        then, everyone_then, ours_then = self._since
        span = now - then
        if span < MIN_SPAN:
            return
        seconds = cpu_seconds()
        if seconds is None:
            return
        everyone, ours = seconds
        others = max(0.0, (everyone - everyone_then) - (ours - ours_then)) / span
        if self._since_pause:
            # The average since the pause, once long enough to outweigh the glimpse: a
            # tenth of a second of it is no steadier a seed for the running average.
            if span >= AFTER_PAUSE:
                self._load = others
            if span < TAU:
                return
            self._since_pause = False
        else:
            self._load += (1.0 - math.exp(-span / TAU)) * (others - self._load)
        self._since = (now, everyone, ours)
