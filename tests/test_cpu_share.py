"""torch's team is fitted to the cores that other processes leave free."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from voicecli.tts import cpu_share
from voicecli.tts.cpu_share import CpuShare

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/stat"), reason="reads Linux's count of runnable tasks"
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


def test_a_task_runnable_now_and_then_leaves_the_team_whole(monkeypatch):
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 2)
    readings = iter([0, 0, 1, 0] + [1 if k % 5 == 0 else 0 for k in range(40)])
    monkeypatch.setattr(cpu_share, "others_running", lambda: next(readings))
    share = CpuShare(2)
    teams = []
    for _ in range(20):
        teams.append(share.threads())
        time.sleep(0.02)
    assert teams == [2] * 20


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
