"""The resident engine as users meet it: real `voicecli` processes, a real engine process
on a real Unix socket, Kokoro's real code on the tiny model. A test that starts, stops,
kills or restarts an engine has a runtime directory of its own, so engines never meet
across tests or xdist workers; tests that only speak through one use the run's engine
(``tiny_engine``). Each engine start costs about 11 s of CPU, so each lifecycle test
follows one engine through several of its states."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.engine_harness import engine_env, voicecli
from tests.wavfile import read_wav
from voicecli.cli import cli

pytestmark = pytest.mark.timeout(240)


def tiny(model_dir: Path, *more: str) -> list[str]:
    return ["--model-dir", str(model_dir), "--voice", "af_tiny", *more]


def engine_pid(runtime: Path) -> int | None:
    result = voicecli(runtime, "engine", "status")
    assert result.returncode == 0, result.stderr
    if "No voicecli engine" in result.stdout:
        return None
    return int(result.stdout.split("pid ")[1].split(",")[0])


def wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def runtime(tmp_path):
    path = tmp_path / "run"
    yield path
    voicecli(path, "engine", "stop")


def _start(runtime: Path, model_dir: Path) -> Path:
    result = voicecli(runtime, "engine", "start", *tiny(model_dir))
    assert result.returncode == 0, result.stderr
    assert "ready" in result.stdout
    return runtime


@pytest.fixture
def started(runtime, tiny_model_dir):
    """An engine of this test's own, which it may kill, stop or restart."""
    return _start(runtime, tiny_model_dir)


@pytest.fixture
def shared(tiny_engine) -> Path:
    """The run's engine, for tests that only speak through it and leave it as it was."""
    return Path(tiny_engine["VOICECLI_RUNTIME_DIR"])


def test_say_speaks_through_a_started_engine_and_the_client_loads_no_torch(
    shared, tiny_model_dir, tmp_path
):
    started = shared
    out = tmp_path / "hello.wav"
    args = ["say", *tiny(tiny_model_dir, "-o", str(out)), "Hello there. Bye now."]
    script = textwrap.dedent(
        f"""
        import sys
        from click.testing import CliRunner
        from voicecli.cli import cli
        result = CliRunner().invoke(cli, {args!r})
        print(result.exit_code, "torch" in sys.modules, "kokoro" in sys.modules)
        print(result.output)
        """
    )
    env = {**os.environ, **engine_env(started)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.stdout.split()[:3] == ["0", "False", "False"], proc.stdout + proc.stderr
    audio, rate = read_wav(out)
    assert rate == 24_000 and len(audio) > 2400 and np.abs(audio).max() > 0


def test_a_second_say_waits_for_the_place_the_first_holds(runtime, tiny_model_dir, tmp_path):
    """An engine that speaks for one listener at a time: a second command is told it is
    busy and waits its turn, as a queue would, instead of failing."""
    env = {**os.environ, **engine_env(runtime), "VOICECLI_LISTENERS": "1"}
    started = subprocess.run(
        [sys.executable, "-m", "voicecli", "engine", "start", *tiny(tiny_model_dir)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr

    def say(out: Path, *more: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "voicecli", "say", *tiny(tiny_model_dir, "-o", str(out)),
             *more],
            stderr=subprocess.PIPE, text=True, env=env, **kw,
        )  # fmt: skip

    # The first holds the only place while its piped text keeps coming.
    first = say(tmp_path / "first.wav", stdin=subprocess.PIPE)
    first.stdin.write("The first command speaks first.\n")
    first.stdin.flush()
    time.sleep(3)
    second = say(tmp_path / "second.wav", "The second one waits its turn.")
    try:
        for _ in range(8):  # longer than the place is kept idle: it is held by use
            first.stdin.write("And it goes on.\n")
            first.stdin.flush()
            time.sleep(0.5)
        assert second.poll() is None  # still waiting for the place
        first.stdin.close()
        assert first.wait(60) == 0, first.stderr.read()
        assert second.wait(60) == 0, second.stderr.read()
    finally:
        for proc in (first, second):
            proc.kill()
    said = second.stderr.read()
    assert "speaking for others: waiting" in said, said
    assert "waiting" not in first.stderr.read()
    for name in ("first", "second"):
        audio, _ = read_wav(tmp_path / f"{name}.wav")
        assert audio.size > 0, name


def test_the_engine_listens_on_a_private_socket_and_nothing_else(shared):
    started = shared
    sock = started / "engine.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(started.stat().st_mode) == 0o700
    pid = engine_pid(started)
    inodes = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    tcp = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
    listening = [line.split()[9] for line in tcp.splitlines()[1:] if line.split()[3] == "0A"]
    assert not any(f"socket:[{inode}]" in inodes for inode in listening), "a TCP port is open"


def test_the_socket_path_appears_only_once_it_listens(tmp_path, monkeypatch):
    """A client probing a starting engine must never find its path bound but refusing
    connections: it would take it for a dead engine's and remove it."""
    from voicecli.engine import host

    path = tmp_path / "engine.sock"
    path.touch()  # a stale one, replaced
    seen_at_listen = []

    class Watched(socket.socket):
        def listen(self, *args) -> None:
            seen_at_listen.append(path.exists() and stat.S_ISSOCK(path.stat().st_mode))
            super().listen(*args)

    monkeypatch.setattr(host.socket, "socket", Watched)
    sock = host.bind_unix(path)
    try:
        assert seen_at_listen == [False]
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))
        client.close()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.sock"]
    finally:
        sock.close()


def hold(runtime: Path) -> socket.socket:
    """A client that holds the engine: a WebSocket connection that stays open."""
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.connect(str(runtime / "engine.sock"))
    holder.sendall(
        b"GET /invocations-bidirectional-stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    assert b"101" in holder.recv(1024)
    return holder


@pytest.mark.long
def test_first_use_starts_the_engine_another_model_restarts_it_and_engine_stop_stops_it(
    runtime, tiny_model_dir, tmp_path
):
    out = tmp_path / "a.wav"
    result = voicecli(runtime, "say", *tiny(tiny_model_dir, "-o", str(out)), "Hello there.")
    assert result.returncode == 0, result.stderr
    assert "Starting the voicecli engine" in result.stderr
    first = engine_pid(runtime)
    assert first is not None
    again = voicecli(runtime, "say", *tiny(tiny_model_dir, "-o", str(out)), "Hello again.")
    assert again.returncode == 0, again.stderr
    assert "Starting" not in again.stderr
    assert engine_pid(runtime) == first

    # Another model: refused while a client uses the engine, which keeps running...
    other = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other, copy_function=os.link)  # the same files, elsewhere
    holder = hold(runtime)
    refused = voicecli(runtime, "say", *tiny(other, "-o", str(out)), "Hello there.")
    assert refused.returncode == 1
    assert "1 client(s) use it" in refused.stderr and "--no-engine" in refused.stderr
    assert engine_pid(runtime) == first, "a busy engine was stopped"
    holder.close()
    time.sleep(0.5)
    # ...and once idle, the engine is restarted on it.
    restarted = voicecli(runtime, "say", *tiny(other, "-o", str(out)), "Hello there.")
    assert restarted.returncode == 0, restarted.stderr
    assert "Restarting the voicecli engine" in restarted.stderr
    second = engine_pid(runtime)
    assert second is not None and second != first
    assert wait_gone(first)
    assert str(other.resolve()) in voicecli(runtime, "engine", "status").stdout

    stopped = voicecli(runtime, "engine", "stop")
    assert stopped.returncode == 0
    assert f"pid {second}" in stopped.stdout
    assert wait_gone(second)
    assert voicecli(runtime, "engine", "stop").stdout.startswith("No voicecli engine")


def test_no_engine_runs_in_process(runtime, tiny_model_dir, tmp_path, monkeypatch):
    # In this process (Kokoro is loaded here already): what a `voicecli` process of its
    # own would do, with the engine switched on as users have it.
    for name, value in engine_env(runtime).items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "a.wav"
    result = CliRunner().invoke(
        cli, ["say", "--no-engine", *tiny(tiny_model_dir, "-o", str(out)), "Hello there."]
    )
    assert result.exit_code == 0, result.output
    assert engine_pid(runtime) is None
    assert read_wav(out)[0].size > 0


def test_a_stale_socket_gets_a_fresh_engine_which_leaves_none_when_idle(
    runtime, tiny_model_dir, tmp_path
):
    runtime.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(runtime / "engine.sock"))
    stale.close()  # bound, never listening: what a killed engine leaves behind
    # The engine that first use starts takes its idle time from the user's config.
    config = tmp_path / "config.toml"
    config.write_text("engine_idle = 10\n")
    out = tmp_path / "a.wav"
    started = time.monotonic()
    result = voicecli(
        runtime,
        "say",
        *tiny(tiny_model_dir, "-o", str(out)),
        "Hello there.",
        env={"VOICECLI_CONFIG": str(config)},
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 90
    pid = engine_pid(runtime)
    assert pid is not None
    assert wait_gone(pid, timeout=40), "the idle engine did not exit"
    assert not (runtime / "engine.sock").exists()


def test_a_runtime_dir_of_another_user_is_refused_in_one_line(tmp_path, tiny_model_dir):
    if os.getuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    result = voicecli(theirs, "say", *tiny(tiny_model_dir, "-o", str(tmp_path / "a.wav")), "Hi.")
    assert result.returncode == 1
    assert "belongs to another user (uid 65534)" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


SENTENCES = " ".join(f"This is sentence number {n}, spoken in order." for n in range(6))


def client_dies_mid_turn(runtime: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    """A client killed mid-turn frees the engine, which speaks for the next one."""
    env = {**os.environ, **engine_env(runtime)}
    client = subprocess.Popen(
        [sys.executable, "-m", "voicecli", "say", *tiny(tiny_model_dir), SENTENCES * 3],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and "1 client(s)" not in voicecli(runtime, "engine", "status").stdout
    ):
        time.sleep(0.1)
    client.kill()
    client.wait()
    deadline = time.monotonic() + 10
    while "0 client(s)" not in (status := voicecli(runtime, "engine", "status").stdout):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    out = tmp_path / "after.wav"
    after = voicecli(runtime, "say", *tiny(tiny_model_dir, "-o", str(out)), "Still here.")
    assert after.returncode == 0, after.stderr
    assert read_wav(out)[0].size > 0


def cues(path: Path) -> list[tuple[float, float, str]]:
    """A WebVTT file's cues: (start, end, text)."""

    def seconds(stamp: str) -> float:
        h, m, s = stamp.split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)

    found = []
    for block in path.read_text().split("\n\n")[1:]:
        lines = block.strip().splitlines()
        timing = next((line for line in lines if " --> " in line), None)
        if timing is not None:
            a, b = timing.split(" --> ")
            found.append(
                (seconds(a), seconds(b.split()[0]), " ".join(lines[lines.index(timing) + 1 :]))
            )
    return found


def say_with_a_fault(
    runtime: Path, model_dir: Path, out: Path, fault: signal.Signals | None
) -> subprocess.CompletedProcess:
    """``say -o`` of SENTENCES piped in two parts, with ``fault`` sent to the engine
    between them (while it speaks the first sentences)."""
    env = {**os.environ, **engine_env(runtime)}
    client = subprocess.Popen(
        [sys.executable, "-m", "voicecli", "say",
         *tiny(model_dir, "-o", str(out), "--captions", str(out.with_suffix(".vtt")))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    assert client.stdin is not None
    client.stdin.write(SENTENCES[: len(SENTENCES) // 3])
    client.stdin.flush()
    if fault is not None:
        deadline = time.monotonic() + 60
        while not out.exists() or out.stat().st_size <= 44:  # some audio is written
            assert time.monotonic() < deadline and client.poll() is None, client.stderr.read()
            time.sleep(0.05)
        os.kill(engine_pid(runtime), fault)
    client.stdin.write(SENTENCES[len(SENTENCES) // 3 :])
    client.stdin.close()
    stderr = client.stderr.read()
    client.wait(timeout=120)
    return subprocess.CompletedProcess(client.args, client.returncode, "", stderr)


def assert_nothing_lost(out: Path, reference: Path, result: subprocess.CompletedProcess) -> None:
    """The output of a faulted turn is the reference's, sample for sample give or take a
    device block, and its captions keep every word, timed as the reference's."""
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "Finishing in this process" in line]
    assert len(notes) == 1, result.stderr
    assert "Traceback" not in result.stderr
    cut, _ = read_wav(out)
    whole, _ = read_wav(reference)
    assert abs(len(cut) - len(whole)) <= 480, (len(cut), len(whole))
    got, want = cues(out.with_suffix(".vtt")), cues(reference.with_suffix(".vtt"))
    assert [text for _, _, text in got] == [text for _, _, text in want]
    assert all(end > start for start, end, _ in got), got
    for (a, b, _), (c, d, _) in zip(got, want, strict=True):
        assert abs(a - c) <= 0.02 and abs(b - d) <= 0.02, (got, want)


def spoken_whole(runtime: Path, model_dir: Path, tmp_path: Path) -> Path:
    """SENTENCES spoken whole by the engine: what every faulted turn must add up to."""
    reference = tmp_path / "whole.wav"
    assert say_with_a_fault(runtime, model_dir, reference, None).returncode == 0
    return reference


@pytest.mark.long
def test_a_client_or_the_engine_killed_mid_turn_costs_the_other_nothing(
    started, tiny_model_dir, tmp_path
):
    client_dies_mid_turn(started, tiny_model_dir, tmp_path)
    reference = spoken_whole(started, tiny_model_dir, tmp_path)
    # The engine killed mid-turn: its client finishes the text in its own process.
    killed = tmp_path / "killed.wav"
    pid = engine_pid(started)
    assert_nothing_lost(
        killed, reference, say_with_a_fault(started, tiny_model_dir, killed, signal.SIGKILL)
    )
    assert wait_gone(pid)


@pytest.mark.long
def test_an_engine_stopped_mid_turn_is_left_finished_here_reported_and_ended(
    started, tiny_model_dir, tmp_path
):
    """Stopped mid-turn (it answers nothing, not even pings): the client notices within
    seconds and finishes alike; status and the next command say so, and stop ends it."""
    reference = spoken_whole(started, tiny_model_dir, tmp_path)
    stopped = tmp_path / "stopped.wav"
    began = time.monotonic()
    result = say_with_a_fault(started, tiny_model_dir, stopped, signal.SIGSTOP)
    assert_nothing_lost(stopped, reference, result)
    assert time.monotonic() - began < 60
    frozen = int(Path(started / "engine.pid").read_text().split('"pid": ')[1].split(",")[0])
    status = voicecli(started, "engine", "status")
    assert status.returncode == 1 and "does not answer" in status.stderr
    assert f"pid {frozen}" in status.stderr and "`voicecli engine stop` ends it" in status.stderr
    hello = tmp_path / "hello.wav"
    again = voicecli(started, "say", *tiny(tiny_model_dir, "-o", str(hello)), "Hello there.")
    assert again.returncode == 0 and read_wav(hello)[0].size > 0, again.stderr
    assert "Finishing in this process" in again.stderr
    ended = voicecli(started, "engine", "stop")
    assert ended.returncode == 0, ended.stderr
    assert (
        ended.stdout.strip() == f"Stopped the voicecli engine (pid {frozen}), which did not answer."
    )
    assert wait_gone(frozen)
    assert not (started / "engine.sock").exists() and not (started / "engine.pid").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_engine_serves_the_audio_api_on_tcp_only_when_asked(runtime, tiny_model_dir, tmp_path):
    import openai

    port = free_port()
    beyond = voicecli(
        runtime, "engine", "start", *tiny(tiny_model_dir, "--http", str(port)),
        "--http-host", "0.0.0.0",
    )  # fmt: skip
    assert beyond.returncode == 1 and "give --api-key too" in beyond.stderr
    assert len(beyond.stderr.strip().splitlines()) == 1
    started = voicecli(
        runtime, "engine", "start", *tiny(tiny_model_dir, "--http", str(port), "--api-key", "k3y")
    )
    assert started.returncode == 0, started.stderr
    assert f"API      http://127.0.0.1:{port}/v1" in started.stdout
    assert "stays until stopped" in started.stdout
    try:
        base = f"http://127.0.0.1:{port}/v1"
        speech = openai.OpenAI(base_url=base, api_key="k3y").audio.speech.create(
            model="tts-1", voice="af_tiny", input="Hello there.", response_format="pcm"
        )
        assert len(speech.read()) > 0
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="nope", max_retries=0).models.list()
        # The engine's own routes (one hands out the LLM's key) are not on TCP.
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as caught:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/engine", headers={"Authorization": "Bearer k3y"}
            )
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 404
        # Its Unix socket speaks for `say` as before.
        out = tmp_path / "a.wav"
        said = voicecli(runtime, "say", *tiny(tiny_model_dir, "-o", str(out)), "Hi.")
        assert said.returncode == 0 and read_wav(out)[0].size > 0, said.stderr
    finally:
        assert voicecli(runtime, "engine", "stop").returncode == 0
