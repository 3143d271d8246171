#!/usr/bin/env bash
# Install mlx-vlm on MLX's CPU backend into .deps/pyvlm: the reference for the
# Gemma 3 vision fixtures (scripts/make_tiny_gemma3_vlm.py). Nothing in the Go
# build or tests needs it; the tests read the committed fixtures.
#
# mlx-vlm 0.7.10 declares many dependencies that its Gemma 3 model and
# processor never touch (opencv, datasets, mlx-audio, llguidance, a web
# server, ...). It is installed without them; what `import mlx_vlm` and the
# Gemma 3 model and processor do need is pinned below, every package with
# --no-deps, so the set is exactly this list. Torch is not needed: with torch
# absent, transformers' Gemma 3 image processor is the PIL/NumPy one.
#
# mlx-vlm 0.7.10 requires mlx>=0.32.4, so it runs on the mlx 0.32.4 the repo
# already uses (the `mlx` Python frontend plus the `mlx-cpu` backend wheel,
# the pair the Makefile installs for mlx-lm).
#
# Idempotent: does nothing when the pinned versions already import.
#
# Environment:
#   PYTHON      python interpreter (default python3)
#   PYVLM_DIR   install directory (default <repo>/.deps/pyvlm)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
DEST=${PYVLM_DIR:-$ROOT/.deps/pyvlm}

MLX_VLM_VERSION=0.7.10
PACKAGES=(
	"mlx-vlm==$MLX_VLM_VERSION"
	mlx==0.32.4
	mlx-cpu==0.32.4
	transformers==5.24.0
	numpy==2.4.6
	pillow==13.0.0
	safetensors==0.8.0
	tokenizers==0.23.3
	huggingface_hub==2.4.0
	hf-xet==1.8.0
	sentencepiece==0.2.3
	jinja2==3.1.6
	markupsafe==3.0.4
	requests==2.34.2
	urllib3==2.8.0
	certifi==2026.10.19.post1
	charset-normalizer==3.5.3
	idna==3.20
	tqdm==4.70.1
	pyyaml==6.0.4
	regex==2026.11.19
	packaging==26.4
	filelock==4.3.2
	fsspec==2026.9.0
	typing_extensions==4.16.0
	typer==0.29.2
	click==8.5.1
	rich==15.0.0
	markdown-it-py==4.3.0
	mdurl==0.1.2
	pygments==2.21.0
	shellingham==1.5.4
	annotated-doc==0.0.7
	httpx2==2.16.2
	httpcore2==2.16.2
	h11==0.16.0
	anyio==4.16.0
	truststore==0.10.5
	pydantic==2.14.4
	pydantic_core==2.50.5
	annotated-types==0.8.0
	typing-inspection==0.4.5
)

check() {
	PYTHONPATH="$DEST" "$PY" -s - "$MLX_VLM_VERSION" <<'EOF' >/dev/null 2>&1
import sys
import mlx.core, PIL, transformers
import mlx_vlm.utils, mlx_vlm.models.gemma3
from importlib.metadata import version
sys.exit(0 if version("mlx-vlm") == sys.argv[1] else 1)
EOF
}

if [ -f "$DEST/READY" ] && check; then
	echo "mlx-vlm $MLX_VLM_VERSION already installed in $DEST"
	exit 0
fi

rm -rf "$DEST"
mkdir -p "$DEST"
echo "installing mlx-vlm $MLX_VLM_VERSION and ${#PACKAGES[@]} pinned packages into $DEST"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$DEST" "${PACKAGES[@]}"

if ! check; then
	echo "mlx-vlm does not import from $DEST" >&2
	exit 1
fi
touch "$DEST/READY"
echo "installed mlx-vlm $MLX_VLM_VERSION in $DEST"
