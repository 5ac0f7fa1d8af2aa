"""``voicecli bench load N``: N concurrent conversations against ``voicecli serve``.

Each conversation is a listener with a virtual playhead. Its sentences go to the
server over the WebSocket protocol at the moments the scripted LLM would have
released them (the real segmenter run over the token schedule), and its reads
are paced at playback speed: audio "plays" at the protocol's sample rate from
the moment the first frame arrived, and the client reads no further ahead than
a player's ring buffer would hold. A frame that arrives after the playhead
needed it is an underrun; the playhead waits, and the wait before a sentence's
first frame is that sentence's gap.

Everything is bounded: a turn has a hard timeout, a level has a deadline, the
server has a startup timeout, and only loopback endpoints are accepted (this
is a load generator: it must not be pointed at someone else's machine).
"""

from __future__ import annotations

import ipaddress
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from voicecli import protocol as p
from voicecli.bench.machine import run_header
from voicecli.bench.metrics import percentile
from voicecli.bench.scenarios import ScriptedReply
from voicecli.cancel import CancelToken
from voicecli.child import ChildProcess, free_port
from voicecli.errors import VoiceCliError
from voicecli.pipeline import TextUnits, TurnOptions

GAP_LIMIT_MS = 100.0  # the knee: the first N whose p95 gap exceeds this
UNDERRUN_TOLERANCE = 0.005  # s: later than this is an underrun (a tenth of a device block)
MAX_AHEAD = 10.0  # s of audio a client holds unplayed, as the player's ring buffer does
IN_FLIGHT = 2  # unanswered sentences per conversation: the next one waits at the server
THINK = 0.5  # s between hearing a reply's end and asking the next question
MAX_STAGGER = 10.0  # s: conversations start spread over one reply, at most this far apart
STARTUP_TIMEOUT = 300.0  # s for `voicecli serve` to load the model and answer /ping


@dataclass(frozen=True)
class Release:
    at: float  # seconds after the turn's request
    text: str  # spoken form, as the pipeline would send it


def sentence_schedule(
    reply: ScriptedReply, tokens_per_second: float, *, fast_first: bool, code: str
) -> list[Release]:
    """When the pipeline would release each unit of ``reply`` at this token rate."""
    units = TextUnits(TurnOptions(fast_first=fast_first, code=code))
    times = reply.token_times(tokens_per_second)
    out = [
        Release(at, spoken)
        for token, at in zip(reply.tokens, times, strict=True)
        for _, spoken in units.feed(token)
    ]
    end = times[-1] if times else 0.0
    return out + [Release(end, spoken) for _, spoken in units.flush()]


# --- the server -----------------------------------------------------------------------------
def require_loopback(endpoint_url: str) -> str:
    """The host of ``endpoint_url`` if it is this machine; VoiceCliError otherwise."""
    host = urlsplit(endpoint_url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise VoiceCliError(
            f"--load only targets this machine, and {endpoint_url!r} is not a loopback "
            "address. Use ws://127.0.0.1:PORT, or drop --endpoint-url to let the bench start "
            "`voicecli serve` itself."
        )
    return host


def http_base(endpoint_url: str) -> str:
    parts = urlsplit(endpoint_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return f"{scheme}://{parts.netloc}"


def wait_for_ping(
    base: str, timeout: float, alive: Callable[[], str | None], *, warm: bool = False
) -> None:
    """Until GET /ping answers 200 (and, with ``warm``, says the server's idle warm-up is
    over); ``alive`` returns why the server is gone, if it is."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    state = "ready (warm)" if warm else "ready"
    while time.monotonic() < deadline:
        gone = alive()
        if gone:
            raise VoiceCliError(gone)
        try:
            with urllib.request.urlopen(f"{base}/ping", timeout=2.0) as response:
                if response.status == 200 and (not warm or json.load(response).get("warm")):
                    return
                last = "not warm yet"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"  # 503 while the model loads, or once it has failed to
            failed = _load_failure(exc)
            if failed:
                raise VoiceCliError(
                    f"The speech server at {base} could not load: {failed}"
                ) from None
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        time.sleep(0.2)
    raise VoiceCliError(
        f"The speech server at {base} was not {state} within {timeout:.0f} s (last /ping: {last})."
    )


def _load_failure(answer: urllib.error.HTTPError) -> str | None:
    """Why the server's model failed to load, if its /ping answer says it did."""
    try:
        body = json.loads(answer.read())
    except (OSError, ValueError):
        return None
    if isinstance(body, dict) and body.get("status") == "failed":
        return str(body.get("message", "no reason given"))[:500]
    return None


class ServeProcess:
    """`voicecli serve` as a child process on a free loopback port."""

    def __init__(self, settings: Any, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.port = free_port()
        self.child = ChildProcess(self.command(), log_path, grace=10.0)

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        s = self.settings
        cmd = [
            sys.executable,
            "-m",
            "voicecli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--voice",
            s.voice,
        ]
        if s.model_dir is not None:
            cmd += ["--model-dir", str(s.model_dir)]
        if s.lang:
            cmd += ["--lang", s.lang]
        return cmd

    def start(self) -> None:
        self.child.start()
        wait_for_ping(f"http://127.0.0.1:{self.port}", STARTUP_TIMEOUT, self._gone)

    def _gone(self) -> str | None:
        code = self.child.exit_code()
        if code is None:
            return None
        return (
            f"`voicecli serve` exited with code {code} before it was ready. Its log "
            f"({self.log_path}) ends with:\n" + self.child.log_tail(8)
        )

    def stop(self) -> None:
        self.child.stop()


def warm_up(url: str, schedule: list[Release], **options: Any) -> dict[str, Any]:
    """One uncounted turn, so that no measured turn pays for the server's first pass."""
    warmup = run_turn(url, schedule, stop=threading.Event(), **options)
    if warmup["error"]:
        raise VoiceCliError(f"The warm-up turn against {url} failed: {warmup['error']}")
    return warmup


def open_server(
    settings: Any, stack: ExitStack, log_path: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The server a bench drives: ``--endpoint-url`` on loopback, or a ``voicecli serve``
    started here (stopped by ``stack``); what it is, for the report, with its ``url`` and,
    when started here, its ``pid``."""
    if settings.endpoint_url:
        require_loopback(settings.endpoint_url)
        url = settings.endpoint_url
        wait_for_ping(http_base(url), 30.0, lambda: None)
        return {"kind": "external", "url": url, "pid": None}
    process = ServeProcess(settings, log_path)
    stack.callback(process.stop)
    progress(f"starting `voicecli serve` on 127.0.0.1:{process.port} (log: {process.log_path})")
    process.start()
    return {
        "kind": "subprocess",
        "url": process.ws_url,
        "command": process.command(),
        "pid": process.child.pid,
    }


# --- one conversation -----------------------------------------------------------------------
class PacedListener:
    """A listener that plays audio at 1x from the first frame and notes every late frame."""

    def __init__(self, sample_rate: int) -> None:
        self.rate = sample_rate
        self.first_at: float | None = None
        self.runs_out: float = 0.0  # when the audio received so far has all been played
        self.underruns = 0
        self.stall = 0.0  # total seconds of silence after the first frame
        self.audio = 0.0

    def arrive(self, samples: int, now: float) -> float:
        """Take a frame that arrived at ``now``; the seconds the playhead waited for it."""
        late = 0.0
        if self.first_at is None:
            self.first_at = self.runs_out = now
        elif now > self.runs_out:
            late = now - self.runs_out
            self.stall += late
            if late > UNDERRUN_TOLERANCE:
                self.underruns += 1
            self.runs_out = now
        self.runs_out += samples / self.rate
        self.audio += samples / self.rate
        return late


def _sentences(
    schedule: list[Release],
    start: float,
    cancel: CancelToken,
) -> Iterator[Any]:
    from voicecli.frames import Sentence

    for index, release in enumerate(schedule):
        wait = start + release.at - time.monotonic()
        if wait > 0 and cancel.wait(wait):
            return
        yield Sentence(index, release.text, release.text)


def run_turn(
    url: str,
    schedule: list[Release],
    *,
    voice: str,
    speed: float,
    timeout: float,
    stop: threading.Event,
) -> dict[str, Any]:
    """One reply heard by one listener; every figure in ms after the turn's request."""
    from voicecli.timeline import Timeline
    from voicecli.tts.remote import WebSocketSynthesizer

    synth = WebSocketSynthesizer(
        url,
        voice=voice,
        speed=speed,
        open_timeout=10.0,
        read_timeout=min(60.0, timeout),
        max_in_flight=IN_FLIGHT,
    )
    cancel = CancelToken()
    timeline = Timeline("load")
    watchdog = threading.Timer(timeout, cancel.cancel, args=("timeout",))
    watchdog.daemon = True
    start = time.monotonic()
    watchdog.start()
    playhead = PacedListener(synth.sample_rate)
    seen: set[int] = set()
    gaps: list[float] = []  # ms, one per sentence after the first
    error: str | None = None
    try:
        for chunk in synth.stream(_sentences(schedule, start, cancel), cancel, timeline):
            if stop.is_set():
                cancel.cancel("stopped")
            if not chunk.samples.size:
                continue
            late = playhead.arrive(int(chunk.samples.size), time.monotonic())
            if chunk.sentence not in seen:
                seen.add(chunk.sentence)
                if chunk.sentence > 0:
                    gaps.append(late * 1000.0)
            ahead = playhead.runs_out - time.monotonic() - MAX_AHEAD
            if ahead > 0 and cancel.wait(ahead):
                break
        # The listener hears the rest before the turn is over.
        rest = playhead.runs_out - time.monotonic()
        if rest > 0:
            cancel.wait(rest)
    except VoiceCliError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - one broken turn is a result, not a crash
        error = f"{type(exc).__name__}: {exc}"
    finally:
        watchdog.cancel()
    if cancel.reason == "timeout":
        error = f"the turn took longer than {timeout:g} s"
    elif cancel.reason == "stopped":
        error = "stopped at the level's deadline"
    if error is None and len(seen) < len(schedule):
        error = f"only {len(seen)} of {len(schedule)} sentences came back"
    return {
        "start": start,
        "first_audio_ms": (
            None if playhead.first_at is None else (playhead.first_at - start) * 1000.0
        ),
        "gaps_ms": gaps,
        "underruns": playhead.underruns,
        "stall_ms": playhead.stall * 1000.0,
        "audio_s": playhead.audio,
        "error": error,
        "timeline": timeline.to_dict(),
    }


def conversation(
    url: str,
    schedule: list[Release],
    *,
    turns: int,
    delay: float,
    voice: str,
    speed: float,
    timeout: float,
    stop: threading.Event,
    out: list[dict[str, Any]],
) -> None:
    if delay and stop.wait(delay):
        return
    for turn in range(turns):
        if stop.is_set():
            return
        result = run_turn(url, schedule, voice=voice, speed=speed, timeout=timeout, stop=stop)
        result["turn"] = turn
        out.append(result)
        if stop.wait(THINK):
            return


def run_level(
    url: str,
    n: int,
    schedule: list[Release],
    *,
    turns: int,
    reply_s: float,
    voice: str,
    speed: float,
    timeout: float,
) -> dict[str, Any]:
    stop = threading.Event()
    results: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    # Spread the first questions over one reply, as independent users would be.
    stagger = min(MAX_STAGGER, reply_s) / n
    threads = [
        threading.Thread(
            target=conversation,
            name=f"bench-load-{k}",
            daemon=True,
            args=(url, schedule),
            kwargs={
                "turns": turns,
                "delay": k * stagger,
                "voice": voice,
                "speed": speed,
                "timeout": timeout,
                "stop": stop,
                "out": results[k],
            },
        )
        for k in range(n)
    ]
    began = time.monotonic()
    deadline = began + n * stagger + turns * (timeout + THINK) + 30.0
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for thread in threads:
        thread.join(15.0)
    wall = time.monotonic() - began
    level = {
        "n": n,
        "stagger_s": stagger,
        "wall_s": wall,
        "conversations": [{"index": k, "turns": r} for k, r in enumerate(results)],
    }
    level["stats"] = level_stats(level, turns * n)
    return level


def level_stats(level: dict[str, Any], expected: int) -> dict[str, Any]:
    turns = [t for c in level["conversations"] for t in c["turns"]]
    ok = [t for t in turns if t["error"] is None]
    ttfa = [t["first_audio_ms"] for t in ok if t["first_audio_ms"] is not None]
    gaps = [g for t in ok for g in t["gaps_ms"]]
    errors = [t["error"] for t in turns if t["error"] is not None]
    missing = expected - len(turns)

    def pct(values: list[float], q: float) -> float | None:
        return percentile(values, q) if values else None

    return {
        "turns": expected,
        "turns_ok": len(ok),
        "ttfa_p50": pct(ttfa, 50),
        "ttfa_p95": pct(ttfa, 95),
        "gap_p50": pct(gaps, 50),
        "gap_p95": pct(gaps, 95),
        "gap_max": max(gaps) if gaps else None,
        "underruns": sum(t["underruns"] for t in turns),
        "errors": len(errors) + missing,
        "error_samples": sorted(set(errors))[:3]
        + ([f"{missing} turns never started before the deadline"] if missing else []),
        "load_factor": sum(t["audio_s"] for t in turns) / level["wall_s"]
        if level["wall_s"] > 0
        else None,
    }


def run_load(
    settings: Any,
    *,
    levels: list[int],
    reply: ScriptedReply,
    tokens_per_second: float,
    turns: int,
    scenario: str,
    output_dir: Path,
    turn_timeout: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:

    if settings.sagemaker_endpoint:
        raise VoiceCliError(
            "--load drives `voicecli serve` on this machine; it does not take "
            "--sagemaker-endpoint. Use --endpoint-url ws://127.0.0.1:PORT or "
            "neither."
        )
    schedule = sentence_schedule(
        reply, tokens_per_second, fast_first=settings.fast_first, code=settings.code
    )
    if not schedule:
        raise VoiceCliError("The bench reply has nothing to speak.")
    with ExitStack() as stack:
        server = open_server(settings, stack, output_dir / "load-serve.log", progress)
        url = server["url"]
        options = {"voice": settings.voice, "speed": settings.speed, "timeout": turn_timeout}
        progress("warm-up turn (not counted)")
        warmup = warm_up(url, schedule, **options)
        result: dict[str, Any] = {
            **run_header("load"),
            "scenario": scenario,
            "text": reply.text,
            "tokens_per_second": tokens_per_second,
            "pauses": {str(k): v for k, v in reply.pauses.items()},
            "schedule": [{"at": r.at, "text": r.text} for r in schedule],
            "voice": settings.voice,
            "speed": settings.speed,
            "lang": settings.lang,
            "model_dir": str(settings.model_dir) if settings.model_dir else None,
            "server": server,
            "turns": turns,
            "sample_rate": p.SAMPLE_RATE,
            "gap_limit_ms": GAP_LIMIT_MS,
            "underrun_tolerance_s": UNDERRUN_TOLERANCE,
            "max_ahead_s": MAX_AHEAD,
            "in_flight_per_conversation": IN_FLIGHT,
            "think_s": THINK,
            "warmup": warmup,
            "levels": [],
        }
        for n in levels:
            progress(f"load N={n}: {n} conversations x {turns} turns")
            level = run_level(url, n, schedule, turns=turns, reply_s=warmup["audio_s"], **options)
            result["levels"].append(level)
        result["knee_n"] = next(
            (
                lv["n"]
                for lv in result["levels"]
                if lv["stats"]["gap_p95"] is not None and lv["stats"]["gap_p95"] > GAP_LIMIT_MS
            ),
            None,
        )
        return result
