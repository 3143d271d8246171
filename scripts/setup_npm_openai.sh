#!/usr/bin/env bash
# Installs the official OpenAI Node client and zod (.deps/npm-openai) for the
# server's compatibility test. Does nothing when the pinned versions are
# there.
set -euo pipefail

cd "$(dirname "$0")/.."
prefix=.deps/npm-openai
if [[ -f "$prefix/.ok-openai-7.60.0-zod-4.6.7" ]]; then
	exit 0
fi
rm -rf "$prefix"
mkdir -p "$prefix"
npm install --silent --no-audit --no-fund --prefix "$prefix" openai@7.60.0 zod@4.6.7 >/dev/null
touch "$prefix/.ok-openai-7.60.0-zod-4.6.7"
