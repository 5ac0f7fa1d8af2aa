"""The SageMaker bidirectional path, end to end: the real AWS client
(``aws-sdk-sagemaker-runtime-http2``, Python 3.12+) → the runtime stand-in
(``tests/sagemaker_standin.py``) → a real ``voicecli serve`` on the real weights.

scripts/test.sh runs these in a second, light Python 3.12 venv (``.venv-bidi``);
``voicecli serve`` runs from the main venv, which has torch and Kokoro, as a separate
process: the container, as on SageMaker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "AKIDVOICECLITEST"


@pytest.fixture(scope="session")
def real_voice_priors(tmp_path_factory) -> Path:
    """None on disk: this venv has no torch to learn one with, and the container learns
    its voice's prior in its own warm-up, as on SageMaker."""
    return tmp_path_factory.mktemp("voice-priors")


class Container:
    """``python -m voicecli.server.run serve`` as SageMaker starts it, in its own process."""

    def __init__(self, python: str, model_dir: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = os.environ | {
            "VOICECLI_MODEL_DIR": str(model_dir),
            "VOICECLI_VOICE": "jf_alpha",
            "VOICECLI_LANG": "a",
        }
        self.process = subprocess.Popen(
            [python, "-m", "voicecli.server.run", "serve", "--host", "127.0.0.1"]
            + ["--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"voicecli serve exited: {self.process.stderr.read()}")
            try:
                with urllib.request.urlopen(self.url + "/ping", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.2)
        raise RuntimeError("voicecli serve did not load its model")

    def pause(self) -> None:
        """Freeze the process: it answers nothing, not even WebSocket pings."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="session")
def container(real_model_dir: Path) -> Iterator[Container]:
    python = os.environ.get("VOICECLI_SERVER_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    if not Path(python).is_file():
        pytest.skip(f"no voicecli venv with Kokoro at {python}: run ./install.sh")
    server = Container(python, real_model_dir)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials, and none of the developer's AWS files."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # voicecli's setting
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # boto3's
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
