"""``voicecli bench soak``: does a long-lived server give its memory back?

One client sends a mix of the texts a server meets over hours (normal turns among
long prose, a run-on 2000-character sentence, emoji and ZWJ families, unbroken words
and runs of punctuation), each read to its end, for ``seconds``. The server's resident
memory is sampled throughout. Its baseline is read ``idle`` seconds after a warm-up
turn and the server's own warm-up, and again ``idle`` seconds after the soak: the goal
is at most +200 MB.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from voicecli import protocol as p
from voicecli.bench.isolation import connect, rss_mib
from voicecli.bench.load import http_base, open_server, wait_for_ping
from voicecli.bench.machine import run_header
from voicecli.errors import VoiceCliError

GOAL_MIB = 200.0
SAMPLE_EVERY = 0.5  # s between readings of the server's memory
REQUEST_TIMEOUT = 600.0  # s; one 2000-character text is about 30 s of work here
WARM_TIMEOUT = 120.0  # s for the server's idle warm-up (a few passes and a voice's prior)

_NORMAL = "Sure, here is the short answer you asked for."
_PROSE = (
    "The quick brown fox jumps over the lazy dog. The farmer watches from the porch, "
    "thinking about the harvest and the long winter ahead. "
) * 15
_RUN_ON = "and then the story went on without a single stop " * 40

# In order: a cycle puts the cheap odd texts first, so a short soak still meets them.
MIX: tuple[tuple[str, str], ...] = (
    ("normal", _NORMAL),
    ("dots", "." * 1999),
    ("emoji", "😀" * 1000),
    ("punctuation-run", "Wait" + "!?" * 500 + " what."),
    ("zwj-families", "Family: " + "👨\u200d👩\u200d👧\u200d👦" * 250),
    ("unbroken-word", "x7" * 999),
    ("hash", "Commit 3f2a9c0b7e5d41a8c6f90e12b3d4a5c6e7f80912 landed."),
    ("normal", _NORMAL),
    ("emoji-words", "Nice 🎉 work 👍🏽 team ✨ " * 60),
    ("long-prose", _PROSE[:2000]),
    ("normal", _NORMAL),
    ("run-on", _RUN_ON[:2000].strip()),
)


def speak_and_read(ws: Any, request_id: str, text: str, voice: str | None) -> dict[str, Any]:
    """One speak, read to its terminal reply: how it ended and how much audio it gave."""
    ws.send(p.encode_json(p.control(p.SPEAK, request_id=request_id, text=text, voice=voice)))
    samples = 0
    deadline = time.monotonic() + REQUEST_TIMEOUT
    while time.monotonic() < deadline:
        match p.decode_server_frame(ws.recv(timeout=deadline - time.monotonic())):
            case p.AudioFrame(pcm=pcm):
                samples += len(pcm) // 2
                continue
            case {"request_id": rid} if rid != request_id:
                continue
            case {"type": p.SENTENCE_DONE} as message:
                ended = "truncated" if message.get("truncated") else "spoken"
            case message:
                ended = f"{message['type']}: {message.get('code')}"
        return {"ended": ended, "audio_s": round(samples / p.SAMPLE_RATE, 2)}
    raise VoiceCliError(f"The server did not finish a request within {REQUEST_TIMEOUT:g} s.")


class Sampler:
    """Reads a process's resident memory every ``SAMPLE_EVERY`` seconds, on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = time.monotonic()
        self.series: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            mib = rss_mib(self.pid)
            if mib is not None:
                self.series.append((round(time.monotonic() - self.start, 2), round(mib, 1)))
            self._stop.wait(SAMPLE_EVERY)


def run_soak(
    settings: Any,
    *,
    seconds: float,
    idle: float,
    output_dir: Path,
    progress: Callable[[str], None],
    mix: tuple[tuple[str, str], ...] = MIX,
) -> dict[str, Any]:
    """Requests from ``mix`` in turn for ``seconds``, and at least once each."""
    if settings.sagemaker_endpoint or settings.endpoint_url:
        raise VoiceCliError("--soak starts its own `voicecli serve` to watch its memory.")
    with ExitStack() as stack:
        server = open_server(settings, stack, output_dir / "soak-serve.log", progress)
        url, pid = server["url"], server["pid"]
        requests: list[dict[str, Any]] = []
        with connect(url) as ws, Sampler(pid) as sampler:
            progress("warm-up turn and the server's own warm-up, then idle: the baseline")
            speak_and_read(ws, "warm", _NORMAL, settings.voice)
            # Its warm-up learns the voice's prior by decoding whole sentences and gives
            # that memory back only when done: a reading amid it is no baseline (nor an
            # end, if it resumes in the soak's closing idle).
            wait_for_ping(http_base(url), WARM_TIMEOUT, lambda: None, warm=True)
            time.sleep(idle)
            baseline = rss_mib(pid)
            began = time.monotonic()
            for k, (kind, text) in enumerate(itertools.cycle(mix)):
                if k >= len(mix) and time.monotonic() - began >= seconds:
                    break
                progress(f"{kind} ({len(text)} characters)")
                result = speak_and_read(ws, f"s{k}", text, settings.voice)
                requests.append({"kind": kind, "chars": len(text), **result})
            soaked = time.monotonic() - began
            progress(f"idle {idle:g} s")
            time.sleep(idle)
            after = rss_mib(pid)
        peak = max((mib for _, mib in sampler.series), default=None)
        grown = None if after is None or baseline is None else round(after - baseline, 1)
        return {
            **run_header("soak"),
            "voice": settings.voice,
            "seconds": round(soaked, 1),
            "idle_s": idle,
            "baseline_mib": baseline,
            "peak_mib": peak,
            "after_idle_mib": after,
            "grown_mib": grown,
            "goal_mib": GOAL_MIB,
            "met": grown is not None and grown <= GOAL_MIB,
            "requests": requests,
            "rss_series": sampler.series,
        }


def report_lines(result: dict[str, Any]) -> Iterator[str]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for request in result["requests"]:
        kinds.setdefault(request["kind"], []).append(request)
    yield f"Soak: {len(result['requests'])} requests in {result['seconds']:g} s, one client."
    yield f"{'text':<16} {'sent':>4} {'audio s (max)':>13}  ended"
    for kind, items in kinds.items():
        ends = sorted({item["ended"] for item in items})
        longest = max(item["audio_s"] for item in items)
        yield f"{kind:<16} {len(items):>4} {longest:>13.1f}  {', '.join(ends)}"
    verdict = "met" if result["met"] else "NOT met"
    yield (
        f"server memory: {result['baseline_mib']:.0f} MiB after warm-up, peak "
        f"{result['peak_mib']:.0f}, {result['after_idle_mib']:.0f} after {result['idle_s']:g} s "
        f"idle: {result['grown_mib']:+.0f} MiB (goal +{GOAL_MIB:.0f}: {verdict})"
    )
