"""``voicecli bench startup``: how long a user waits from typing a command to hearing
it, with the real commands as separate processes, modes alternated:

* ``warm``: ``say`` with the resident engine running;
* ``first``: ``say`` with no engine running, so it starts one (as a first call does);
* ``no-engine``: ``say --no-engine``, everything loaded in the process;
* ``chat-warm``: ``chat --once`` on the embedded LLM, engine and LLM running.

First sound is the first sample at the device (PortAudio's DAC time, from the turn
timeline the command writes to ``timeline_file``) minus the moment just before the
process was spawned. The client's CPU time is its own (``wait4``), not the engine's.
The bench keeps an engine of its own, in a private runtime directory, so that it never
stops the user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voicecli.bench.metrics import stats
from voicecli.config import Settings
from voicecli.errors import VoiceCliError

STARTS = ("warm", "first", "no-engine", "chat-warm")
SAY_TEXT = "Hello there."
CHAT_PROMPT = "What is the capital of France? Answer in one sentence."


def _forwarded(settings: Settings) -> list[str]:
    """The flags that make each command speak as the bench was asked to."""
    args: list[str] = ["--voice", settings.voice]
    for flag, value in (
        ("--model-dir", settings.model_dir),
        ("--lang", settings.lang),
        ("--device", settings.device),
    ):
        if value is not None:
            args += [flag, str(value)]
    return args


def _run(argv: list[str], env: dict[str, str], timeline: Path) -> dict[str, Any]:
    timeline.unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        last = stderr.strip().splitlines()[-1:] or ["no output"]
        raise VoiceCliError(f"`{' '.join(argv[2:5])} …` failed in the bench: {last[0]}")
    played = None
    try:
        turn = json.loads(timeline.read_text().splitlines()[-1])
        played = next(e["t"] for e in turn["events"] if e["name"] == "played")
    except (OSError, IndexError, StopIteration, ValueError):
        pass
    return {
        "first_sound_ms": None if played is None else (played - started) * 1000.0,
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000.0,
        "wall_ms": wall * 1000.0,
    }


def run_startup(settings: Settings, trials: int, progress: Callable[[str], None]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="voicecli-startup-"))
    timeline = work / "timeline.jsonl"
    env = {
        **os.environ,
        "VOICECLI_RUNTIME_DIR": str(work / "run"),
        "VOICECLI_TIMELINE_FILE": str(timeline),
    }
    base = [sys.executable, "-m", "voicecli"]
    flags = _forwarded(settings)
    commands = {
        "warm": [*base, "say", "--engine", *flags, SAY_TEXT],
        "first": [*base, "say", "--engine", *flags, SAY_TEXT],
        "no-engine": [*base, "say", "--no-engine", *flags, SAY_TEXT],
        "chat-warm": [*base, "chat", "--engine", "--llm", "local", *flags, "--once", CHAT_PROMPT],
    }
    stop = [*base, "engine", "stop"]
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in STARTS}
    try:
        # Uncounted: the engine and its LLM up, and the page cache warm for every mode.
        _run(commands["no-engine"], env, timeline)
        _run(commands["chat-warm"], env, timeline)
        for n in range(trials):
            for mode in STARTS:
                if mode == "first":
                    subprocess.run(stop, env=env, capture_output=True, check=False)
                if mode == "chat-warm":
                    # Uncounted: 'first' stopped the engine, and its LLM with it.
                    _run(commands["chat-warm"], env, timeline)
                result = _run(commands[mode], env, timeline)
                results[mode].append(result)
                progress(
                    f"trial {n + 1}/{trials} {mode}: first sound "
                    f"{_ms(result['first_sound_ms'])} from the process's start, client CPU "
                    f"{result['cpu_ms']:.0f} ms"
                )
    finally:
        subprocess.run(stop, env=env, capture_output=True, check=False)
    return {
        "kind": "startup",
        "trials": trials,
        "say_text": SAY_TEXT,
        "chat_prompt": CHAT_PROMPT,
        "results": results,
        "summary": {
            mode: {key: stats([r[key] for r in rows]) for key in ("first_sound_ms", "cpu_ms")}
            for mode, rows in results.items()
        },
    }


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def report_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        f"voicecli bench startup: {result['trials']} trials per mode; ms from the process's "
        "start to the first sample at the device, and the client's own CPU",
        f"  {'mode':<10} {'p50':>7} {'min':>7} {'max':>7}   {'CPU p50':>8}",
    ]
    for mode in STARTS:
        first = result["summary"][mode]["first_sound_ms"]
        cpu = result["summary"][mode]["cpu_ms"]
        lines.append(
            f"  {mode:<10} {_cell(first['median'])} {_cell(first['min'])} {_cell(first['max'])}"
            f"   {_cell(cpu['median']):>8}"
        )
    return lines


def _cell(value: float | None) -> str:
    return f"{'n/a':>7}" if value is None else f"{value:7.0f}"
