# Sourced on the GPU machine from the repository root (see prepare.sh):
# unpacks the carried MLX CUDA site, binaries and tokenizers once, then
# sets the environment that runs them.
if [ ! -f /tmp/site/.ok ]; then
	mkdir -p /tmp/site /tmp/tok
	cat /tmp/stage/p1 /tmp/stage/p2 .gpu3/p3 | xz -d | tar x -C /tmp/site
	ln -sfn /opt/torch/.venv/lib/python3.12/site-packages/nvidia /tmp/site/nvidia
	tar xJf .gpu3/tok.tar.xz -C /tmp/tok
	for x in .gpu3/*.xz; do
		case $x in */tok.tar.xz) continue ;; esac
		b=$(basename "$x" .xz)
		xz -dc "$x" > "/tmp/$b" && chmod +x "/tmp/$b"
	done
	touch /tmp/site/.ok
fi
export PYTHONPATH=/tmp/site LD_LIBRARY_PATH=/tmp/site/mlx/lib CUDA_HOME=/usr/local/cuda-13 PATH=/opt/torch/.venv/bin:$PATH
