#!/usr/bin/env bash
# Install the peers of the side-by-side benchmark into ignored folders:
#
#   .deps/py-mlxlm        mlx-lm on the MLX CPU wheel (make mlx-lm)
#   .deps/pyref           llama-cpp-python, built from source (scripts/setup_pyref.sh)
#   .deps/py-llamaserver  the packages of llama-cpp-python's [server] extra,
#                         pinned, so `python3 -m llama_cpp.server` runs with
#                         PYTHONPATH=.deps/py-llamaserver:.deps/pyref
#
# Idempotent: each part does nothing when its pinned versions import.
#
# Environment:
#   PYTHON   python interpreter (default python3)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
SERVER_DIR=$ROOT/.deps/py-llamaserver

make -s -C "$ROOT" mlx-lm
bash "$ROOT/scripts/setup_pyref.sh"

# llama-cpp-python 0.3.36's [server] extra and what it pulls in, resolved
# once and pinned; installed without dependency resolution so the set
# cannot drift. llama_cpp itself, numpy, jinja2 and diskcache come from
# .deps/pyref.
SERVER_PACKAGES=(
	fastapi==0.165.0
	starlette==1.10.0
	uvicorn==0.55.0
	pydantic==2.14.4
	pydantic_core==2.50.5
	pydantic-settings==2.16.3
	python-dotenv==1.2.4
	sse-starlette==3.7.1
	starlette-context==0.3.6
	PyYAML==6.0.4
	anyio==4.16.0
	idna==3.20
	click==8.5.1
	h11==0.16.0
	annotated-doc==0.0.7
	annotated-types==0.8.0
	typing-inspection==0.4.5
	typing_extensions==4.16.0
	opentelemetry-api==1.45.2
)

check() {
	PYTHONPATH="$SERVER_DIR:$ROOT/.deps/pyref" "$PY" -c 'import llama_cpp.server.app, uvicorn' >/dev/null 2>&1
}

stamp=$(printf '%s\n' "${SERVER_PACKAGES[@]}" | sha256sum | cut -c1-16)
if [ -f "$SERVER_DIR/.ok" ] && [ "$(cat "$SERVER_DIR/.ok")" = "$stamp" ] && check; then
	echo "llama-cpp-python server packages already installed in $SERVER_DIR"
	exit 0
fi
rm -rf "$SERVER_DIR"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$SERVER_DIR" "${SERVER_PACKAGES[@]}"
if ! check; then
	echo "llama_cpp.server does not import with $SERVER_DIR" >&2
	exit 1
fi
echo "$stamp" >"$SERVER_DIR/.ok"
echo "installed llama-cpp-python server packages in $SERVER_DIR"
