"""Drive the real ``voicecli`` under a pseudo-terminal, for tests/test_tui.py."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pexpect

VOICECLI = str(Path(sys.executable).with_name("voicecli"))
# Loading Kokoro and its G2P takes ~10 s alone; a loaded 2-core CI box is slower.
START_TIMEOUT = 120
STEP_TIMEOUT = 60
PROMPT = "you> "
AUDIO_ENV = ("ALSA_CONFIG_PATH", "PULSE_SERVER", "XDG_RUNTIME_DIR", "VOICECLI_CAPTURE")
ENGINE_ENV = ("VOICECLI_ENGINE", "VOICECLI_RUNTIME_DIR")


def child_env(home: Path) -> dict[str, str]:
    """A clean environment: the test audio device, no user config, history under ``home``."""
    env = {
        k: os.environ[k]
        for k in (
            "PATH",
            "LANG",
            "VOICECLI_CONFIG",
            "HF_HUB_OFFLINE",
            *ENGINE_ENV,
            *AUDIO_ENV,
        )
        if k in os.environ
    }
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        TERM="xterm-256color",
        PYTHONUNBUFFERED="1",
        LANG=env.get("LANG", "C.UTF-8"),
    )
    return env


def spawn(
    args: list[str], home: Path, *, command: str | None = None, rows: int = 30, cols: int = 110
) -> pexpect.spawn:
    """``voicecli ARGS`` (or a shell ``command``) on a fresh pseudo-terminal."""
    if command is None:
        child = pexpect.spawn(
            VOICECLI,
            args,
            env=child_env(home),
            encoding="utf-8",
            timeout=STEP_TIMEOUT,
            dimensions=(rows, cols),
        )
    else:
        child = pexpect.spawn(
            "/bin/sh",
            ["-c", command],
            env=child_env(home),
            encoding="utf-8",
            timeout=STEP_TIMEOUT,
            dimensions=(rows, cols),
        )
    child.delaybeforesend = None
    return child


def chat_args(model_dir: Path, device: str, base_url: str, *extra: str) -> list[str]:
    return [
        "chat",
        "--model-dir",
        str(model_dir),
        "--voice",
        "af_tiny",
        "--device",
        device,
        "--base-url",
        base_url,
        "--api-key",
        "test",
        "--no-fast-first",
        *extra,
    ]


def wait_prompt(child: pexpect.spawn, timeout: float = STEP_TIMEOUT) -> None:
    child.expect_exact(PROMPT, timeout=timeout)


def wait_state(child: pexpect.spawn, state: str, timeout: float = STEP_TIMEOUT) -> None:
    """The live status line has shown ``● state`` (it is one styled run of text)."""
    child.expect_exact(f"● {state}", timeout=timeout)


def finish(child: pexpect.spawn, timeout: float = STEP_TIMEOUT) -> int:
    """Wait for the program to exit; its exit status."""
    child.expect(pexpect.EOF, timeout=timeout)
    child.close()
    return child.exitstatus if child.exitstatus is not None else 128 + child.signalstatus


SPOKEN = re.compile(r"(\d+):(\d\d) spoken")


def wait_spoken(child: pexpect.spawn, seconds: float, timeout: float = STEP_TIMEOUT) -> float:
    """Wait until the status line reports at least ``seconds`` heard; the value shown."""
    deadline = time.monotonic() + timeout
    while True:
        child.expect(SPOKEN, timeout=max(0.1, deadline - time.monotonic()))
        shown = int(child.match.group(1)) * 60 + int(child.match.group(2))
        if shown >= seconds:
            return shown
