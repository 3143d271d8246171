#!/usr/bin/env bash
# Install the peers of the side-by-side benchmark into ignored folders:
#
#   .deps/py-mlxlm        mlx-lm on the MLX CPU wheel (make mlx-lm)
#   .deps/llama-server    llama.cpp's own C++ server (continuous batching,
#                         parallel slots): bin/llama-server, and VERSION
#                         naming the llama.cpp commit it was built from
#   .deps/llama-server-avx2  the same built for AVX2 alone (no AVX-512),
#                         with LLAMA_SERVER_ISA=avx2: on a processor with
#                         AVX-512 it stands in for llama-server on one
#                         without, beside ours run with PROVIDER_CPU_AVX512=0
#   .deps/llama-server-avx512  the same built for AVX-512 with VNNI and
#                         BF16 but without AMX, with LLAMA_SERVER_ISA=avx512:
#                         on a Xeon with AMX (Sapphire Rapids and later) the
#                         native build's AMX matmul can crash (it segfaulted
#                         in ggml_backend_amx_mul_mat at the first batch of
#                         its warm-up on a 2-CPU virtual machine), and this
#                         is the strongest build that runs there
#
# llama-server is built from source: the llama.cpp tree that
# llama-cpp-python's sdist vendors (the same pinned release that
# scripts/setup_pyref.sh builds the reference bindings from), fetched with
# `pip download`, configured with cmake for the CPU only (Release, the
# build machine's instruction set, no CURL, no OpenSSL, no downloaded web
# UI: nothing is fetched at build or run time) and built with ninja, only
# the llama-server target. On 2 cores this takes 10 to 20 minutes.
#
# Idempotent: each part does nothing when its pinned version is in place
# (for llama-server, a stamp of the version and the build flags, and a
# binary that answers --version).
#
# Environment:
#   PYTHON             python interpreter (default python3)
#   LLAMA_SERVER_JOBS  parallel compile jobs (default: the number of CPUs)
#   LLAMA_SERVER_ISA   native (default: the build machine's instruction set),
#                      avx512 (AVX-512 with VNNI, VBMI and BF16; no AMX)
#                      or avx2 (AVX, AVX2, FMA, F16C, BMI2; no AVX-512)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
ISA=${LLAMA_SERVER_ISA:-native}
case $ISA in
native) DEST=$ROOT/.deps/llama-server ;;
avx2) DEST=$ROOT/.deps/llama-server-avx2 ;;
avx512) DEST=$ROOT/.deps/llama-server-avx512 ;;
*)
	echo "setup_peers: LLAMA_SERVER_ISA=$ISA: want native, avx512 or avx2" >&2
	exit 1
	;;
esac
JOBS=${LLAMA_SERVER_JOBS:-$(nproc)}

make -s -C "$ROOT" mlx-lm

LLAMA_CPP_PYTHON_VERSION=0.3.36
CMAKE_FLAGS=(
	-G Ninja
	-DCMAKE_BUILD_TYPE=Release
	-DBUILD_SHARED_LIBS=OFF
	-DGGML_CUDA=OFF
	-DGGML_METAL=OFF
	-DGGML_VULKAN=OFF
	-DLLAMA_CURL=OFF
	-DLLAMA_OPENSSL=OFF
	-DLLAMA_BUILD_UI=OFF
	-DLLAMA_USE_PREBUILT_UI=OFF
	-DLLAMA_BUILD_TESTS=OFF
	-DLLAMA_BUILD_EXAMPLES=OFF
)
# Both named instruction sets start from AVX2 with FMA, F16C and BMI2.
AVX2_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
if [ "$ISA" = avx2 ]; then
	CMAKE_FLAGS+=("${AVX2_FLAGS[@]}" -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_INT8=OFF)
elif [ "$ISA" = avx512 ]; then
	CMAKE_FLAGS+=("${AVX2_FLAGS[@]}" -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON
		-DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi

check() {
	"$DEST/bin/llama-server" --version >/dev/null 2>&1
}

stamp=$(printf '%s\n' "$LLAMA_CPP_PYTHON_VERSION" "${CMAKE_FLAGS[@]}" | sha256sum | cut -c1-16)
if [ -f "$DEST/.ok" ] && [ "$(cat "$DEST/.ok")" = "$stamp" ] && check; then
	echo "llama-server already built in $DEST ($(cat "$DEST/VERSION"))"
	exit 0
fi

for tool in cmake ninja; do
	command -v "$tool" >/dev/null || {
		echo "setup_peers: $tool not found (apt-get install cmake ninja-build)" >&2
		exit 1
	}
done

rm -rf "$DEST"
mkdir -p "$DEST/src"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps \
	--no-binary llama-cpp-python --dest "$tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
sdist=$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
[ -f "$sdist" ] || {
	echo "setup_peers: pip did not fetch $(basename "$sdist")" >&2
	exit 1
}
# The vendored tree and its submodule metadata, so that the commit is
# known: vendor/llama.cpp/.git points at .git/modules/vendor/llama.cpp.
top=llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION
tar -xzf "$sdist" -C "$DEST/src" --strip-components=1 \
	"$top/vendor/llama.cpp" "$top/.git/modules/vendor/llama.cpp"
SRC=$DEST/src/vendor/llama.cpp
commit=$(cat "$DEST/src/.git/modules/vendor/llama.cpp/HEAD")
[[ $commit =~ ^[0-9a-f]{40}$ ]] || {
	echo "setup_peers: no llama.cpp commit in the sdist (HEAD: $commit)" >&2
	exit 1
}

echo "building llama-server from llama.cpp ${commit:0:12} (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's vendored tree), $JOBS jobs"
cmake -S "$SRC" -B "$DEST/build" "${CMAKE_FLAGS[@]}" -DLLAMA_BUILD_COMMIT="${commit:0:12}" >"$DEST/configure.log" 2>&1 || {
	tail -n 30 "$DEST/configure.log" >&2
	exit 1
}
cmake --build "$DEST/build" --target llama-server -j "$JOBS" >"$DEST/build.log" 2>&1 || {
	tail -n 30 "$DEST/build.log" >&2
	exit 1
}
mkdir -p "$DEST/bin"
cp "$DEST/build/bin/llama-server" "$DEST/bin/llama-server"
if ! check; then
	echo "setup_peers: $DEST/bin/llama-server does not run" >&2
	exit 1
fi
echo "llama.cpp ${commit:0:12} (vendored by llama-cpp-python $LLAMA_CPP_PYTHON_VERSION)" >"$DEST/VERSION"
# The binary stands alone (static libraries); the tree and objects are
# only needed to build it again.
rm -rf "$DEST/src" "$DEST/build"
echo "$stamp" >"$DEST/.ok"
echo "built $DEST/bin/llama-server ($(cat "$DEST/VERSION"))"
