#!/usr/bin/env bash
# Installs a static ffmpeg binary at .deps/ffmpeg/bin/ffmpeg, where package
# media looks for it (media.LocateFFmpeg). The binary comes from the
# imageio-ffmpeg wheel on PyPI, which ships it under
# imageio_ffmpeg/binaries/ffmpeg-linux-*; the wheel ships no ffprobe, so
# media probes with ffmpeg alone. Idempotent: it does nothing when the
# binary of the pinned version is already there. Prints the binary's path
# on stdout (nothing else goes to stdout).
#
# Environment:
#   PYTHON      python interpreter (default python3)
#   FFMPEG_DIR  install directory (default <repo>/.deps/ffmpeg)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
DEST=${FFMPEG_DIR:-$ROOT/.deps/ffmpeg}
VERSION=0.8.1
BIN=$DEST/bin/ffmpeg

ready() {
	[ -x "$BIN" ] && [ -f "$DEST/READY" ] && [ "$(cat "$DEST/READY")" = "$VERSION" ]
}

if ready; then
	echo "$BIN"
	exit 0
fi

rm -rf "$DEST"
mkdir -p "$DEST/wheel" "$DEST/bin"
echo "downloading imageio-ffmpeg==$VERSION into $DEST" >&2
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps \
	--only-binary=:all: \
	--dest "$DEST/wheel" "imageio-ffmpeg==$VERSION" >&2

wheels=("$DEST"/wheel/imageio_ffmpeg-"$VERSION"-*.whl)
if [ ! -f "${wheels[0]}" ]; then
	echo "no imageio-ffmpeg $VERSION wheel was downloaded" >&2
	exit 1
fi
"$PY" -m zipfile -e "${wheels[0]}" "$DEST/unpacked" >&2

bins=("$DEST"/unpacked/imageio_ffmpeg/binaries/ffmpeg-linux*)
if [ ! -f "${bins[0]}" ]; then
	echo "the imageio-ffmpeg wheel holds no ffmpeg-linux binary" >&2
	exit 1
fi
mv "${bins[0]}" "$BIN.tmp"
chmod 0755 "$BIN.tmp"
"$BIN.tmp" -hide_banner -version >/dev/null
mv "$BIN.tmp" "$BIN"
rm -rf "$DEST/wheel" "$DEST/unpacked"
echo "$VERSION" >"$DEST/READY"
echo "$BIN"
