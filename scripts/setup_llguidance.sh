#!/usr/bin/env bash
# Builds llguidance's C API (the crate pinned by grammar/rust/Cargo.lock)
# into a static library and copies its header next to it:
#   $OUT/lib/libllguidance.a, $OUT/include/llguidance.h
# About two minutes on two cores; crates come from crates.io.
set -euo pipefail
out=${1:-.deps/llguidance}
manifest=grammar/rust/Cargo.toml
rm -rf "$out/lib" "$out/include"
cargo build --release --locked --manifest-path "$manifest" --target-dir "$out/target"
mkdir -p "$out/lib" "$out/include"
cp "$out/target/release/libllguidance_static.a" "$out/lib/libllguidance.a"
src=$(cargo metadata --locked --format-version 1 --manifest-path "$manifest" |
	python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "llguidance"))')
cp "$(dirname "$src")/llguidance.h" "$out/include/llguidance.h"
