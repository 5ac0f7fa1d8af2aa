"""A small, randomly initialised Kokoro model built from Kokoro's own config.

It runs the real kokoro code (KModel, KPipeline, misaki G2P) with no download.
Three changes keep it quick and predictable: a 2-layer PL-BERT instead of 12, a
generator with one residual block per upsampling instead of three (a config Kokoro's
Decoder takes: half the decoding, where most of a test's time goes; its layout, norms
and frame sizes are otherwise Kokoro's), and a duration head fixed at one alignment frame
per phoneme, because random duration weights give arbitrary lengths.
"""

from __future__ import annotations

import importlib.util
import json
import math
import tempfile
from pathlib import Path

FRAMES_PER_PHONEME = 1.0
VOICES = ("af_tiny", "am_tiny", "ef_tiny")


def kokoro_config() -> dict:
    spec = importlib.util.find_spec("kokoro_onnx")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "kokoro-onnx is not installed: it ships Kokoro's config.json "
            "(pip install --no-deps kokoro-onnx)"
        )
    path = Path(spec.submodule_search_locations[0]) / "config.json"
    return json.loads(path.read_text(encoding="utf-8"))


def build(out: Path, seed: int = 0) -> Path:
    import torch
    from kokoro import KModel

    out.mkdir(parents=True, exist_ok=True)
    (out / "voices").mkdir(exist_ok=True)
    config = kokoro_config()
    config["plbert"].update(
        hidden_size=128, num_attention_heads=2, intermediate_size=256, num_hidden_layers=2
    )
    config["istftnet"].update(resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3, 5]])
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))
    max_dur = config["max_dur"]
    with torch.no_grad():
        proj = model.predictor.duration_proj.linear_layer
        proj.weight.zero_()
        p = FRAMES_PER_PHONEME / max_dur
        proj.bias.fill_(math.log(p / (1 - p)))
    keys = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    torch.save({k: getattr(model, k).state_dict() for k in keys}, out / "kokoro-v1_0.pth")
    for i, name in enumerate(VOICES):
        g = torch.Generator().manual_seed(seed + i)
        torch.save(torch.randn(510, 1, 256, generator=g) * 0.1, out / "voices" / f"{name}.pt")
    return out
