#!/usr/bin/env bash
# Install the llama.cpp Python bindings (llama-cpp-python, built from source
# with cmake) into .deps/pyref. They are only used to (re)generate the
# reference fixtures in testdata/ref/; nothing in the Go build needs them.
#
# Idempotent: does nothing when the pinned version already imports.
#
# Environment:
#   PYTHON            python interpreter (default python3)
#   PYREF_DIR         install directory (default <repo>/.deps/pyref)
#   PYREF_JOBS        parallel compile jobs (default 2)
#   PYREF_CMAKE_ARGS  cmake flags (default: portable AVX2/FMA/F16C build, no OpenMP)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
DEST=${PYREF_DIR:-$ROOT/.deps/pyref}
JOBS=${PYREF_JOBS:-2}
# GGML_NATIVE=OFF: fixed instruction set (SSE4.2/AVX/AVX2/BMI2/FMA/F16C, no
# AVX-512) instead of -march=native, so the kernels, and therefore the
# fixtures, do not depend on the CPU of the machine that builds them.
# GGML_OPENMP=OFF: ggml's own thread pool.
CMAKE_FLAGS=${PYREF_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_OPENMP=OFF}

LLAMA_CPP_PYTHON_VERSION=0.3.36
NUMPY_VERSION=2.4.6
JINJA2_VERSION=3.1.6

check() {
	PYTHONPATH="$DEST" "$PY" - "$LLAMA_CPP_PYTHON_VERSION" <<'EOF' >/dev/null 2>&1
import sys
import jinja2, numpy, llama_cpp
sys.exit(0 if llama_cpp.__version__ == sys.argv[1] else 1)
EOF
}

if [ -f "$DEST/READY" ] && check; then
	echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION already installed in $DEST"
	exit 0
fi

rm -rf "$DEST"
mkdir -p "$DEST"
echo "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (CMAKE_ARGS=$CMAKE_FLAGS, $JOBS jobs)"
CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
	"$PY" -m pip install --no-cache-dir --target "$DEST" \
	"llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
	"numpy==$NUMPY_VERSION" \
	"jinja2==$JINJA2_VERSION"

if ! check; then
	echo "llama-cpp-python does not import from $DEST" >&2
	exit 1
fi
touch "$DEST/READY"
echo "installed llama-cpp-python $LLAMA_CPP_PYTHON_VERSION in $DEST"
