"""Throughput of voicecli.segment.Segmenter on a long, realistic LLM reply.

Run: python benchmarks/bench_segment.py [--repeat N]

Feeds the reply one character at a time and in token-sized chunks, and reports characters
per second and microseconds per released sentence. Doubling the text should roughly double
the time (feed is incremental); the last column shows that. For scale, it also times
normalize.speakable on each released unit.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from voicecli.normalize import speakable  # noqa: E402
from voicecli.segment import Segmenter  # noqa: E402

REPLY = """\
Sure! Here's a detailed walkthrough of setting up the project, e.g. on Ubuntu 22.04.

## 1. Install the prerequisites

First, make sure Python 3.12.1 is installed. Dr. Smith's team at the U.S. office \
recommends v2.5.1 of the toolkit, which costs $4.99 per seat (approx. 1,000.50 euros for \
the whole team). Download it from https://example.com/downloads/toolkit-2.5.1.tar.gz and \
check the checksum... wait, actually the site also lists a mirror at 192.168.0.1.

- **Linux**: run `sudo apt install python3-venv`.
- **macOS**: use Homebrew, i.e. `brew install python@3.12`.
- **Windows**: grab the installer, then restart.

## 2. Configure it

Edit config.toml and README.md as described in Fig. 2. The meeting on Jan. 15 at 3:30 p.m. \
decided the defaults; see No. 5 in the minutes. J. R. R. Tolkien would approve, probably!

```python
import tomllib

with open("config.toml", "rb") as f:
    cfg = tomllib.load(f)
print(cfg["server"]["host"])  # e.g. 10.0.0.1
```

| Setting | Default | Notes |
|---------|---------|-------|
| port    | 8080    | any free port |
| workers | 4       | one per core |

That's it. Is anything unclear? Let me know, and I'll explain further — happy to help.

"""


def token_chunks(text: str) -> list[str]:
    """Roughly what an LLM streams: a leading space plus a few characters."""
    return re.findall(r"\s?\S{1,4}|\s+", text)


def run(chunks: list[str]) -> tuple[float, int]:
    seg = Segmenter(fast_first=True)
    sentences = 0
    t0 = time.perf_counter()
    for chunk in chunks:
        sentences += len(seg.feed(chunk))
    sentences += len(seg.flush())
    return time.perf_counter() - t0, sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=40, help="copies of the reply")
    args = parser.parse_args()

    print(
        f"{'input':<24}{'chars':>9}{'sentences':>11}{'chars/s':>13}{'us/sentence':>13}"
        f"{'x2 time':>9}"
    )
    for label, chunker in (("1 char at a time", list), ("token-sized chunks", token_chunks)):
        text = REPLY * args.repeat
        chunks = chunker(text)
        seconds, sentences = min(run(chunks) for _ in range(3))
        double, _ = min(run(chunker(text * 2)) for _ in range(3))
        print(
            f"{label:<24}{len(text):>9}{sentences:>11}{len(text) / seconds:>13,.0f}"
            f"{seconds / sentences * 1e6:>13.1f}{double / seconds:>9.2f}"
        )

    seg = Segmenter()
    units = seg.feed(REPLY * args.repeat) + seg.flush()
    t0 = time.perf_counter()
    for unit in units:
        speakable(unit)
    per_unit = (time.perf_counter() - t0) / len(units)
    print(f"speakable(): {per_unit * 1e6:.1f} us per unit over {len(units)} units")


if __name__ == "__main__":
    main()
