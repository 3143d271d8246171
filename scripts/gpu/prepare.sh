#!/usr/bin/env bash
# Prepares what a GPU machine that reaches no registry needs, in three
# ignored folders of the checkout, each under a call's 64 MiB of carried
# files: .gpu1/p1 and .gpu2/p2 (the first two parts of one xz tarball of
# the MLX CUDA wheel, its frontend and mlx-lm, unzipped into one folder,
# libmlx.so stripped), .gpu3 (the third part, bin/provider and the test
# binaries named in TESTS, xz-compressed, the llama2 and gpt-oss
# tokenizer.json files, and env.sh, which unpacks them there).
#
# On the machine, three calls within its idle window:
#   1. carry .gpu1:  mkdir -p /tmp/stage && cp .gpu1/p1 /tmp/stage/
#   2. carry .gpu2:  cp .gpu2/p2 /tmp/stage/
#   3. carry .gpu3:  . .gpu3/env.sh && <the run>   (PYTHONPATH, LD_LIBRARY_PATH,
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
split -b 33000000 -d "$W/site.tar.xz" "$W/part"
mkdir -p .gpu1 .gpu2 .gpu3
for d in .gpu1 .gpu2 .gpu3; do
	grep -qx "/$d/" .git/info/exclude || echo "/$d/" >> .git/info/exclude
done
cp "$W/part00" .gpu1/p1
cp "$W/part01" .gpu2/p2
cp "$W/part02" .gpu3/p3
go build -ldflags="-s -w" -o "$W/provider" ./cmd/provider
xz -T0 -6 -c "$W/provider" > .gpu3/provider.xz
for t in ${TESTS:-kvpool}; do
	name=$(basename "$t")
	go test -c -ldflags="-s -w" -o "$W/$name.test" "./$t"
	xz -T0 -6 -c "$W/$name.test" > ".gpu3/$name.test.xz"
done
N=.deps/npm/node_modules/@lenml
mkdir -p "$W/tok"
cp "$N/tokenizer-llama2/models/tokenizer.json" "$W/tok/llama2.json"
cp "$N/tokenizer-gptoss/models/tokenizer.json" "$W/tok/gptoss.json"
tar cJf .gpu3/tok.tar.xz -C "$W/tok" .
cp scripts/gpu/env.sh .gpu3/env.sh
du -sh .gpu1 .gpu2 .gpu3
