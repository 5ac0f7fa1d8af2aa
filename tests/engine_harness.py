"""``voicecli`` as a user runs it beside a resident engine of the test's own: a runtime
directory of its own, so that no test reaches another's engine (or the user's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def engine_env(runtime: Path) -> dict[str, str]:
    """What points voicecli at the engine of ``runtime``, started on first use."""
    return {"VOICECLI_ENGINE": "1", "VOICECLI_RUNTIME_DIR": str(runtime)}


def voicecli(runtime: Path, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **engine_env(runtime)}
    env.update(kw.pop("env", {}))
    return subprocess.run(
        [sys.executable, "-m", "voicecli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kw,
    )
