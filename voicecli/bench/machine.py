"""What machine a benchmark ran on, recorded with every result (``run_header``: what
every result begins with)."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from voicecli.bench.cpu_load import busy_processes
from voicecli.tts.kokoro.cpu_share import usable_cores


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    info["usable_cores"] = usable_cores()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        # Other work on the machine skews every figure: record how busy it was.
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    info["cpu_load"] = busy_processes()  # busy processes the bench ran beside itself
    info["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    return info


def run_header(kind: str) -> dict[str, Any]:
    """What every bench result begins with: its kind, when and how it was run, and where."""
    return {
        "kind": kind,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": sys.argv,
        "machine": machine_info(),
    }
