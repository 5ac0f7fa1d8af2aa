"""Comments and docstrings say why, never what was measured: a measured figure (a time or
a level with its unit, a PESQ score, "measured", a median, "N x faster") belongs in
docs/benchmarks.md or the design records, where its date and its conditions go with it.
Run by scripts/test.sh over voicecli/; prints each offending line and exits 1."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

# The benchmarks' own words: measuring is what they are for, and their docstrings say how.
METHOD = re.compile(r"measured|PESQ", re.IGNORECASE)
MEASURED = re.compile(
    r"\d\s*(?:ms|dB)\b"  # 20 ms, 82-92 dB
    r"|\bPESQ\b"
    r"|\bmeasured\b"
    r"|\(median\)|\bmedian\s+[\d.]"
    r"|\d(?:\.\d+)?\s*x\s+(?:faster|slower|sooner|quicker)\b"  # 1.5x faster
    r"|\bRTF\s+[\d.]|\bWER\b\s+[\d.]+|\d\s*%\s+WER|\bpoints less WER\b",
    re.IGNORECASE,
)


def remarks(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line in ``source``."""
    found: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstring = body[0].value
                if isinstance(docstring.value, str):
                    for offset, line in enumerate(docstring.value.splitlines()):
                        found.append((docstring.lineno + offset, line))
    return sorted(found)


def main(roots: list[str]) -> int:
    bad = 0
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            bench = "bench" in path.parts or path.name == "bench.py"
            for line, text in remarks(path.read_text(encoding="utf-8")):
                found = MEASURED.search(text)
                if found and not (bench and METHOD.fullmatch(found.group())):
                    print(f"{path}:{line}: a measured figure in a comment: {text.strip()}")
                    bad += 1
    if bad:
        print(
            f"{bad} comment line(s) hold measurements: say why in the code, and put the "
            "figures in docs/ (benchmarks.md or the design record)."
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["voicecli"]))
