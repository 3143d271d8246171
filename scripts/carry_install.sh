#!/usr/bin/env bash
# Carry a CUDA install (make install MLX_WHEEL=mlx-cuda-13) to a GPU machine
# that can download nothing, in parts small enough for a transfer limit,
# and check it there. See docs/install.md ("Carrying an install").
#
#   scripts/carry_install.sh pack PREFIX [PART_BYTES]
#       Here. Packs PREFIX without lib/provider/nvidia (2.1 to 2.7 GB of NVIDIA
#       wheels, which the GPU machine's own Python wheels of the same
#       versions replace byte for byte) as an xz tarball split into
#       .carry1/, .carry2/, ... (PART_BYTES each, default 35000000), and
#       writes .carry1/nvidia.sha256, the checksums of the NVIDIA files the
#       install holds. Add /.carry*/ to .git/info/exclude first.
#
#   scripts/carry_install.sh stage N
#       There, one call per part: copies .carryN/ to /tmp/carry-stage/.
#
#   scripts/carry_install.sh unpack DEST NVIDIA_SITE
#       There, in the call that carries the last part: unpacks the parts
#       into DEST and fills DEST/lib/provider/nvidia from NVIDIA_SITE (a
#       site-packages/nvidia folder of NVIDIA's CUDA 13 wheels): the
#       folders the install holds, filtered as scripts/install.sh filters
#       them; counts the files identical to the install's (checksums) and
#       leaves this machine's checksums in /tmp/carry-stage/here.sha256.
#
#   scripts/carry_install.sh check DEST MODEL
#       There: runs DEST/bin/provider version and a short greedy generate
#       on the GPU with only the driver in reach (see below), and lists
#       where every shared library it loaded came from.
set -euo pipefail

cmd=${1:?usage: scripts/carry_install.sh pack PREFIX [PART_BYTES] | stage N | unpack DEST NVIDIA_SITE | check DEST MODEL}
case $cmd in
pack)
	prefix=${2:?PREFIX}
	part=${3:-35000000}
	rm -rf .carry[0-9]*
	tmp=$(mktemp -d)
	tar -C "$prefix" --exclude=lib/provider/nvidia -cf - . | xz -T0 -6 >"$tmp/install.tar.xz"
	(cd "$tmp" && split -b "$part" -d -a 1 install.tar.xz p)
	n=0
	for p in "$tmp"/p[0-9]; do
		n=$((n + 1))
		mkdir -p ".carry$n"
		mv "$p" ".carry$n/part"
	done
	(cd "$prefix/lib/provider" && find nvidia -type f -print0 | sort -z | xargs -0 sha256sum) >.carry1/nvidia.sha256
	(cd "$prefix/lib/provider" && find nvidia -type l -printf '%p %l\n' | sort) >.carry1/nvidia.links
	echo "$n" >.carry1/parts
	rm -rf "$tmp"
	du -b .carry[0-9]*/part
	;;
stage)
	n=${2:?N}
	mkdir -p /tmp/carry-stage
	cp ".carry$n/part" "/tmp/carry-stage/part$n"
	if [ -f ".carry$n/nvidia.sha256" ]; then cp ".carry$n"/nvidia.* ".carry$n/parts" /tmp/carry-stage/; fi
	ls -l /tmp/carry-stage
	;;
unpack)
	dest=${2:?DEST}
	site=${3:?NVIDIA_SITE}
	stage=/tmp/carry-stage
	n=$(cat "$stage/parts")
	mkdir -p "$dest"
	for i in $(seq 1 "$n"); do cat "$stage/part$i"; done | xz -d | tar -C "$dest" -xf -
	mkdir -p "$dest/lib/provider/nvidia"
	# The folders the install holds, from this machine's wheels, filtered
	# as scripts/install.sh filters them.
	for d in $(cut -d' ' -f3 "$stage/nvidia.sha256" | cut -d/ -f2 | sort -u); do
		cp -a "$site/$d" "$dest/lib/provider/nvidia/"
	done
	find "$dest/lib/provider/nvidia" \( -name '*.a' -o -name '*.py' -o -name '*.pyc' \) -delete
	find "$dest/lib/provider/nvidia" -depth -type d -name __pycache__ -exec rm -rf {} +
	find "$dest/lib/provider/nvidia" -depth -type d -empty -delete
	(cd "$dest/lib/provider" && find nvidia -type f -print0 | sort -z | xargs -0 sha256sum) >"$stage/here.sha256"
	same=$(comm -12 <(sort "$stage/nvidia.sha256") <(sort "$stage/here.sha256") | wc -l)
	differ=$(comm -23 <(sort "$stage/nvidia.sha256") <(sort "$stage/here.sha256") | wc -l)
	extra=$(comm -13 <(sort "$stage/nvidia.sha256") <(sort "$stage/here.sha256") | wc -l)
	echo "nvidia files: $same identical to the install's; $differ of the install's not here or different; $extra here not in the install"
	;;
check)
	# There: run the moved install as a machine with only the NVIDIA driver
	# would: no CUDA toolkit folder (/usr/local/cuda* renamed for the
	# run, then restored), an empty environment (no LD_LIBRARY_PATH, no
	# CUDA_HOME), a fresh kernel cache; then list every shared library the
	# generate run loaded and fail on any from outside the install and the
	# system (the driver's libraries count as the system).
	dest=${2:?DEST}
	model=${3:?MODEL}
	log=${4:-/tmp/carry-stage/ld}
	hidden=()
	restore() { for d in "${hidden[@]}"; do mv "$d.hidden" "$d"; done; }
	trap restore EXIT
	for d in /usr/local/cuda /usr/local/cuda-*; do
		if [ -e "$d" ] && [ "${d%.hidden}" = "$d" ]; then mv "$d" "$d.hidden" && hidden+=("$d"); fi
	done
	echo "hidden for the run: ${hidden[*]:-none}"
	rm -rf "$log".* /tmp/carry-ptx
	clean=(env -i PATH=/usr/bin:/bin HOME=/tmp MLX_PTX_CACHE_DIR=/tmp/carry-ptx)
	"${clean[@]}" "$dest/bin/provider" version
	"${clean[@]}" LD_DEBUG=libs LD_DEBUG_OUTPUT="$log" "$dest/bin/provider" generate --device gpu --model "$model" --prompt "Once upon a time" --max-tokens 24 --temperature 0
	echo "kernels compiled by the JIT: $(find /tmp/carry-ptx -name '*.ptx' | wc -l)"
	bad=0
	loaded=$(grep -h "calling init:" "$log".* | sed 's/.*calling init: //' | sort -u)
	destreal=$(cd "$dest" && pwd -P)
	while IFS= read -r f; do
		real=$(readlink -f "$f")
		case $real in
		"$destreal"/*) echo "install: ${real#"$destreal"/}" ;;
		*/libcuda.so* | */libnvidia-*) echo "driver:  $real" ;;
		/lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) echo "system:  $real" ;;
		*) echo "OUTSIDE: $real"; bad=1 ;;
		esac
	done <<<"$loaded"
	[ "$bad" = 0 ] && echo "every library loaded came from the install or the system"
	exit "$bad"
	;;
*)
	echo "unknown command $cmd" >&2
	exit 2
	;;
esac
