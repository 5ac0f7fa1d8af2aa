"""``voicecli bench browser``: the terminal bench's A/B (streaming against buffered,
the same scripted reply, voice and model, modes alternated) measured in a real headless
Chromium on ``voicecli web``, at the browser's audio output.

The page times each stage on its own clock (``performance.now``), from the question
sent: the first text token on the page, the first audio frame received, the first frame
handed to the AudioWorklet, and the first sample audible, which is the worklet's output
frame mapped to the page's clock through ``AudioContext.getOutputTimestamp()`` (the
device's position and the time it was there, output latency included). Beside the first
sound, the first *substantive* sound: that of the first unit that is not a pure
acknowledgment (``acknowledgments.py``). Gaps are silences between one sentence's last
audible sample and the next one's first; underruns are the worklet running dry while
audio was due.

Chromium is Debian's (``chromium``), driven by Playwright through its
``executable_path``; the server is ``voicecli web`` in a process of its own, with
Kokoro in that process as in the terminal bench (``--no-engine``), or with ``--engine``
in the resident engine, as ``voicecli web`` runs by default.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any

from voicecli.bench.acknowledgments import first_substantive
from voicecli.bench.machine import machine_info
from voicecli.bench.metrics import AUDIBLE_GAP_MS, DELIVERIES, fmt, percentile, stats
from voicecli.bench.scenarios import ScriptedReply
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.protocol import SAMPLE_RATE

# (key, label): the page's stages, in order, in ms after the question was sent.
PAGE_STAGES = (
    ("first_text", "first text token at the page"),
    ("first_frame", "first audio frame received"),
    ("first_handed", "first frame handed to the worklet"),
    ("first_audible", "first sample audible"),
    ("substantive", "first substantive sample audible"),
    ("end", "turn end"),
)
WEB_START_TIMEOUT = 300.0  # seconds for `voicecli web` to load its model and listen
CHROMIUM_ARGS = ["--autoplay-policy=no-user-gesture-required"]


def find_chromium() -> str:
    """A Chromium to drive: $VOICECLI_CHROMIUM, or Debian's."""
    for candidate in (os.environ.get("VOICECLI_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and (path := shutil.which(candidate)):
            return path
    raise VoiceCliError(
        "No Chromium found: install Debian's (apt-get install chromium) or set "
        "VOICECLI_CHROMIUM to a Chromium or Chrome binary."
    )


@contextmanager
def web_server(settings: Settings, base_url: str, log_path: Any = None) -> Iterator[str]:
    """``voicecli web`` in a process of its own on a free loopback port: its page's URL."""
    engine = "--engine" if settings.engine else "--no-engine"
    argv = [sys.executable, "-m", "voicecli", "web", "--port", "0", engine]
    argv += ["--base-url", base_url, "--api-key", "bench", "--model", "scripted"]
    argv += ["--voice", settings.voice, "--synthesis", settings.synthesis]
    argv += ["--precision", settings.synth_precision]
    for flag, value in (("--model-dir", settings.model_dir), ("--lang", settings.lang)):
        if value is not None:
            argv += [flag, str(value)]
    stderr = open(log_path, "w") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    try:
        url = _wait_for_url(proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_path is not None:
            stderr.close()


def _wait_for_url(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + WEB_START_TIMEOUT
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise VoiceCliError(f"`voicecli web` exited (status {proc.wait()}) before serving.")
        if "open http" in line:
            return line.split("open ", 1)[1].strip()
    raise VoiceCliError(f"`voicecli web` did not serve within {WEB_START_TIMEOUT:g} s.")


@contextmanager
def chromium(env: dict[str, str] | None = None) -> Iterator[Any]:
    """A headless Chromium with its sound on (Playwright mutes it by default)."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        raise VoiceCliError(
            "bench browser needs Playwright: pip install 'voicecli[browser]'."
        ) from None
    executable = find_chromium()
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(
                executable_path=executable,
                headless=True,
                ignore_default_args=["--mute-audio"],
                args=CHROMIUM_ARGS,
                env={**os.environ, **(env or {})},
            )
        except Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no reason given"
            raise VoiceCliError(f"Cannot start Chromium ({executable}): {first}") from None
        try:
            yield browser
        finally:
            browser.close()


def ask(page: Any, question: str, buffered: bool, timeout: float) -> dict[str, Any]:
    """One turn on the page: its record (page-clock times, sentences, audio)."""
    page.set_default_timeout(timeout * 1000)
    return page.evaluate("([q, buffered]) => voicecli.ask(q, {buffered})", [question, buffered])


def trial_figures(record: dict[str, Any]) -> dict[str, Any]:
    """A page record's stages (ms after the question was sent), gaps and underruns."""
    t = record["t"]
    sent = t["sent"]
    out: dict[str, Any] = {
        key: (t[key] - sent if key in t else None) for key, _ in PAGE_STAGES if key != "substantive"
    }
    audible = {int(k): v for k, v in record["audible"].items()}
    sentences = {int(k): v for k, v in record["sentences"].items()}
    samples = {int(k): v for k, v in record["samples"].items()}
    substantive = first_substantive(sentences.items())
    out["substantive"] = (
        audible[substantive] - sent if substantive is not None and substantive in audible else None
    )
    # Gaps on the audio clock (the worklet's frame at each sentence's first sample):
    # mapped to the page's clock, each time carries getOutputTimestamp's jitter (tens of
    # milliseconds between two readings), which is not silence.
    frames = {int(k): v for k, v in record["frames"].items()}
    gaps = []
    order = sorted(frames)
    for before, after in zip(order, order[1:], strict=False):
        end = frames[before] + samples.get(before, 0)
        gaps.append(max(0.0, (frames[after] - end) / SAMPLE_RATE * 1000.0))
    out["gaps_ms"] = gaps
    out["max_gap"] = max(gaps) if gaps else 0.0
    out["audible_gaps"] = sum(1 for g in gaps if g > AUDIBLE_GAP_MS)
    out["underruns"] = record["underruns"]
    return out


def run_browser(
    settings: Settings,
    *,
    reply: ScriptedReply,
    tokens_per_second: float,
    trials: int,
    timeout: float,
    scenario: str,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    from voicecli.bench.scripted_llm import ScriptedLLM

    run: dict[str, Any] = {
        "bench": "browser",
        "started": datetime.now(UTC).isoformat(),
        "scenario": scenario,
        "voice": settings.voice,
        "engine": settings.engine,
        "llm": {"kind": "scripted", "tokens_per_second": tokens_per_second},
        "machine": machine_info(),
        "browser": find_chromium(),
        "trials": [],
    }
    with ExitStack() as stack:
        llm = stack.enter_context(ScriptedLLM(reply.script(tokens_per_second)))
        progress(
            f"starting voicecli web ({'--engine' if settings.engine else '--no-engine'}) "
            "and Chromium…"
        )
        url = stack.enter_context(web_server(settings, llm.base_url))
        browser = stack.enter_context(chromium())
        page = browser.new_page()
        page.goto(url)
        warm = ask(page, "bench", False, timeout)  # uncounted: first passes, the page's audio
        run["warmup"] = warm
        run["browser_version"] = browser.version
        for pair in range(trials):
            for mode in DELIVERIES:
                record = ask(page, "bench", mode == "buffered", timeout)
                trial = {"mode": mode, "pair": pair, "record": record}
                trial["error"] = record.get("error") or (
                    "interrupted" if record.get("interrupted") else None
                )
                trial["figures"] = trial_figures(record)
                run["trials"].append(trial)
                first = trial["figures"]["first_audible"]
                progress(f"{mode} {pair + 1}/{trials}: first audible {fmt(first)} ms")
        latency = page.evaluate(
            "[voicecli.state.ctx.outputLatency, voicecli.state.ctx.baseLatency]"
        )
        run["output_latency_s"], run["base_latency_s"] = latency
    run["summary"] = summarize(run)
    return run


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k, _ in PAGE_STAGES] + ["max_gap", "audible_gaps", "underruns"]
    modes = {}
    for mode in DELIVERIES:
        rows = [t["figures"] for t in run["trials"] if t["mode"] == mode and not t["error"]]
        modes[mode] = {k: stats([r[k] for r in rows]) for k in keys}
    s = modes["streaming"]["first_audible"]["median"]
    b = modes["buffered"]["first_audible"]["median"]
    pairs: dict[int, dict[str, float]] = {}
    for t in run["trials"]:
        value = t["figures"]["first_audible"]
        if not t["error"] and value:
            pairs.setdefault(t["pair"], {})[t["mode"]] = value
    paired = [p["buffered"] / p["streaming"] for p in pairs.values() if len(p) == 2]
    texts = {tuple(sorted(t["record"]["sentences"].items())) for t in run["trials"]}
    return {
        "modes": modes,
        "ratio_of_medians": b / s if s and b else None,
        "paired_ratio_median": percentile(paired, 50) if paired else None,
        "identical_text": len(texts) <= 1,
        "failed": [
            f"{t['mode']} {t['pair'] + 1}: {t['error']}" for t in run["trials"] if t["error"]
        ],
    }


def report_lines(run: dict[str, Any]) -> list[str]:
    summary = run["summary"]
    modes = summary["modes"]
    lines = [
        f"voicecli bench browser: {run['scenario']}, voice {run['voice']}, "
        f"{'the resident engine' if run.get('engine') else 'Kokoro in the web process'}, "
        f"{run['llm']['tokens_per_second']:g} tokens/s, headless {run.get('browser_version')}; "
        f"ms after the question was sent, on the page's clock (p50 / p90).",
        f"{'stage':<36}{'streaming':>18}{'buffered':>18}",
    ]
    for key, label in [*PAGE_STAGES, ("max_gap", "max gap per turn"), ("underruns", "underruns")]:
        cells = [
            f"{fmt(modes[m][key]['median'])} / {fmt(modes[m][key]['p90'])}" for m in DELIVERIES
        ]
        lines.append(f"{label:<36}{cells[0]:>18}{cells[1]:>18}")
    lines.append(
        f"Buffered / streaming, first audible: {fmt(summary['ratio_of_medians'], 2)}x on "
        f"medians, {fmt(summary['paired_ratio_median'], 2)}x median of adjacent pairs. "
        f"Output latency reported by the page: {fmt((run.get('output_latency_s') or 0) * 1000)} ms."
    )
    if not summary["identical_text"]:
        lines.append("WARNING: the trials did not all speak the same sentences.")
    lines += [f"FAILED {f}" for f in summary["failed"]]
    return lines


# --- outputs -------------------------------------------------------------------------
def representative(run: dict[str, Any], mode: str) -> dict[str, Any] | None:
    """The trial of ``mode`` whose first audible sample is closest to the mode's median."""
    trials = [
        t
        for t in run["trials"]
        if t["mode"] == mode and not t["error"] and t["figures"]["first_audible"] is not None
    ]
    if not trials:
        return None
    median = percentile([t["figures"]["first_audible"] for t in trials], 50)
    return min(trials, key=lambda t: abs(t["figures"]["first_audible"] - median))


def waterfall_svg(trial: dict[str, Any], span_ms: float) -> str:
    """One turn: the page's stages as ticks, then each sentence from its first audible
    sample for as long as its audio lasts."""
    record, figures = trial["record"], trial["figures"]
    sent = record["t"]["sent"]
    width, left, row = 900, 230, 22
    scale = (width - left - 20) / max(span_ms, 1.0)
    sentences = sorted((int(k), v) for k, v in record["sentences"].items())
    stages = [(k, label) for k, label in PAGE_STAGES if figures.get(k) is not None]
    height = row * (len(stages) + len(sentences) + 2)

    def x(ms: float) -> float:
        return left + ms * scale

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    y = row
    for key, label in stages:
        ms = figures[key]
        parts.append(f'<text x="4" y="{y + 14}" font-size="12">{html.escape(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 4}" width="{ms * scale:.1f}" height="12" ')
        parts.append(f'fill="#c7c7c7"/><text x="{x(ms) + 4:.1f}" y="{y + 14}" font-size="11">')
        parts.append(f"{ms:.0f} ms</text>")
        y += row
    audible = {int(k): v - sent for k, v in record["audible"].items()}
    samples = {int(k): v for k, v in record["samples"].items()}
    for index, text in sentences:
        short = html.escape(text if len(text) <= 32 else text[:31] + "…")
        parts.append(f'<text x="4" y="{y + 14}" font-size="12">{index}: {short}</text>')
        if index in audible:
            length = samples.get(index, 0) / SAMPLE_RATE * 1000.0
            parts.append(
                f'<rect x="{x(audible[index]):.1f}" y="{y + 4}" width="{length * scale:.1f}" '
                'height="12" fill="#59a14f"/>'
            )
        y += row
    parts.append("</svg>")
    return "".join(parts)


def write(run: dict[str, Any], out_dir: Any, stem: str) -> list[Any]:
    from voicecli.bench.report import write_json

    paths = [write_json(run, out_dir / f"{stem}.json")]
    picked = {mode: representative(run, mode) for mode in DELIVERIES}
    ends = [t["figures"]["end"] or 0 for t in picked.values() if t is not None]
    span = max(ends, default=1.0)
    body = [f"<pre>{html.escape(chr(10).join(report_lines(run)))}</pre>"]
    for mode, trial in picked.items():
        if trial is not None:
            body.append(f"<h2>{mode} (the trial nearest the median)</h2>")
            body.append(waterfall_svg(trial, span))
    page = (
        '<!doctype html><html><head><meta charset="utf-8"><title>voicecli bench browser'
        f"</title></head><body>{''.join(body)}</body></html>"
    )
    html_path = out_dir / f"{stem}.html"
    html_path.write_text(page, encoding="utf-8")
    paths.append(html_path)
    return paths
