"""Voice priors on disk, so that a process that has not warmed up yet (the turn that
starts the engine, ``say --no-engine``) still normalises a first part from its voice's
prior: learnt once per model, voice and precision on this machine, read back in a
millisecond.

One ``.npz`` per prior (arrays only: nothing is unpickled), named by a hash of what it
depends on, so a voice name from a client never becomes a path. At most ``KEPT`` files;
the oldest go first. A cache that cannot be read or written costs the prior, never a
turn."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicecli.tts.kokoro.stages import VoicePrior

log = logging.getLogger(__name__)

KEPT = 64
PRIOR_FORMAT = 1  # of what is learnt and how: a change makes every old file a miss


def cache_dir() -> Path:
    """``$VOICECLI_PRIOR_CACHE``, else voicecli's own under the XDG cache directory;
    looked up at each use (tests give each test a directory of its own)."""
    if os.environ.get("VOICECLI_PRIOR_CACHE"):
        return Path(os.environ["VOICECLI_PRIOR_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voicecli" / "priors"


class PriorStore:
    def __init__(self, identity: dict[str, Any], norms: int) -> None:
        """``identity``: what every prior here depends on besides its voice (the model's
        files, the corpus, the precision); ``norms``: the model's norm layers, one
        moment of a prior each."""
        self.identity = identity
        self.norms = norms

    def _path(self, voice: str) -> Path:
        key = json.dumps({**self.identity, "voice": voice, "version": PRIOR_FORMAT}, sort_keys=True)
        return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"

    def load(self, voice: str) -> VoicePrior | None:
        path = self._path(voice)
        try:
            with np.load(path, allow_pickle=False) as data:
                counts = data["counts"]
                if len(counts) != self.norms:
                    return None
                moments = tuple(
                    (
                        torch.from_numpy(data[f"var{i}"]),
                        torch.from_numpy(data[f"mean{i}"]),
                        float(counts[i]),
                    )
                    for i in range(self.norms)
                )
                return VoicePrior(moments, float(data["seconds"]))
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - a bad file is a miss, and is replaced
            log.warning("voice prior %s unreadable (%r): learning it again", path, exc)
            return None

    def save(self, voice: str, prior: VoicePrior) -> None:
        path = self._path(voice)
        arrays: dict[str, np.ndarray] = {
            "counts": np.array([n for _, _, n in prior.moments], np.float64),
            "seconds": np.array(prior.seconds),
        }
        for i, (var, mean, _) in enumerate(prior.moments):
            arrays[f"var{i}"] = var.detach().cpu().numpy()
            arrays[f"mean{i}"] = mean.detach().cpu().numpy()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            with open(partial, "wb") as f:
                np.savez(f, **arrays)
            partial.replace(path)  # whole or not at all, for a reader in another process
            _prune(path.parent)
        except OSError as exc:
            log.warning("voice prior not kept in %s: %s", path.parent, exc)


def _prune(directory: Path) -> None:
    files = sorted(directory.glob("*.npz"), key=lambda p: p.stat().st_mtime)
    for old in files[: max(0, len(files) - KEPT)]:
        old.unlink(missing_ok=True)
