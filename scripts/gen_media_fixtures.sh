#!/usr/bin/env bash
# Writes the WebP fixtures of package media's tests into media/testdata,
# encoded by ffmpeg's libwebp (the binary scripts/setup_ffmpeg.sh installs)
# from two 16x12 pictures kept as PNG: one frame of ffmpeg's testsrc
# pattern (sharp: for lossless) and a smooth gradient (for lossy, which
# would smear the pattern beyond comparison at this size):
#
#   testsrc.png             reference pixels
#   testsrc.lossless.webp   VP8L: must decode to exactly testsrc.png
#   gradient.png            reference pixels
#   gradient.lossy.webp     VP8: must decode close to gradient.png
#   gradient.alpha.webp     VP8X + ALPH + VP8, half-transparent, colours
#                           close to gradient.png
#
# The tests generate PNG, JPEG and GIF themselves; Go has no WebP encoder.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FFMPEG=${FFMPEG:-$(bash "$ROOT/scripts/setup_ffmpeg.sh")}
OUT=$ROOT/media/testdata
mkdir -p "$OUT"
ff() { "$FFMPEG" -hide_banner -loglevel error -nostdin -y "$@"; }

ff -f lavfi -i testsrc=size=16x12:rate=1 -frames:v 1 -pix_fmt rgb24 "$OUT/testsrc.png"
ff -i "$OUT/testsrc.png" -c:v libwebp -lossless 1 "$OUT/testsrc.lossless.webp"
ff -f lavfi -i "color=black:size=16x12,format=rgb24,geq=r='X*16':g='Y*21':b=128" -frames:v 1 "$OUT/gradient.png"
ff -i "$OUT/gradient.png" -c:v libwebp -quality 90 "$OUT/gradient.lossy.webp"
ff -i "$OUT/gradient.png" -vf format=rgba,colorchannelmixer=aa=0.5 -c:v libwebp -quality 90 "$OUT/gradient.alpha.webp"
