#!/usr/bin/env bash
# Prepares what a GPU machine that reaches no registry needs, in ignored
# folders of the checkout, each small enough to travel beside the tracked
# tree within a call's 64 MiB of carried files: .gpu1/p1 ... .gpuK/pK, the
# parts of one xz tarball of the MLX CUDA wheel, its frontend and mlx-lm,
# unzipped into one folder, libmlx.so stripped; and the last folder, .gpuN
# (N = K + 1): bin/provider and the test binaries named in TESTS,
# xz-compressed, the llama2 and gpt-oss tokenizer.json files, ktrace and
# tcmalloc (for runs that preload it), and env.sh, which unpacks them
# there. It prints N, and fails if a folder and the tracked tree together
# pass 62 MiB.
#
# On the machine, N calls within its idle window:
#   1 .. K. carry .gpuI:  mkdir -p /tmp/stage && cp .gpuI/pI /tmp/stage/
#   N.      carry .gpuN:  . .gpuN/env.sh && <the run>   (PYTHONPATH, LD_LIBRARY_PATH,
#      CUDA_HOME and PATH set; /tmp/provider, /tmp/<pkg>.test, /tmp/tok/*.json)
#
#   TESTS="kvpool model/llama" bash scripts/gpu/prepare.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
W=${WORK:-/tmp/provider-gpu-carry}
mkdir -p "$W/wheels" "$W/site"
if [ ! -f "$W/site.tar.xz" ]; then
	python3 -m pip download --quiet --no-deps --only-binary :all: --python-version 3.12 \
		--platform manylinux_2_35_x86_64 -d "$W/wheels" mlx-cuda-13==0.32.4 mlx==0.32.4 mlx-lm==0.32.2
	for w in "$W"/wheels/*.whl; do python3 -m zipfile -e "$w" "$W/site"; done
	strip --strip-unneeded "$W/site/mlx/lib/libmlx.so"
	tar cf - -C "$W/site" . | xz -T0 -6 > "$W/site.tar.xz"
fi
rm -f "$W"/part*
# Parts of 20 MB (PART_BYTES): the tracked tree (about 44 MB) and one part
# stay under a call's 64 MiB as the tree grows.
split -b "${PART_BYTES:-20000000}" -d "$W/site.tar.xz" "$W/part"
parts=("$W"/part*)
K=${#parts[@]}
N=$((K + 1))
rm -rf .gpu[0-9]*
for i in $(seq 1 "$N"); do
	grep -qx "/.gpu$i/" .git/info/exclude || echo "/.gpu$i/" >> .git/info/exclude
	mkdir -p ".gpu$i"
	[ "$i" = "$N" ] || cp "${parts[$((i - 1))]}" ".gpu$i/p$i"
done
L=.gpu$N
go build -ldflags="-s -w" -o "$W/provider" ./cmd/provider
xz -T0 -6 -c "$W/provider" > "$L/provider.xz"
# Test binaries travel stripped; the unstripped copy stays in $W/full,
# with MLX's own library, for hsamples.py to name the host's samples.
mkdir -p "$W/full"
for t in ${TESTS:-kvpool}; do
	name=$(basename "$t")
	go test -c -o "$W/full/$name.test" "./$t"
	strip -o "$W/$name.test" "$W/full/$name.test"
	xz -T0 -6 -c "$W/$name.test" > "$L/$name.test.xz"
done
[ -f "$W/full/libmlx.so" ] || python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("mlx/lib/libmlx.so"))' \
	"$(ls "$W"/wheels/mlx_cuda_13-*.whl)" >"$W/full/libmlx.so"
# ktrace (scripts/gpu/ktrace.c), against CUPTI 13.0's headers; on the
# machine it loads the CUPTI library there.
if [ ! -f "$W/cupti/.ok" ]; then
	mkdir -p "$W/cupti"
	python3 -m pip download --quiet --no-deps -d "$W/cupti" nvidia-cuda-cupti==13.0.85 nvidia-cuda-crt==13.0.88 \
		nvidia-cuda-runtime==13.0.96
	for w in "$W"/cupti/*.whl; do python3 -m zipfile -e "$w" "$W/cupti/site"; done
	touch "$W/cupti/.ok"
fi
gcc -O2 -Wall -shared -fPIC -o "$L/libktrace.so" scripts/gpu/ktrace.c -I "$W/cupti/site/nvidia/cu13/include" \
	-L "$W/cupti/site/nvidia/cu13/lib" -l:libcupti.so.13 -lpthread
T=.deps/npm/node_modules/@lenml
mkdir -p "$W/tok"
cp "$T/tokenizer-llama2/models/tokenizer.json" "$W/tok/llama2.json"
cp "$T/tokenizer-gptoss/models/tokenizer.json" "$W/tok/gptoss.json"
tar cJf "$L/tok.tar.xz" -C "$W/tok" .
# tcmalloc (Debian's libtcmalloc-minimal4, glibc 2.29 or later), for runs
# that preload it into a step's host side (LD_PRELOAD=/tmp/libtcmalloc_minimal.so.4).
if [ ! -f "$W/tcmalloc/libtcmalloc_minimal.so.4" ]; then
	mkdir -p "$W/tcmalloc"
	(cd "$W/tcmalloc" && apt-get download libtcmalloc-minimal4 && dpkg-deb -x libtcmalloc-minimal4_*.deb x)
	cp -L "$W"/tcmalloc/x/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 "$W/tcmalloc/"
fi
cp "$W/tcmalloc/libtcmalloc_minimal.so.4" "$L/"
cp scripts/gpu/env.sh "$L/env.sh"
# CUDA's crt headers (from the CUPTI build's wheels), which env.sh adds to
# the machine's NVIDIA headers for MLX's run-time compiles.
tar cJf "$L/crt.tar.xz" -C "$W/cupti/site/nvidia/cu13/include" crt
du -sh .gpu[0-9]*
# A call carries the tracked tree beside its folder, 64 MiB in all.
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
for d in .gpu[0-9]*; do
	total=$((tree + $(du -sb "$d" | cut -f1)))
	if [ "$total" -gt $((62 << 20)) ]; then
		echo "prepare: $d and the tracked tree are $((total >> 20)) MiB, over 62: a call carries at most 64" >&2
		exit 1
	fi
done
echo "calls: $N (.gpu1 .. $L; source $L/env.sh in the last)"
