"""``voicecli bench isolation``: does one client of ``voicecli serve`` keep its
speed while another misbehaves?

A healthy listener (the load bench's: sentences released as the scripted LLM
writes them, audio heard on a 1x playhead) takes turns against one server,
alone and beside each hostile client:

``non-reading``
    sends speak requests and then never reads: its replies back up until the
    server gives up on it;
``flooding``
    sends random control messages, frames and voices as fast as the server
    answers them, and reads every reply;
``long-text``
    sends the longest speak the server accepts, with no sentence break, again
    and again;
``flood-20``
    twenty flooding clients at once, from another address (``FLOOD_ADDRESS``), as a
    flood from elsewhere comes: each fills its own share of the queue, and none of
    them may lock the healthy one out.

The hostile clients run in a process of their own at the lowest priority, each with a
small send buffer: an attacker's CPU is its own machine's, and here they would otherwise
take the cores the server needs, which no server can refuse them, or write megabytes
ahead of what the server reads. Conditions alternate round by round (alone,
non-reading, flooding, long-text, alone, ...) so that drift of the machine hits them
alike. The server's resident
memory is read before and after a separate flood of random requests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from voicecli import protocol as p
from voicecli.bench.load import (
    open_server,
    run_turn,
    sentence_schedule,
    warm_up,
)
from voicecli.bench.machine import run_header
from voicecli.bench.metrics import percentile
from voicecli.bench.scenarios import ScriptedReply
from voicecli.errors import VoiceCliError

CONDITIONS = ("alone", "non-reading", "flooding", "long-text", "flood-20")
FLOODERS = 20
FLOOD_ADDRESS = "127.0.0.2"  # another loopback address: another client address to the server
ENGAGE = 1.0  # s a hostile client runs before the healthy turn starts
BETWEEN_ROUNDS = 1.0  # s between rounds, so one round's tail is not the next one's start
LONG_TEXT_CHARS = 2000  # under the server's limit, and with no sentence break
HOSTILE_SEND_BUFFER_BYTES = 16 * 1024  # per hostile connection (``connect``)
VOICES = ("jf_alpha", "af_heart", "../voices/x", "a" * 80, "jf_alpha:1e300", "", "x+y+z")


_CLIENT_LOG = logging.getLogger("voicecli.bench.clients")
_CLIENT_LOG.setLevel(logging.CRITICAL)


def connect(url: str, source: str | None = None) -> Any:
    from urllib.parse import urlsplit

    from websockets.sync.client import connect as ws_connect

    parts = urlsplit(url)
    address = None if source is None else (source, 0)
    sock = socket.create_connection((parts.hostname, parts.port), source_address=address)
    # What the server has not read yet waits in a small buffer, as on an attacker's own
    # machine, where Linux would otherwise let the client write megabytes ahead, and
    # spend this machine's cores making them: the server sees the same either way, a
    # client with more to send than it reads.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, HOSTILE_SEND_BUFFER_BYTES)

    # No keepalive thread: a client that stops reading would have it log a traceback
    # when the server stops answering; the non-reading client pings by hand instead.
    # A short close: a server busy sending to a client that does not read would not
    # answer the closing handshake, and the round would wait out websockets' 10 s.
    # Its own logger, quiet: a hostile client's connection is expected to end badly,
    # and websockets would print the traceback of each.
    return ws_connect(url + p.WS_PATH, open_timeout=10, max_size=None, max_queue=4,
                   ping_interval=None, close_timeout=1.0, logger=_CLIENT_LOG,
                   sock=sock)  # fmt: skip


def random_message(rng: random.Random, voice: str) -> str | bytes:
    """One message a careless or hostile client might send."""
    choice = rng.randrange(8)
    rid = f"r{rng.randrange(10**6)}"
    if choice == 0:
        words = rng.choice((None, 1, 2, 0, "1", [1]))  # word timings, asked for or not
        return p.encode_json(p.control(p.SPEAK, request_id=rid, text="Hi.", words=words))
    if choice == 1:
        return p.encode_json(p.control(p.CANCEL, request_id=rid))
    if choice == 2:
        voice = rng.choice((*VOICES, voice))
        return p.encode_json(p.control(p.SPEAK, request_id=rid, text="Hey.", voice=voice))
    if choice == 3:
        return "[" * rng.randrange(1, 5000)
    if choice == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if choice == 5:
        return json.dumps({"v": rng.choice([0, 2, "1", None, True]), "type": "speak"})
    if choice == 6:
        return json.dumps({"v": 1, "type": rng.choice(["hello", "", "SPEAK", "end "])})
    return json.dumps({"v": 1, "type": "cancel", "request_id": rng.choice([[1], {}, 3.5])})


class Hostile:
    """One misbehaving client on its own thread, until ``stop()``."""

    def __init__(
        self, kind: str, url: str, voice: str, seed: int = 0, source: str | None = None
    ) -> None:
        self.kind = kind
        self.url = url
        self.source = source
        self.voice = voice
        self.rng = random.Random(seed)
        self.sent = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._ws: Any = None
        self._thread = threading.Thread(target=self._run, name=f"bench-{kind}", daemon=True)

    def start(self) -> Hostile:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Hang up at once: a flood's unread messages would hold a closing handshake
        behind them for as long as the server takes to read them at its rate."""
        self._stop.set()
        ws = self._ws
        if ws is not None:
            # shutdown wakes a send blocked on a full buffer; close_socket would wait for
            # the lock that send holds.
            with contextlib.suppress(OSError):
                ws.socket.shutdown(socket.SHUT_RDWR)
        self._thread.join(30.0)

    def _run(self) -> None:
        behave = {
            "non-reading": self._non_reading,
            "flooding": self._flooding,
            "long-text": self._long_text,
        }[self.kind]
        try:
            while not self._stop.is_set():
                with connect(self.url, self.source) as ws:
                    self._ws = ws
                    behave(ws)
        except Exception as exc:  # noqa: BLE001 - the server may close on it: a result
            if not self._stop.is_set():
                self.error = f"{type(exc).__name__}: {exc}"[:200]

    def _non_reading(self, ws: Any) -> None:
        text = "This is a sentence that nobody will ever listen to. " * 8
        for k in range(p.MAX_IN_FLIGHT):
            ws.send(p.encode_json(p.control(p.SPEAK, request_id=f"n{k}", text=text)))
            self.sent += 1
        # Never read: wait until told to stop, or until the server hangs up.
        while not self._stop.wait(0.5):
            try:
                ws.ping()
            except Exception:  # noqa: BLE001 - closed by the server: reconnect and repeat
                return

    def _flooding(self, ws: Any) -> None:
        while not self._stop.is_set():
            ws.send(random_message(self.rng, self.voice))
            self.sent += 1
            _drain(ws)

    def _long_text(self, ws: Any) -> None:
        words = "and then the story went on without a single stop"
        text = ((words + " ") * (LONG_TEXT_CHARS // (len(words) + 1))).strip()
        k = 0
        while not self._stop.is_set():
            rid = f"l{k}"
            ws.send(p.encode_json(p.control(p.SPEAK, request_id=rid, text=text)))
            self.sent += 1
            k += 1
            # Read its audio until the request is answered, then ask again.
            while not self._stop.is_set():
                try:
                    reply = ws.recv(timeout=1.0)
                except TimeoutError:
                    continue
                if isinstance(reply, str) and rid in reply:
                    break


def _hostile_process(
    kind: str, url: str, voice: str, seeds: list[int], source: str | None,
    ready: Any, stop: Any, results: Any,
) -> None:  # fmt: skip
    os.nice(19)
    hostiles = [Hostile(kind, url, voice, seed, source).start() for seed in seeds]
    ready.set()
    stop.wait()
    for hostile in hostiles:
        hostile.stop()
    errors = sorted({h.error for h in hostiles if h.error})
    results.put({"sent": sum(h.sent for h in hostiles), "error": errors[0] if errors else None})


class HostileGroup:
    """Hostile clients of one kind, one per seed, in a process of their own at the
    lowest priority, until ``stop()`` (which returns what they sent)."""

    def __init__(
        self, kind: str, url: str, voice: str, seeds: list[int], source: str | None = None
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready = context.Event()
        self._stop = context.Event()
        self._results = context.Queue()
        self._process = context.Process(
            target=_hostile_process,
            args=(kind, url, voice, seeds, source, self._ready, self._stop, self._results),
            name=f"bench-{kind}",
            daemon=True,
        )

    def start(self) -> None:
        self._process.start()
        if not self._ready.wait(60):
            self._process.kill()
            raise VoiceCliError("The hostile clients did not start within 60 s.")

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        try:
            result = self._results.get(timeout=60)
        except queue.Empty:
            result = {"sent": 0, "error": "the hostile clients did not stop"}
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
        return result


def _drain(ws: Any) -> None:
    try:
        while True:
            ws.recv(timeout=0)
    except TimeoutError:
        pass


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def random_requests(url: str, count: int, voice: str, seed: int = 1) -> dict[str, Any]:
    """``count`` random messages over a few connections, every reply read."""
    rng = random.Random(seed)
    sent = connections = 0
    while sent < count:
        connections += 1
        try:
            with connect(url) as ws:
                for _ in range(min(500, count - sent)):
                    ws.send(random_message(rng, voice))
                    sent += 1
                    _drain(ws)
        except Exception:  # noqa: BLE001 - a close from the server ends this connection
            continue
    return {"sent": sent, "connections": connections}


def _stats(turns: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [t for t in turns if t["error"] is None]
    ttfa = [t["first_audio_ms"] for t in ok if t["first_audio_ms"] is not None]
    gaps = [max(t["gaps_ms"], default=0.0) for t in ok]
    return {
        "turns": len(turns),
        "turns_ok": len(ok),
        "ttfa_p50": percentile(ttfa, 50) if ttfa else None,
        "max_gap_p50": percentile(gaps, 50) if gaps else None,
        "max_gap_max": max(gaps) if gaps else None,
        "underruns": sum(t["underruns"] for t in ok),
        "errors": sorted({t["error"] for t in turns if t["error"]})[:3],
    }


def run_isolation(
    settings: Any,
    *,
    reply: ScriptedReply,
    tokens_per_second: float,
    rounds: int,
    scenario: str,
    output_dir: Path,
    turn_timeout: float,
    random_count: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    if settings.sagemaker_endpoint:
        raise VoiceCliError("--isolation drives `voicecli serve`; drop --sagemaker-endpoint.")
    schedule = sentence_schedule(
        reply, tokens_per_second, fast_first=settings.fast_first, code=settings.code
    )
    if not schedule:
        raise VoiceCliError("The bench reply has nothing to speak.")
    with ExitStack() as stack:
        server = open_server(settings, stack, output_dir / "isolation-serve.log", progress)
        url, pid = server["url"], server["pid"]
        options = {"voice": settings.voice, "speed": settings.speed, "timeout": turn_timeout}
        progress("warm-up turn (not counted)")
        warm_up(url, schedule, **options)
        turns: dict[str, list[dict[str, Any]]] = {c: [] for c in CONDITIONS}
        hostile_notes: dict[str, list[dict[str, Any]]] = {c: [] for c in CONDITIONS[1:]}
        for r in range(rounds):
            for k, condition in enumerate(CONDITIONS):
                progress(f"round {r + 1}/{rounds}: {condition}")
                group = None
                if condition == "flood-20":
                    seeds = [r * 100 + n for n in range(FLOODERS)]
                    group = HostileGroup("flooding", url, settings.voice, seeds, FLOOD_ADDRESS)
                elif condition != "alone":
                    group = HostileGroup(condition, url, settings.voice, [r * 10 + k])
                if group is not None:
                    group.start()
                    time.sleep(ENGAGE)
                try:
                    turn = run_turn(url, schedule, stop=threading.Event(), **options)
                finally:
                    if group is not None:
                        hostile_notes[condition].append(group.stop())
                turn.pop("timeline", None)
                turns[condition].append(turn)
                time.sleep(BETWEEN_ROUNDS)
        memory: dict[str, Any] = {"pid": pid, "before_mib": rss_mib(pid) if pid else None}
        if random_count:
            progress(f"{random_count} random requests, then the server's memory again")
            memory.update(random_requests(url, random_count, settings.voice))
            memory["after_mib"] = rss_mib(pid) if pid else None
        return {
            **run_header("isolation"),
            "scenario": scenario,
            "voice": settings.voice,
            "rounds": rounds,
            "conditions": {
                c: {"stats": _stats(turns[c]), "turns": turns[c], "hostile": hostile_notes.get(c)}
                for c in CONDITIONS
            },
            "memory": memory,
        }


def report_lines(result: dict[str, Any]) -> Iterator[str]:
    alone = result["conditions"]["alone"]["stats"]["ttfa_p50"]
    yield (
        f"Healthy client, {result['scenario']} scenario, {result['rounds']} turns per "
        "condition: first audio (p50) and the longest gap in a turn (p50 / max), ms."
    )
    yield f"{'condition':<12} {'first audio':>12} {'vs alone':>9} {'max gap':>8} {'worst':>7} ok"
    for name, c in result["conditions"].items():
        s = c["stats"]
        ratio = s["ttfa_p50"] / alone if alone and s["ttfa_p50"] else None

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.0f}"

        yield (
            f"{name:<12} {ms(s['ttfa_p50']):>12} {'-' if ratio is None else f'{ratio:.2f}x':>9} "
            f"{ms(s['max_gap_p50']):>8} {ms(s['max_gap_max']):>7} {s['turns_ok']}/{s['turns']}"
        )
        for error in s["errors"]:
            yield f"  {name}: {error}"
    m = result["memory"]
    if m.get("after_mib") is not None:
        yield (
            f"Server memory: {m['before_mib']:.0f} MiB before {m['sent']} random requests "
            f"({m['connections']} connections), {m['after_mib']:.0f} MiB after "
            f"(+{m['after_mib'] - m['before_mib']:.0f} MiB)."
        )
