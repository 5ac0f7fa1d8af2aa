"""Comments and docstrings say why; measured figures live in docs/ (scripts/check_comments.py,
which scripts/test.sh runs over voicecli/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "check_comments.py"


def check(*roots: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHECK), *map(str, roots)], capture_output=True, text=True
    )


def test_voicecli_holds_no_measured_figure_in_its_comments():
    result = check(ROOT / "voicecli")
    assert result.returncode == 0, result.stdout


def test_measured_figures_are_found_in_comments_and_docstrings(tmp_path):
    (tmp_path / "measured.py").write_text(
        '"""Windows decode to 82-92 dB SNR of the whole render."""\n'
        "CONTEXT = 8  # 1.5x faster than 12\n"
        "def f():\n"
        '    """Measured on the real weights: 35 ms a pass."""\n'
        "# PESQ-WB 4.3 against 2.1 (median)\n"
    )
    (tmp_path / "why.py").write_text(
        '"""One probability per hearing frame; a median of the last timestamps decides."""\n'
        "FRAME = 160  # AEC3 works on frames of a hundredth of a second\n"
        'NOTE = "took 30 ms"  # a string is no comment\n'
    )
    result = check(tmp_path)
    assert result.returncode == 1
    flagged = [line.split(": a measured")[0] for line in result.stdout.splitlines()[:-1]]
    assert flagged == [f"{tmp_path / 'measured.py'}:{n}" for n in (1, 2, 4, 5)], result.stdout
