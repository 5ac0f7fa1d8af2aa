"""torch's team is fitted to the cores that other processes leave free."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from voicecli.tts.kokoro import cpu_share
from voicecli.tts.kokoro.cpu_share import CpuShare

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/stat"), reason="reads Linux's CPU time and runnable tasks"
)


def test_busy_processes_are_seen_and_the_team_shrinks_while_they_run(monkeypatch):
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    share = CpuShare(2)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)
        assert cpu_share.others_running() >= 2
        assert share.threads() == 1
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert share.threads() == 1  # a load seen a moment ago still counts


CLIENT = """
import sys, time
for line in sys.stdin:  # a message, then a few ms of work on it, as a player's client does
    began = time.perf_counter()
    while time.perf_counter() - began < 0.003:
        pass
"""
LIGHT = """
import time
while True:  # a tenth of a core: a sound server, an editor
    time.sleep(0.009)
    began = time.perf_counter()
    while time.perf_counter() - began < 0.001:
        pass
"""


@contextmanager
def _beside(code: str, **popen):
    """A Python program running ``code`` for the block's time."""
    program = subprocess.Popen([sys.executable, "-c", code], **popen)
    try:
        yield program
    finally:
        program.kill()
        program.wait()


def _cpu_by_process() -> dict[str, float]:
    """Seconds of CPU each other process has used, by "pid command"."""
    used = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        if stat.parent.name == str(os.getpid()):
            continue
        try:
            head, fields = stat.read_bytes().rsplit(b")", 1)
        except OSError:
            continue  # it ended meanwhile
        name = head.split(b"(", 1)[1].decode(errors="replace")
        values = fields.split()
        ticks = int(values[11]) + int(values[12])  # utime, stime
        used[f"{stat.parent.name} {name}"] = ticks / os.sysconf("SC_CLK_TCK")
    return used


@pytest.fixture
def quiet():
    """These tests judge what other processes use, so they wait until little else does:
    right after the parallel half of a run, its processes may still be ending."""
    deadline = time.monotonic() + 30
    while True:
        before, began = cpu_share.cpu_seconds(), time.monotonic()
        by_process = _cpu_by_process()
        time.sleep(0.5)
        after, span = cpu_share.cpu_seconds(), time.monotonic() - began
        others = ((after[0] - before[0]) - (after[1] - before[1])) / span
        if others < 0.2:
            return
        if time.monotonic() > deadline:
            now = _cpu_by_process()
            used = {k: now[k] - by_process.get(k, now[k]) for k in now}
            busiest = sorted(used, key=used.__getitem__, reverse=True)[:3]
            pytest.fail(f"the machine stayed busy ({others:.2f} cores), most of all: {busiest}")


def _passes(share, n, before=None):
    """The teams of ``n`` passes of 30 ms of work each, as an engine decodes."""
    teams = []
    for _ in range(n):
        if before is not None:
            before()
        teams.append(share.threads())
        began = time.perf_counter()
        while time.perf_counter() - began < 0.03:
            pass
    return teams


@pytest.mark.serial  # judges what else uses the CPU: alone
def test_a_client_woken_by_each_message_leaves_the_team_whole(monkeypatch, quiet):
    # An engine sends its client audio just before its next pass: the client is
    # runnable at that moment, but uses a tenth of a core on the whole.
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    with _beside(CLIENT, stdin=subprocess.PIPE, text=True) as client:
        time.sleep(0.3)

        def send():
            client.stdin.write("audio\n")
            client.stdin.flush()

        teams = _passes(CpuShare(2), 40, send)
    # Caught at work at every reading after the pause, the client may hold the first
    # tenth of a second (four passes) to one thread; CPU time decides from then on.
    assert teams[4:].count(1) <= 2, teams


@pytest.mark.serial  # judges what else uses the CPU: alone
def test_a_program_using_a_little_cpu_leaves_the_team_whole(monkeypatch, quiet):
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    with _beside(LIGHT):
        time.sleep(0.3)
        teams = _passes(CpuShare(2), 40)
    assert teams.count(1) <= 2, teams


@pytest.mark.serial  # judges what else uses the CPU: alone
def test_a_program_that_turns_busy_mid_turn_shrinks_the_team_within_a_second(monkeypatch, quiet):
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    share = CpuShare(2)
    assert _passes(share, 10) == [2] * 10
    with _beside("while True: pass"):
        teams = _passes(share, 50)  # 1.5 s
    assert teams[-15:] == [1] * 15, teams


# CPU seconds other programs have used by time t: a tenth of a core, a busy core, and 0.6
# of a core for the first 0.12 s only (a client drawing its screen as the turn begins).
LIGHT_USE, BUSY_USE, BURST_USE = (lambda t: 0.1 * t), (lambda t: t), (lambda t: 0.6 * min(t, 0.12))


@pytest.mark.parametrize(
    ("used_by", "then"),
    [(LIGHT_USE, 2), (BUSY_USE, 1), (BURST_USE, 2)],
    ids=["a-tenth-of-a-core", "a-busy-core", "a-burst-as-the-turn-begins"],
)
def test_after_a_pause_a_glimpse_then_the_cpu_time_since_decide(monkeypatch, used_by, then):
    """After a pause, another program caught runnable at every reading (at work for a
    few milliseconds, or busy) sets the first team; from a tenth of a second on, the CPU
    time used since the pause decides. Blended into the second-long average instead, the
    glimpse of a program using a tenth of a core had held one thread for 0.8 s."""
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    monkeypatch.setattr(cpu_share, "others_running", lambda: 1)
    monkeypatch.setattr(cpu_share, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep))
    monkeypatch.setattr(cpu_share, "cpu_seconds", lambda: (used_by(clock[0]), 0.0))
    share = CpuShare(2)
    teams = []
    for _ in range(40):  # passes of 30 ms
        teams.append(share.threads())
        clock[0] += 0.03
    assert teams[:4] == [1] * 4 and teams[5:] == [then] * 35, teams


def test_a_fixed_team_is_never_changed(monkeypatch):
    monkeypatch.setattr(cpu_share, "others_running", lambda: 5)
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    assert CpuShare(2, fixed=True).threads() == 2
    assert CpuShare(2).threads() == 1
    monkeypatch.setattr(cpu_share, "others_running", lambda: 0)
    assert CpuShare(1).threads() == 1
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    assert CpuShare(2).threads() == 2


def test_without_proc_the_team_is_torchs_own(monkeypatch):
    monkeypatch.setattr(cpu_share, "others_running", lambda: None)
    assert CpuShare(2).threads() == 2
