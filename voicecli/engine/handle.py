"""The resident engine, as its clients see it: one background ``voicecli engine run``
per user that keeps Kokoro (model, voices, G2P) and the embedded LLM loaded, reached
over a private Unix socket with the server's own protocol.

``say`` and ``chat`` speak through ``EngineSynthesizer``: a ``WebSocketSynthesizer`` on
that socket, which starts the engine on first use and, if the engine dies mid-turn,
says so and finishes the turn in-process without losing a sentence.

Safety of the socket: it lives in a directory only this user may enter (checked, not
assumed), and a socket or directory owned by anyone else is refused. One lock file
serialises starting, so two terminals never start two engines.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from voicecli import __version__
from voicecli.cancel import CancelToken
from voicecli.child import tail
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioChunk, Sentence, SynthCapabilities, Synthesizer
from voicecli.timeline import Timeline
from voicecli.tts.remote import ConnectionLost, WebSocketSynthesizer
from voicecli.tts.voices import VoiceSpec, check_voice_name

log = logging.getLogger(__name__)

SOCKET_NAME = "engine.sock"
LOG_NAME = "engine.log"
LOCK_NAME = "engine.lock"
INFO_PATH = "/engine"  # GET: identity and state; the engine's own route
LLM_PATH = "/engine/llm"  # POST: start the embedded LLM if needed, and say where it is
START_TIMEOUT = 120.0  # loading Kokoro takes 4-8 s; a machine under load, more
PROBE_TIMEOUT = 3.0  # an engine that does not answer its socket within this is stuck
STOP_TIMEOUT = 10.0

Notify = Callable[[str], None]


class EngineUnavailable(VoiceCliError):
    """The engine could not be started, or did not get ready."""


def runtime_dir(settings: Settings) -> Path:
    """This user's private directory for the engine's socket, lock and log: the
    ``runtime_dir`` setting, else ``$XDG_RUNTIME_DIR/voicecli``, else a directory of
    its own in the temp dir. Created 0700; refused if anyone else owns it or may
    enter it."""
    if settings.runtime_dir is not None:
        path = settings.runtime_dir
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "voicecli"
    else:
        path = Path(tempfile.gettempdir()) / f"voicecli-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise VoiceCliError(
            f"Cannot use {path} for the voicecli engine: {exc.strerror or exc}. "
            "Set runtime_dir in the config file, or use --no-engine."
        ) from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise VoiceCliError(
            f"{path} is not a directory of yours (owner uid {info.st_uid}): the voicecli "
            "engine will not use it. Set runtime_dir in the config file, or use --no-engine."
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)  # ours, but open to others: close it before use
    return path


def identity(settings: Settings) -> dict[str, Any]:
    """What an engine must have been started with to speak for ``settings``. A voice,
    speed or output is per request; a model, language or decoder setting is not."""
    model_dir = settings.model_dir
    llm_model = settings.llm_model_path
    return {
        "voicecli": __version__,
        "model_dir": str(Path(model_dir).expanduser().resolve()) if model_dir else None,
        "lang": (settings.lang or VoiceSpec.parse(settings.voice).lang_code).lower(),
        "synthesis": settings.synthesis,
        "precision": settings.synth_precision,
        "synth_threads": settings.synth_threads,
        "llm_model_path": str(Path(llm_model).expanduser().resolve()) if llm_model else None,
        "llm_threads": settings.llm_threads,
    }


def describe_identity(ident: dict[str, Any]) -> str:
    model = ident.get("model_dir") or "hexgrad/Kokoro-82M from the hub"
    return f"model {model}, language {ident.get('lang')}, voicecli {ident.get('voicecli')}"


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
class EngineInfo:
    pid: int
    state: str  # loading | ready | failed
    identity: dict[str, Any]
    clients: int
    error: str | None = None
    details: dict[str, Any] | None = None


class EngineHandle:
    """This user's engine: find it, start it, check it speaks for these settings, stop it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dir = runtime_dir(settings)
        self.socket = self.dir / SOCKET_NAME
        self.log_path = self.dir / LOG_NAME
        self._process: subprocess.Popen[bytes] | None = None  # the engine this started

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
            raise EngineUnavailable(
                f"The voicecli engine at {self.socket} does not answer ({exc}). Run "
                "`voicecli engine stop`, or use --no-engine."
            ) from None
        return EngineInfo(
            int(data["pid"]),
            str(data["state"]),
            dict(data["identity"]),
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
        with open(self.dir / LOCK_NAME, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def ensure(self, notify: Notify | None = None) -> EngineInfo:
        """An engine that speaks for these settings, started if need be. One that was
        started with another model or language is restarted if nobody uses it, and
        refused with a clear line if someone does: it never speaks with the wrong model."""
        want = identity(self.settings)
        with self._locked():
            info = self.probe()
            if info is not None and info.identity != want:
                if info.clients:
                    raise VoiceCliError(
                        f"The voicecli engine (pid {info.pid}) runs "
                        f"{describe_identity(info.identity)}, and {info.clients} client(s) "
                        f"use it; this command needs {describe_identity(want)}. Wait for "
                        "them, run `voicecli engine stop`, or use --no-engine."
                    )
                if notify is not None:
                    notify(
                        f"Restarting the voicecli engine: it ran "
                        f"{describe_identity(info.identity)}."
                    )
                self._stop(info)
                info = None
            if info is None:
                if notify is not None:
                    notify("Starting the voicecli engine (the model stays loaded for next time)…")
                self._spawn()
            return self._wait_ready()

    def _spawn(self) -> None:
        s = self.settings
        argv = [sys.executable, "-m", "voicecli", "engine", "run"]
        want = identity(s)
        argv += ["--lang", want["lang"], "--voice", s.voice, "--synthesis", s.synthesis]
        argv += ["--precision", s.synth_precision, "--idle", f"{s.engine_idle:g}"]
        if want["model_dir"]:
            argv += ["--model-dir", want["model_dir"]]
        env = dict(os.environ)
        env["VOICECLI_RUNTIME_DIR"] = str(self.dir)
        for name in ("synth_threads", "llm_model_path", "llm_threads", "llm_nice"):
            value = getattr(s, name)
            key = f"VOICECLI_{name.upper()}"
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        with open(self.log_path, "ab") as log_file:
            # A session of its own: the engine outlives this terminal and its Ctrl-C.
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

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
                want = identity(self.settings)
                if info.identity != want:
                    raise VoiceCliError(
                        f"The voicecli engine started with {describe_identity(info.identity)} "
                        f"where {describe_identity(want)} was asked (a setting in its config "
                        "file?). Use --no-engine, or align the settings."
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

    def stop(self) -> EngineInfo | None:
        """Stop the engine if one runs; what it was, or None."""
        with self._locked():
            info = self.probe()
            if info is not None:
                self._stop(info)
            return info

    def _stop(self, info: EngineInfo) -> None:
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 2.0)):
            try:
                os.kill(info.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _alive(info.pid):
                time.sleep(0.05)
            if not _alive(info.pid):
                break
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()


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


class EngineSynthesizer:
    """Speech from the resident engine, with the in-process synthesizer as a fallback
    for a turn whose engine died: the sentences it had not finished are spoken
    in-process, from the sample the listener had reached, so no text is lost."""

    sample_rate = WebSocketSynthesizer.sample_rate
    capabilities = SynthCapabilities(streams_within_sentence=True, word_timings=True)

    def __init__(
        self,
        settings: Settings,
        local: Callable[[], Synthesizer],
        notify: Notify | None = None,
    ) -> None:
        self.engine = EngineHandle(settings)
        self.settings = settings
        self._local_factory = local
        self._notify = notify
        self._local: Synthesizer | None = None
        info = self.engine.ensure(notify)
        self._voices = list((info.details or {}).get("voices", []))
        self._remote = self._connect()
        self.set_voice(settings.voice)

    def _connect(self) -> WebSocketSynthesizer:
        return WebSocketSynthesizer(
            "ws://voicecli-engine",
            voice=self.settings.voice,
            speed=self.settings.speed,
            unix_socket=str(self.engine.socket),
            where="the voicecli engine",
        )

    def set_voice(self, voice: str) -> None:
        """Checked now against the engine's voice set, as the local synthesizer does."""
        for name, _ in VoiceSpec.parse(voice).parts:
            check_voice_name(name, self._voices)
        self._remote.set_voice(voice)
        if self._local is not None:
            self._local.set_voice(voice)

    def set_speed(self, speed: float) -> None:
        self._remote.set_speed(speed)
        if self._local is not None:
            self._local.set_speed(speed)

    def warm_up(self) -> None:
        """The engine warms itself up once it is idle."""

    def describe(self) -> dict[str, Any]:
        return {**self._remote.describe(), "kind": "engine", "socket": str(self.engine.socket)}

    def close(self) -> None:
        if self._local is not None:
            self._local.close()

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        unfinished: dict[int, Sentence] = {}  # sent to the engine, not yet all heard back
        received: dict[int, int] = {}  # samples of each that came back

        def handed(source: Iterable[Sentence]) -> Iterator[Sentence]:
            for sentence in source:
                unfinished[sentence.index] = sentence
                yield sentence

        iterator = iter(sentences)
        if self._local is None:
            try:
                # The engine may have idled out or died between turns: start it again.
                self.engine.ensure(self._notify)
                for chunk in self._remote.stream(handed(iterator), cancel, timeline):
                    if chunk.last:
                        unfinished.pop(chunk.sentence, None)
                    else:
                        received[chunk.sentence] = chunk.offset + len(chunk.samples)
                    yield chunk
                return
            except (ConnectionLost, EngineUnavailable) as exc:
                if cancel.cancelled:
                    return
                if self._notify is not None:
                    self._notify(f"{exc} Finishing in this process.")
        yield from self._finish_locally(unfinished, received, iterator, cancel, timeline)

    def _finish_locally(
        self,
        unfinished: dict[int, Sentence],
        received: dict[int, int],
        rest: Iterator[Sentence],
        cancel: CancelToken,
        timeline: Timeline,
    ) -> Iterator[AudioChunk]:
        if self._local is None:
            self._local = self._local_factory()
            if self._remote.voice is not None:
                self._local.set_voice(self._remote.voice)
            if self._remote.speed is not None:
                self._local.set_speed(self._remote.speed)
        pending = [unfinished[i] for i in sorted(unfinished)]
        for chunk in self._local.stream(_chain(pending, rest), cancel, timeline):
            yield from _after(chunk, received.get(chunk.sentence, 0))


def _chain(first: list[Sentence], rest: Iterator[Sentence]) -> Iterator[Sentence]:
    yield from first
    yield from rest


def _after(chunk: AudioChunk, heard: int) -> Iterator[AudioChunk]:
    """``chunk`` less what the listener already got of its sentence (``heard``
    samples), so that a sentence finished in-process continues where it stopped."""
    end = chunk.offset + len(chunk.samples)
    if chunk.last or end > heard:
        skip = max(0, heard - chunk.offset)
        words = tuple(w for w in chunk.words if w.start >= heard)
        samples = chunk.samples[skip:] if skip else chunk.samples
        offset = max(chunk.offset, heard) if not chunk.last else max(end, heard)
        yield replace(chunk, samples=np.asarray(samples), offset=offset, words=words)
