# Sourced on the GPU machine from the repository root (see prepare.sh):
# unpacks the carried MLX CUDA site, binaries and tokenizers once, then
# sets the environment that runs them.
# The tarball's parts were copied to /tmp/stage by the calls before.
G=$(dirname "${BASH_SOURCE[0]}")
if [ ! -f /tmp/site/.ok ]; then
	mkdir -p /tmp/site /tmp/tok
	cat $(ls /tmp/stage/p* | sort -V) | xz -d | tar x -C /tmp/site
	# The machine's NVIDIA wheels, as links, with CUDA's crt headers added
	# where carried: MLX's run-time compiles of some of its own kernels
	# include crt/mma.h, which those wheels lack.
	nv=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
	if [ -f "$G/crt.tar.xz" ] && cp -rs "$nv" /tmp/site/nvidia 2>/dev/null; then
		tar xJf "$G/crt.tar.xz" -C /tmp/site/nvidia/cu13/include
	else
		rm -rf /tmp/site/nvidia
		ln -sfn "$nv" /tmp/site/nvidia
	fi
	touch /tmp/site/.ok
fi
# The tokenizers and binaries on every call: a later carry may bring newer
# ones.
mkdir -p /tmp/tok
[ ! -f "$G/tok.tar.xz" ] || tar xJf "$G/tok.tar.xz" -C /tmp/tok
for x in "$G"/*.xz; do
	case $x in */tok.tar.xz | */crt.tar.xz) continue ;; esac
	b=$(basename "$x" .xz)
	xz -dc "$x" > "/tmp/$b" && chmod +x "/tmp/$b"
done
# ktrace and tcmalloc, if carried, on every call: a later carry may bring
# newer ones.
[ ! -f "$G/libktrace.so" ] || cp "$G/libktrace.so" /tmp/
[ ! -f "$G/libtcmalloc_minimal.so.4" ] || cp "$G/libtcmalloc_minimal.so.4" /tmp/
export PYTHONPATH=/tmp/site LD_LIBRARY_PATH=/tmp/site/mlx/lib CUDA_HOME=/usr/local/cuda-13 PATH=/opt/torch/.venv/bin:$PATH
