"""``voicecli engine run``: the server, with its protocol, scheduler and limits, on this
user's private Unix socket, keeping Kokoro and the embedded LLM loaded for every
terminal's ``say`` and ``chat`` (clients: ``voicecli.engine.handle``, ``.client``).

Beyond the server's routes it answers ``GET /engine`` (who it is, whether its model is
ready, how many clients it has) and ``POST /engine/llm`` (start the embedded LLM once,
and say where it listens). It exits after ``engine_idle`` seconds with no client, and
removes its socket on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from voicecli.config import Settings
from voicecli.engine.handle import INFO_PATH, LLM_PATH
from voicecli.engine.identity import EngineIdentity
from voicecli.engine.runtime import SOCKET_NAME, record_pid, recorded_pid, runtime_dir
from voicecli.errors import VoiceCliError
from voicecli.server.app import create_app
from voicecli.server.guard import OPENAI_PREFIX, Guard, bearer, is_loopback
from voicecli.server.openai_api import AudioAPI
from voicecli.server.requests import Limits
from voicecli.server.run import bind, kokoro_factory, make_server
from voicecli.server.scheduler import Scheduler

log = logging.getLogger(__name__)

# How long a model that failed to load keeps answering /engine, so that the client
# that started it reads why, before the engine exits.
FAILED_LINGER = 5.0


def bind_unix(path: Path) -> socket.socket:
    """A listening socket at ``path``, 0600 from the start (umask), replacing a stale one.

    It is bound and listening under a name of its own first, then renamed into place: a
    client that found the path bound but not yet listening would be refused, take it for
    a dead engine's socket and remove it (under load, the engine starting then lost its
    socket and exited)."""
    staged = path.with_name(f".{os.getpid()}")  # no longer than the path's (sun_path)
    with contextlib.suppress(FileNotFoundError):
        staged.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(staged))
        sock.listen(128)
        os.replace(staged, path)
    except OSError as exc:
        sock.close()
        with contextlib.suppress(OSError):
            staged.unlink()
        raise VoiceCliError(f"Cannot listen on {path}: {exc.strerror or exc}.") from None
    finally:
        os.umask(old)
    return sock


class EngineHost:
    """The engine's own state beside the server's: its identity, its idle clock and the
    embedded LLM, started on first request from the loop's thread (which outlives it,
    as the LLM's parent-death signal needs)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.identity = EngineIdentity.of(settings)
        self.factory = kokoro_factory(settings)
        self.scheduler = Scheduler(self.factory, Limits(listeners=settings.listeners))
        self.started = time.monotonic()
        self.last_active = time.monotonic()
        self.llm = None
        self._llm_lock = asyncio.Lock()
        self.server = None  # the uvicorn server, to end it when idle
        self.http = (  # where OpenAI's audio API listens too, if asked
            f"{settings.engine_http_host}:{settings.engine_http}"
            if settings.engine_http is not None
            else None
        )

    async def info(self, request: Request) -> Response:
        self.last_active = time.monotonic()
        if self.scheduler.ready.is_set():
            state = "ready"
        elif self.scheduler.load_error is not None:
            state = "failed"
        else:
            state = "loading"
        return JSONResponse(
            {
                "pid": os.getpid(),
                "state": state,
                "error": self.scheduler.load_error,
                "identity": self.identity.record(),
                "clients": self.scheduler.clients,
                "uptime": round(time.monotonic() - self.started, 1),
                "idle_exit": self.settings.engine_idle,
                "llm": self.llm is not None and self.llm.running(),
                "voices": self._voices(),
                "http": self.http,
                "rss_mb": _rss_mb(),
            }
        )

    def _voices(self) -> list[str]:
        """The model's voice set, for clients to check a voice name before a turn."""
        model = self.scheduler.model
        return model.voices() if model is not None else []

    async def llm_endpoint(self, request: Request) -> Response:
        from voicecli.llm.embedded import LocalLLMServer

        self.last_active = time.monotonic()
        async with self._llm_lock:
            try:
                if self.llm is None or not self.llm.running():
                    self.llm = LocalLLMServer(
                        self.settings.llm_model_path,
                        n_threads=self.settings.llm_threads,
                        nice=self.settings.llm_nice,
                    )
                    self.llm.launch()  # on the loop's thread: see the class docstring
                    await asyncio.to_thread(self.llm.wait_ready)
            except VoiceCliError as exc:
                self.llm = None
                return JSONResponse({"error": str(exc)})
            endpoint = self.llm.endpoint
        self.last_active = time.monotonic()
        return JSONResponse(
            {
                "socket": endpoint.socket,
                "api_key": endpoint.api_key,
                "model": endpoint.model,
                "model_path": endpoint.model_path,
            }
        )

    async def watch(self) -> None:
        """End the server once idle for ``engine_idle`` seconds, or soon after its model
        failed to load."""
        failed_at = None
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            if self.scheduler.load_error is not None:
                failed_at = failed_at or now
                if now - failed_at > FAILED_LINGER:
                    break
                continue
            if self.http is not None or self.scheduler.clients or not self.scheduler.ready.is_set():
                self.last_active = now  # loading is not idling, nor serving the API
            elif now - self.last_active > self.settings.engine_idle:
                log.info("idle for %g s: exiting", self.settings.engine_idle)
                break
        if self.server is not None:
            self.server.should_exit = True

    def stop_llm(self) -> None:
        if self.llm is not None:
            self.llm.stop()


def _rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def run_engine(settings: Settings) -> None:
    """Serve on this user's engine socket until idle, stopped or killed."""
    directory = runtime_dir(settings)
    path = directory / SOCKET_NAME
    host = EngineHost(settings)
    tcp = None
    guard = None
    if settings.engine_http is not None:
        # OpenAI's routes alone on TCP, guarded as `serve` is; the Unix socket's mode
        # guards the rest (the engine's own routes hand out the LLM's key).
        key = settings.server_key
        where = settings.engine_http_host
        if not key and not is_loopback(where):
            raise VoiceCliError(
                f"The engine's audio API on {where}, beyond this machine, needs a key: "
                "give --api-key (or VOICECLI_SERVER_KEY)."
            )
        tcp = bind(where, settings.engine_http)
        guard = Guard(
            where,
            authorized=bearer(key) if key else None,
            offered=lambda route: route.startswith(OPENAI_PREFIX),
        )
    app = create_app(
        host.factory,
        scheduler=host.scheduler,
        routes=[
            Route(INFO_PATH, host.info, methods=["GET"]),
            Route(LLM_PATH, host.llm_endpoint, methods=["POST"]),
        ],
        background=host.watch,
        guard=guard,
        audio_api=AudioAPI.of(settings) if tcp is not None else None,
    )
    # Before the socket: a client that finds the engine gone quiet can still end it.
    pid_file = record_pid(directory)
    sock = bind_unix(path)
    inode = path.stat().st_ino
    level = "debug" if settings.verbose else "warning"
    server = make_server(host.factory, host.scheduler.limits, level, app=app)
    host.server = server
    log.info("voicecli engine %d listening on %s", os.getpid(), path)
    try:
        server.run(sockets=[sock] if tcp is None else [sock, tcp])
    finally:
        host.stop_llm()
        # Only our own socket: a newer engine may already listen at the same path.
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:
                path.unlink()
        with contextlib.suppress(OSError):
            if recorded_pid(directory) == os.getpid():
                pid_file.unlink()
        sock.close()
        if tcp is not None:
            tcp.close()
