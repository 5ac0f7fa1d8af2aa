"""The resident engine as its clients see it: one background ``voicecli engine run`` per
user that keeps Kokoro (model, voices, G2P) and the embedded LLM loaded, reached over a
private Unix socket (``runtime``) with the server's own protocol. ``EngineHandle`` finds
it, starts it, checks that it speaks for these settings (``identity``) and stops it; one
lock file serialises starting, so two terminals never start two engines.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voicecli.child import tail
from voicecli.config import Settings
from voicecli.engine.identity import EngineIdentity, describe_record
from voicecli.engine.runtime import (
    LOCK_NAME,
    LOG_NAME,
    PID_NAME,
    SOCKET_NAME,
    open_private,
    recorded_pid,
    runtime_dir,
)
from voicecli.errors import VoiceCliError

INFO_PATH = "/engine"  # GET: identity and state; the engine's own route
LLM_PATH = "/engine/llm"  # POST: start the embedded LLM if needed, and say where it is
START_TIMEOUT = 120.0  # loading Kokoro takes seconds; a machine under load, more
PROBE_TIMEOUT = 3.0  # an engine that does not answer its socket within this is stuck
STOP_TIMEOUT = 10.0

Notify = Callable[[str], None]


class EngineUnavailable(VoiceCliError):
    """The engine could not be started, or did not get ready."""


class _UnixHTTP(http.client.HTTPConnection):
    """HTTP/1.1 to the engine's Unix socket, with a timeout on every step."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("voicecli-engine", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


@dataclass(frozen=True)
class Stopped:
    pid: int
    answered: bool  # False: it did not answer, and was ended by its recorded pid


@dataclass(frozen=True)
class EngineInfo:
    pid: int
    state: str  # loading | ready | failed
    identity: EngineIdentity | None  # None: an engine of another voicecli
    clients: int
    error: str | None = None
    details: dict[str, Any] | None = None

    def describe(self) -> str:
        return describe_record((self.details or {}).get("identity"))

    @property
    def http(self) -> str | None:
        """Where its OpenAI audio API listens (HOST:PORT), if it has one."""
        value = (self.details or {}).get("http")
        return value if isinstance(value, str) else None


class EngineHandle:
    """This user's engine: find it, start it, check it speaks for these settings, stop it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.identity = EngineIdentity.of(settings)
        self.dir = runtime_dir(settings)
        self.socket = self.dir / SOCKET_NAME
        self.log_path = self.dir / LOG_NAME
        self._process: subprocess.Popen[bytes] | None = None  # the engine this started

    @property
    def http_address(self) -> str | None:
        """HOST:PORT of the OpenAI audio API these settings ask the engine for."""
        if self.settings.engine_http is None:
            return None
        return f"{self.settings.engine_http_host}:{self.settings.engine_http}"

    # --- talking to it ----------------------------------------------------------------
    def _request(self, method: str, path: str, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
        conn = _UnixHTTP(self.socket, timeout)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise OSError(f"HTTP {response.status} from the engine: {body[:200]!r}")
        return json.loads(body)

    def probe(self) -> EngineInfo | None:
        """The engine on the socket, or None if none listens there (a stale socket is
        removed). An engine that does not answer in time is an error, never a hang."""
        try:
            info = self.socket.lstat()
        except FileNotFoundError:
            return None
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
            raise VoiceCliError(
                f"{self.socket} is not a socket of yours (owner uid {info.st_uid}): the "
                "voicecli engine will not use it. Remove it, or use --no-engine."
            )
        try:
            data = self._request("GET", INFO_PATH)
        except (ConnectionRefusedError, FileNotFoundError):
            # Nobody listens: an engine that died without cleaning up.
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()
            return None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            pid = recorded_pid(self.dir)
            which = f" (pid {pid})" if pid is not None else ""
            raise EngineUnavailable(
                f"The voicecli engine{which} does not answer on {self.socket} ({exc}): "
                "`voicecli engine stop` ends it."
            ) from None
        return EngineInfo(
            int(data["pid"]),
            str(data["state"]),
            EngineIdentity.reported(data.get("identity")),
            int(data.get("clients", 0)),
            data.get("error"),
            data,
        )

    def llm_endpoint(self) -> dict[str, Any]:
        """Start the engine's embedded LLM if it is not running, and say where it
        answers: {socket, api_key, model, model_path}."""
        self.ensure()
        try:
            data = self._request("POST", LLM_PATH, timeout=START_TIMEOUT)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise EngineUnavailable(
                f"The voicecli engine could not start the embedded LLM: {exc}"
            ) from None
        if "error" in data:
            raise VoiceCliError(str(data["error"]))
        return data

    # --- its life ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = open_private(self.dir / LOCK_NAME, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # and its lock with it

    def ensure(self, notify: Notify | None = None) -> EngineInfo:
        """An engine that speaks for these settings, started if need be. One that was
        started with another model or language is restarted if nobody uses it, and
        refused with a clear line if someone does: it never speaks with the wrong model."""
        want = self.identity
        http = self.http_address
        with self._locked():
            info = self.probe()
            if info is not None and info.identity != want:
                if info.clients:
                    raise VoiceCliError(
                        f"The voicecli engine (pid {info.pid}) runs {info.describe()}, and "
                        f"{info.clients} client(s) use it; this command needs "
                        f"{want.describe()}. Wait for them, run `voicecli engine stop`, or "
                        "use --no-engine."
                    )
                if notify is not None:
                    notify(f"Restarting the voicecli engine: it ran {info.describe()}.")
                self._stop(info)
                info = None
            if info is not None and http is not None and info.http != http:
                now = f"on {info.http}" if info.http else "without it"
                if info.clients:
                    raise VoiceCliError(
                        f"The voicecli engine (pid {info.pid}) serves the audio API {now}, "
                        f"and {info.clients} client(s) use it: run `voicecli engine stop` "
                        f"first for one on {http}."
                    )
                if notify is not None:
                    notify(f"Restarting the voicecli engine: it served the audio API {now}.")
                self._stop(info)
                info = None
            if info is None:
                if notify is not None:
                    notify("Starting the voicecli engine (the model stays loaded for next time)…")
                self._spawn()
            return self._wait_ready()

    def _spawn(self) -> None:
        log_fd = open_private(self.log_path, os.O_WRONLY | os.O_APPEND)
        try:
            # A session of its own: the engine outlives this terminal and its Ctrl-C.
            self._process = subprocess.Popen(
                self.identity.argv(self.settings),
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                env=self.identity.environment(self.dir, self.settings),
                start_new_session=True,
            )
        finally:
            os.close(log_fd)

    def _wait_ready(self) -> EngineInfo:
        deadline = time.monotonic() + START_TIMEOUT
        process = self._process
        while True:
            try:
                info = self.probe()
            except EngineUnavailable:
                # A loading engine may be too busy to answer in time: wait for it.
                info = None
            if info is not None and info.state == "ready":
                if info.identity != self.identity:
                    raise VoiceCliError(
                        f"The voicecli engine started with {info.describe()} where "
                        f"{self.identity.describe()} was asked. Use --no-engine, or align "
                        "the settings."
                    )
                return info
            if info is not None and info.state == "failed":
                raise VoiceCliError(info.error or "The voicecli engine failed to load its model.")
            if process is not None and process.poll() is not None:
                raise EngineUnavailable(
                    f"The voicecli engine exited while starting (code {process.returncode}). "
                    f"Its log ({self.log_path}) ends with:\n{tail(self.log_path, 8)}"
                )
            if time.monotonic() > deadline:
                raise EngineUnavailable(
                    f"The voicecli engine did not get ready within {START_TIMEOUT:g} s; see "
                    f"{self.log_path}, or use --no-engine."
                )
            time.sleep(0.05)

    def stop(self) -> Stopped | None:
        """Stop the engine if one runs, answering or not (by the pid it recorded); what
        was stopped, or None."""
        with self._locked():
            try:
                info = self.probe()
            except EngineUnavailable:
                pid = recorded_pid(self.dir)
                if pid is None:
                    raise
                self._end(pid)
                return Stopped(pid, answered=False)
            if info is None:
                return None
            self._stop(info)
            return Stopped(info.pid, answered=True)

    def _stop(self, info: EngineInfo) -> None:
        self._end(info.pid)

    def _end(self, pid: int) -> None:
        """SIGTERM (with SIGCONT, which a stopped engine needs to act on it), then
        SIGKILL; its socket and pid file go with it."""
        steps = ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 2.0))
        for sig, wait in steps:
            try:
                os.kill(pid, sig)
                if sig == signal.SIGTERM:
                    os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
            if not _alive(pid):
                break
        for leftover in (self.socket, self.dir / PID_NAME):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"
