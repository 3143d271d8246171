#!/usr/bin/env bash
# The GPU runs of one device session, by phase, on a machine where
# prepare.sh's carry was unpacked (env.sh sourced; /tmp/provider,
# /tmp/kvpool.test, /tmp/llama.test, /tmp/tok). Each phase writes a folder
# under R and tars it into R/PHASE.tgz (a call returns at most 8 files).
#
#   bash scripts/gpu/session.sh test     # kvpool's CUDA test (paged decode kernel), decode-step benchmark
#   SERVERS=ours bash scripts/gpu/session.sh llama      # bench_gpu.sh llama
#   SERVERS=ours,mlx-lm bash scripts/gpu/session.sh prefix
#   MODES="split 1" bash scripts/gpu/session.sh diag    # one server per decode mode, shared-prefix c=1
#   PROVIDER_GPU_PAGED=split bash scripts/gpu/session.sh burst  # c=1 decode after a c=8 burst that grows the pool
#   bash scripts/gpu/session.sh qmv      # the affine matrix-vector kernel: CUDA test, throughput by matrix shape
#   bash scripts/gpu/session.sh steps    # decode step: MLX's matmul, the kernel, fused projections; mlx-lm's step
#   bash scripts/gpu/session.sh pace     # one machine: the bare step, then served c=1 TPOT per server setting
#   RUNS="1:- 64:- 64:-:affine4" bash scripts/gpu/session.sh gptoss  # gpt-oss-20b served (dummy weights), traced
#   SETTINGS="PROVIDER_GPU_GATHER_FP4=1 PROVIDER_GPU_GATHER_FP4=0" bash scripts/gpu/session.sh fp4  # the expert kernel: tests, then served
#     (its tests need TESTS="mlx model/gptoss ..." in prepare.sh)
#   bash scripts/gpu/session.sh trace    # device timelines (ktrace): our step, mlx-lm's, our server's at c=1
#   TRACE_STEPS=0 TRACE_CONCURRENCY=16 SETTINGS="PROVIDER_STEP_AHEAD=1 PROVIDER_STEP_AHEAD=0" bash scripts/gpu/session.sh trace
#   SETTINGS="- MLX_MAX_OPS_PER_BUFFER=200" bash scripts/gpu/session.sh mlxenv  # the step per MLX setting
#   RUNS="a|rows1|50|VAR=1,VAR2=2|trace b|rows8|50||" [ROUNDS=3] bash scripts/gpu/session.sh runs  # named decode steps
#     (CPUS=gpu or CPUS=LIST among a run's variables pins it to those cores)
#   CASES="n4096_k4096/rows8/qmv0 n4096_k4096/rows8/qmv1" bash scripts/gpu/session.sh qmvtrace  # products' device time
#   HPROF="build1:3000 rows1:500" bash scripts/gpu/session.sh hprof  # host samples of our step, then mlx-lm's
#
# The decode-step benchmark (model/llama BenchmarkDecodeStep) times steps
# of 1 and 8 rows on the random Llama-2-7B-shape checkpoint, after prompts
# of 120 and 2,048 tokens, with decode attention through gathered keys and
# through the paged kernel (PROVIDER_GPU_PAGED=0, 1 and split; STEPS picks).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PHASE=${1:?usage: session.sh test|llama|prefix|diag|burst|qmv|steps|pace|trace|gptoss|fp4|mlxenv|runs|hprof|qmvtrace}
R=${R:-${OUT:?set OUT or R}}
D=/tmp/session-$PHASE
rm -rf "$D" && mkdir -p "$D"
export WORK=${WORK:-/tmp/provider-gpubench}
CKPT=$WORK/llama2-7b-4bit
# Where a traced process (ktrace, carried built as /tmp/libktrace.so)
# finds CUPTI: the machine's NVIDIA wheels, or its CUDA toolkit.
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/site/nvidia/cu13/lib:/usr/local/cuda-13/extras/CUPTI/lib64
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H100*) export HBM_BYTES_PER_S=${HBM_BYTES_PER_S:-3.35e12} ;;
*) export HBM_BYTES_PER_S=${HBM_BYTES_PER_S:-4.8e12} ;;
esac
checkpoint() {
	mkdir -p "$WORK"
	[ -f "$CKPT/config.json" ] ||
		python3 scripts/make_random_llama.py --preset llama2-7b --out "$CKPT" --tokenizer /tmp/tok/llama2.json >"$D/checkpoint.txt" 2>&1
}
# serve_ours PORT LOG [VAR=VALUE ...]: our server on the checkpoint, RAM
# prefix cache only, MAX_CONCURRENT running rows (8), in the background
# (pid in SERVER) until it answers /health.
serve_ours() {
	local port=$1 log=$2
	shift 2
	env PROVIDER_PREFIX_CACHE_SSD=0 "$@" /tmp/provider serve --no-auth --model "$CKPT" --addr "127.0.0.1:$port" \
		--max-concurrent "${MAX_CONCURRENT:-8}" >"$log" 2>&1 &
	SERVER=$!
	for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 1; done
}
stop_ours() {
	kill "$SERVER"
	wait "$SERVER"
}
# bench_ours PORT NAME [bench flags...]: provider bench against it, its
# report in $D/NAME and its output in $D/NAME.txt.
bench_ours() {
	local port=$1 name=$2
	shift 2
	/tmp/provider bench --target "ours=http://127.0.0.1:$port" --model llama2-7b-4bit --endpoint completions \
		--ignore-eos --warmup 0 --progress=false --out "$D/$name" "$@" >"$D/$name.txt" 2>&1
}
# decode_step NAME SUB-BENCHMARK STEPS [VAR=VALUE ...]: model/llama's
# BenchmarkDecodeStep on the checkpoint, its output in $D/NAME.txt; the
# test binary is TESTBIN if set (another build, for a before and after in
# one run), else /tmp/llama.test. CPUS=LIST among the variables runs it
# on those cores only (taskset; "gpu" for the GPU's local cores, see
# gpu_cpus).
decode_step() {
	local name=$1 sub=$2 steps=$3 pin=()
	shift 3
	for v in "$@"; do
		case $v in CPUS=gpu) pin=(taskset -c "$(gpu_cpus)") ;; CPUS=*) pin=(taskset -c "${v#CPUS=}") ;; esac
	done
	(cd model/llama && env PROVIDER_BENCH_MODEL="$CKPT" "$@" "${pin[@]}" timeout 150 "${TESTBIN:-/tmp/llama.test}" \
		-test.run '^$' -test.bench "BenchmarkDecodeStep/$sub" -test.benchtime "${steps}x") >"$D/$name.txt" 2>&1
	echo "$name: exit $?"
	grep -E '^Benchmark' "$D/$name.txt"
}
# gpu_cpus: the cores local to the first NVIDIA GPU (its PCI device's
# local_cpulist), or every core where the system does not say.
gpu_cpus() {
	local dev
	for dev in /sys/bus/pci/devices/*; do
		# NVIDIA (0x10de), a display controller (class 0x03....).
		if [ "$(cat "$dev/vendor" 2>/dev/null)" = 0x10de ] && [ -f "$dev/local_cpulist" ]; then
			case $(cat "$dev/class") in 0x03*)
				cat "$dev/local_cpulist"
				return
				;;
			esac
		fi
	done
	echo "0-$(($(nproc --all) - 1))"
}
# setting_vars SETTING: vars, the array of the VAR=VALUE a setting lists
# (comma-separated; "-" or empty for none).
setting_vars() {
	vars=()
	[ -z "$1" ] || [ "$1" = - ] || IFS=, read -r -a vars <<<"$1"
}
# next_setting SETTING: the next of a phase's settings: i counts them (from
# 1), vars lists its VAR=VALUE (setting_vars).
i=0
next_setting() {
	i=$((i + 1))
	setting_vars "$1"
}
# bench_c1 PORT NAME: bench_ours at c=1, 16 random ~128-token prompts
# (seed 3), 64 tokens each.
bench_c1() {
	bench_ours "$1" "$2" --concurrency 1 --requests 16 --prompts random --prompt-tokens 128 --max-tokens 64 --seed 3
}
# traced FILE: kt, the environment that records the process's device
# timeline into FILE (scripts/gpu/ktrace.c).
traced() {
	kt=(CUDA_INJECTION64_PATH=/tmp/libktrace.so KTRACE_OUT="$1")
}
# steps_of NAME SKIP: $D/trace-NAME.txt cut into steps (ksteps.py, the
# first SKIP dropped) into $D/steps-NAME.txt and shown, the trace then
# xz-compressed.
steps_of() {
	python3 scripts/gpu/ksteps.py "$D/trace-$1.txt" --skip "$2" | tee "$D/steps-$1.txt"
	xz -T0 "$D/trace-$1.txt"
}
# cuda_test NAME DIR PATTERN [VAR=VALUE ...]: the carried test binary
# /tmp/NAME.test in DIR on the tests PATTERN names, its output in
# $D/NAME.txt and its outcome shown.
cuda_test() {
	local name=$1 dir=$2 run=$3
	shift 3
	(cd "$dir" && env "$@" timeout 240 "/tmp/$name.test" -test.run "$run" -test.v) >"$D/$name.txt" 2>&1
	echo "$name test: exit $?"
	grep -E '^(=== RUN|--- |PASS|FAIL|ok)|Error|error|tokens' "$D/$name.txt" | head -40
}
# kvpool_test: kvpool's CUDA test (KVPOOL_RUN, default the paged kernel's),
# then, where MLX_RUN names tests, mlx's.
kvpool_test() {
	cuda_test kvpool kvpool "${KVPOOL_RUN:-TestAttendPagedCUDA}"
	[ -z "${MLX_RUN:-}" ] || cuda_test mlx mlx "$MLX_RUN"
}
# step_metrics PORT: our server's step counters, labels dropped, sorted.
step_metrics() {
	curl -sf "http://127.0.0.1:$1/metrics" |
		grep -E '^(provider_slot_step|provider_slot_ahead|provider_engine_steps_total)' | sed -E 's/\{[^}]*\}//' | sort
}
case $PHASE in
test)
	nvidia-smi >"$D/nvidia-smi.txt" 2>&1
	kvpool_test
	checkpoint
	# STEPS: prompt:PROVIDER_GPU_PAGED[:sub-benchmark[:pool blocks]], in the order run.
	for run in ${STEPS:-2048:1:rows1 2048:split:rows1 120:1 120:split 1024:1:rows8 1024:split:rows8}; do
		IFS=: read -r prompt paged rows pool <<<"$run"
		decode_step "step-prompt$prompt-paged$paged${rows:+-$rows}${pool:+-pool$pool}" "${rows:-}" 30 \
			PROVIDER_GPU_PAGED="$paged" PROVIDER_BENCH_PROMPT="$prompt" PROVIDER_BENCH_POOL_BLOCKS="${pool:-0}"
	done
	;;
llama)
	checkpoint
	OUT=$D PROVIDER=/tmp/provider TOKENIZER_LLAMA=/tmp/tok/llama2.json CONCURRENCY=${CONCURRENCY:-1,8,16,32,64} \
		REQUESTS=${REQUESTS:-64} WARM_REQUESTS=${WARM_REQUESTS:-16} MAX_TOKENS=${MAX_TOKENS:-64} \
		timeout "${LIMIT:-480}" bash scripts/bench_gpu.sh llama
	echo "bench llama: exit $?"
	grep -h -E 'warm-up|slow step|kv pool grew' "$D"/logs/ours*.log 2>/dev/null | head -30
	;;
prefix)
	checkpoint
	OUT=$D PROVIDER=/tmp/provider TOKENIZER_LLAMA=/tmp/tok/llama2.json MAX_TOKENS=${MAX_TOKENS:-64} \
		timeout "${LIMIT:-480}" bash scripts/bench_gpu.sh prefix
	echo "bench prefix: exit $?"
	grep -h -E 'warm-up|slow step|kv pool grew' "$D"/logs/ours*.log 2>/dev/null | head -30
	;;
diag)
	# Per PROVIDER_GPU_PAGED mode in MODES: our server with the prefix
	# cache (RAM), 6 shared-prefix requests at c=1, then its step metrics
	# and how many kernels MLX had compiled to disk before and after them
	# (a count that grows while serving means kernels compiled per step).
	checkpoint
	ptx=$HOME/.cache/provider/mlx
	for mode in ${MODES:-split 1}; do
		serve_ours 18504 "$D/server-$mode.log" PROVIDER_GPU_PAGED="$mode"
		before=$(find "$ptx" -type f 2>/dev/null | wc -l)
		bench_ours 18504 "bench-$mode" --concurrency 1 --requests 6 --prompts shared-prefix --prompt-tokens 2112 \
			--prefix-tokens 2048 --prefixes 2 --max-tokens 32 --seed 5
		after=$(find "$ptx" -type f 2>/dev/null | wc -l)
		echo "mode $mode: kernels on disk $before -> $after"
		step_metrics 18504 | tee "$D/metrics-$mode.txt"
		grep -h '"msg":"request"' "$D/server-$mode.log" | grep -o '"cached_tokens":[0-9]*,.*"e2e_ms":[0-9]*'
		grep -h 'kv pool grew' "$D/server-$mode.log"
		stop_ours
	done
	;;
burst)
	# Most of the prefix phase's warm-up (random ~2,112-token prompts, 16
	# at c=8: the prefix cache fills to about its budget and the pool
	# grows past it), then 4 requests at c=1; each request's TPOT from the
	# server's log, to see whether decode stays as fast after the growth.
	checkpoint
	serve_ours 18505 "$D/server.log"
	for run in "8 16 16 99" "1 4 32 7"; do
		read -r levels n tokens seed <<<"$run"
		bench_ours 18505 "bench-$seed" --concurrency "$levels" --requests "$n" --prompts random --prompt-tokens 2112 \
			--max-tokens "$tokens" --seed "$seed"
	done
	grep -h '"msg":"request"' "$D/server.log" | sed -E 's/.*"prompt_tokens":([0-9]+),"completion_tokens":([0-9]+),"cached_tokens":([0-9]+).*"ttft_ms":([0-9]+),"e2e_ms":([0-9]+).*/\1 \2 \3 \4 \5/' |
		awk '{printf "prompt %d out %d cached %d ttft %d ms tpot %.1f ms\n", $1, $2, $3, $4, ($5-$4)/($2>1?$2-1:1)}'
	grep -h 'prefix cache stats' "$D/server.log" | tail -1
	grep -h 'kv pool grew' "$D/server.log"
	stop_ours
	;;
qmv)
	# The affine matrix-vector kernel (mlx/shim.cpp kAffineGemv): its test
	# against float64 products, then its throughput against MLX's quantized
	# matmul on the shapes of a Llama-2-7B step, with the work shapes in
	# QMV_SHAPES (R:U:W) beside the default.
	nvidia-smi >"$D/nvidia-smi.txt" 2>&1
	if [ "${QMV_TESTS:-1}" = 1 ]; then
		(cd mlx && timeout 240 /tmp/mlx.test -test.run TestAffineGemvCUDA -test.v) >"$D/gemv-test.txt" 2>&1
		echo "gemv test: exit $?"
		grep -E '^(--- |ok|FAIL|PASS)|gemv_cuda_test' "$D/gemv-test.txt" | head -20
	fi
	(cd mlx && PROVIDER_BENCH_QMV_SHAPES="${QMV_SHAPES-1:8:4 4:4:4 2:8:4 1:4:8}" timeout "${LIMIT:-300}" \
		/tmp/mlx.test -test.run '^$' -test.bench BenchmarkAffineGemvCUDA -test.benchtime 20x) >"$D/gemv-bench.txt" 2>&1
	echo "gemv bench: exit $?"
	grep -E '^Benchmark' "$D/gemv-bench.txt"
	;;
steps)
	# Decode steps of 1 and 8 rows after 120-token prompts, per
	# PROVIDER_GPU_QMV:PROVIDER_GPU_FUSE in RUNS, then mlx-lm's step on the
	# same checkpoint.
	checkpoint
	for run in ${RUNS:-0:0 1:0 1:1}; do
		IFS=: read -r qmv fuse <<<"$run"
		decode_step "step-qmv$qmv-fuse$fuse" "" 30 PROVIDER_GPU_QMV="$qmv" PROVIDER_GPU_FUSE="$fuse"
	done
	timeout 150 python3 scripts/mlxlm_decode_step.py "$CKPT" --steps 30 >"$D/step-mlxlm.txt" 2>&1
	echo "mlx-lm step: exit $?"
	grep -E '^mlx-lm' "$D/step-mlxlm.txt"
	;;
pace)
	# What paces a served token: on one machine, the one-row decode step
	# (BenchmarkDecodeStep/rows1), then our server at c=1 (16 random
	# ~128-token prompts, 64 tokens) once per setting in SETTINGS
	# (space-separated; each a comma-separated list of VAR=VALUE, "-" for
	# the defaults), with its step metrics: build, wait, steps built ahead.
	checkpoint
	decode_step step rows1 50
	for setting in ${SETTINGS:-- PROVIDER_STEP_AHEAD=0 PROVIDER_GPU_QMV=0,PROVIDER_GPU_FUSE=0}; do
		next_setting "$setting"
		serve_ours 18506 "$D/server-$i.log" "${vars[@]}"
		step_metrics 18506 >"$D/metrics-$i-before.txt"
		bench_c1 18506 "bench-$i"
		step_metrics 18506 >"$D/metrics-$i-after.txt"
		echo "setting $i ($setting):"
		grep -A1 'target  level' "$D/bench-$i.txt" | tail -1
		# The bench's own steps: each counter's change, and build and wait a step.
		join "$D/metrics-$i-before.txt" "$D/metrics-$i-after.txt" | awk '{d[$1] = $3 - $2; print $1, d[$1]}
			END { n = d["provider_engine_steps_total"]; if (n > 0) printf "per step: build %.2f ms, wait %.2f ms\n",
				1e3 * d["provider_slot_step_build_seconds_total"] / n, 1e3 * d["provider_slot_step_wait_seconds_total"] / n }'
		stop_ours
	done
	;;
trace)
	# Where a step's time goes: a device timeline (traced) of our decode
	# step of 1 and of 8 rows, each in its own process, of mlx-lm's step
	# (all three skipped with TRACE_STEPS=0), and of our server per setting
	# in SETTINGS (as in pace) at concurrency TRACE_CONCURRENCY (1; above
	# 1, 64 requests and as many running rows), each cut into steps
	# (steps_of); a server's kernels also by name over the whole run. The
	# untraced step first, for the tracing's cost.
	checkpoint
	ldd /tmp/libktrace.so | grep cupti
	if [ "${TRACE_STEPS:-1}" != 0 ]; then
		decode_step step-rows1-untraced rows1 50
		for sub in rows1:200 rows8:100; do
			IFS=: read -r rows n <<<"$sub"
			traced "$D/trace-step-$rows.txt"
			decode_step "step-$rows" "$rows" "$n" "${kt[@]}"
			steps_of "step-$rows" 5
		done
		for rows in 1 8; do
			traced "$D/trace-mlxlm-rows$rows.txt"
			env "${kt[@]}" timeout 150 python3 scripts/mlxlm_decode_step.py "$CKPT" --steps 50 --rows "$rows" \
				>"$D/step-mlxlm-rows$rows.txt" 2>&1
			grep -E '^mlx-lm' "$D/step-mlxlm-rows$rows.txt"
			steps_of "mlxlm-rows$rows" 5
		done
	fi
	c=${TRACE_CONCURRENCY:-1}
	for setting in ${SETTINGS:--}; do
		next_setting "$setting"
		traced "$D/trace-server-$i.txt"
		if [ "$c" = 1 ]; then
			serve_ours 18507 "$D/server-$i.log" "${kt[@]}" "${vars[@]}"
			bench_c1 18507 "bench-$i"
		else
			MAX_CONCURRENT=$c serve_ours 18507 "$D/server-$i.log" "${kt[@]}" "${vars[@]}"
			bench_ours 18507 "bench-$i" --concurrency "$c" --requests 64 --prompts random --prompt-tokens 128 \
				--max-tokens 64 --seed 3
		fi
		sleep 1
		echo "server setting $i ($setting):"
		grep -A1 'target  level' "$D/bench-$i.txt" | tail -1
		python3 scripts/gpu/ksteps.py "$D/trace-server-$i.txt" --by-kernel --top 25 | tee "$D/kernels-server-$i.txt"
		steps_of "server-$i" 20
		stop_ours
	done
	;;
gptoss)
	# Where gpt-oss-20b's served step goes (dummy weights at true size; the
	# model is MoE, its expert products through MLX's gather_qmm): per
	# C:SETTING[:affine4] in RUNS (SETTING as in pace), our server traced
	# with C running rows, after a warm-up of C requests, on max(64, 2C)
	# random ~128-token prompts of 64 tokens (16 at C=1); its kernels by
	# name over the run, the run cut into steps, each result copied to R as
	# it comes. affine4 serves the model as mlx-lm's 4-bit conversion stores
	# it (every matrix affine, 4 bits in groups of 64) instead of the
	# published MXFP4 experts.
	ldd /tmp/libktrace.so | grep cupti
	for run in ${RUNS:-1:- 64:-}; do
		IFS=: read -r c setting quant <<<"$run"
		next_setting "$setting"
		name=gptoss-$i-c$c${quant:+-$quant}
		config=testdata/configs/gpt-oss-20b.json
		if [ "$quant" = affine4 ]; then
			config=$D/gpt-oss-20b-affine4.json
			python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c.pop("quantization_config", None)
c["quantization"] = {"group_size": 64, "bits": 4, "mode": "affine"}
json.dump(c, open(sys.argv[2], "w"), indent=1)' testdata/configs/gpt-oss-20b.json "$config"
		fi
		n=$((c > 32 ? 2 * c : 64))
		[ "$c" != 1 ] || n=16
		traced "$D/trace-$name.txt"
		env PROVIDER_PREFIX_CACHE_SSD=0 "${kt[@]}" "${vars[@]}" /tmp/provider serve --no-auth \
			--dummy-weights "$config" --tokenizer /tmp/tok/gptoss.json \
			--addr 127.0.0.1:18508 --max-concurrent "$c" >"$D/server-$name.log" 2>&1 &
		SERVER=$!
		for _ in $(seq 300); do curl -sf http://127.0.0.1:18508/health >/dev/null && break; sleep 1; done
		model=$(curl -sf http://127.0.0.1:18508/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
		for phase in warm bench; do
			k=$n seed=3 tokens=64
			[ $phase = bench ] || { k=$c seed=99 tokens=16; }
			/tmp/provider bench --target "ours=http://127.0.0.1:18508" --model "$model" --endpoint completions \
				--ignore-eos --warmup 0 --progress=false --concurrency "$c" --requests "$k" --prompts random \
				--prompt-tokens 128 --max-tokens "$tokens" --seed "$seed" --out "$D/$phase-$name" >"$D/$phase-$name.txt" 2>&1
		done
		sleep 1
		echo "run $i: c=$c ($setting):"
		grep -A1 'target  level' "$D/bench-$name.txt" | tail -1
		if kill -0 "$SERVER" 2>/dev/null; then
			stop_ours
		else
			wait "$SERVER"
			echo "the server exited during the run (status $?); its log ends:"
			tail -5 "$D/server-$name.log"
		fi
		python3 scripts/gpu/ksteps.py "$D/trace-$name.txt" --by-kernel --top 30 >"$D/kernels-$name.txt"
		head -20 "$D/kernels-$name.txt"
		steps_of "$name" 20
		# The trace (tens of MB compressed) stays behind: the phase's
		# tarball must come back within a call's limit.
		rm -f "$D/trace-$name.txt.xz"
		cp "$D/kernels-$name.txt" "$D/steps-$name.txt" "$D/bench-$name.txt" "$D/server-$name.log" "$R/" 2>/dev/null
	done
	;;
fp4)
	# The MXFP4 expert kernel: mlx's CUDA test of it and gpt-oss's (greedy
	# tokens through it and through gather_qmm, on the tiny fixtures; and
	# with q/k/v fused at upload and apart, on the tiny fixtures and on
	# gpt-oss-20b's heads, where the q/k/v kernel stores k and v),
	# then gpt-oss-20b served untraced (bench_gpu.sh gptoss) once per
	# setting in SETTINGS (default: the kernel, then gather_qmm), in turn.
	nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$D/gpu.txt"
	cuda_test mlx mlx "${MLX_RUN:-GatherFP4}"
	cuda_test gptoss model/gptoss "${GPTOSS_RUN:-ExpertKernel|FusedQKV}"
	for setting in ${SETTINGS:-PROVIDER_GPU_GATHER_FP4=1 PROVIDER_GPU_GATHER_FP4=0}; do
		next_setting "$setting"
		env "${vars[@]}" OUT="$D/gptoss-$i" PROVIDER=/tmp/provider TOKENIZER_GPTOSS=/tmp/tok/gptoss.json \
			GPTOSS_CONCURRENCY="${GPTOSS_CONCURRENCY:-1,8,32,64}" REQUESTS="${REQUESTS:-64}" WARM_REQUESTS=8 \
			MAX_TOKENS=64 PROMPT_TOKENS=128 MAX_CONCURRENT=64 timeout "${LIMIT:-240}" bash scripts/bench_gpu.sh gptoss \
			>"$D/gptoss-$i.txt" 2>&1
		echo "run $i ($setting): exit $?"
		grep 'gpt-oss-20b' "$D/gptoss-$i.txt"
	done
	;;
mlxenv)
	# Our decode step once per setting of MLX's own environment in
	# SETTINGS (space-separated; each a comma-separated list of VAR=VALUE,
	# "-" for MLX's defaults; each result also copied to R as it comes, in
	# case a later one never returns), then mlx-lm's step, then a timeline
	# of our one-row step under the setting in TRACED, if any.
	checkpoint
	for setting in ${SETTINGS:--}; do
		next_setting "$setting"
		echo "setting $i ($setting):"
		decode_step "step-$i" "" 30 "${vars[@]}"
		cp "$D/step-$i.txt" "$R/" 2>/dev/null
	done
	# mlx-lm's step under MLX's defaults, after ours.
	timeout 150 python3 scripts/mlxlm_decode_step.py "$CKPT" --steps 30 >"$D/step-mlxlm.txt" 2>&1
	grep -E '^mlx-lm' "$D/step-mlxlm.txt"
	if [ -n "${TRACED:-}" ]; then
		setting_vars "$TRACED"
		traced "$D/trace-traced.txt"
		decode_step step-traced rows1 200 "${kt[@]}" "${vars[@]}"
		steps_of traced 5
	fi
	;;
runs)
	# kvpool's CUDA test (KVPOOL_RUN; and mlx's, MLX_RUN; model/llama's,
	# LLAMA_RUN, on the checkpoint), then named
	# decode-step runs, each NAME|SUB-BENCHMARK|STEPS|VAR=VALUE,...|trace|BIN
	# (the last three may be empty; "trace" records a timeline, cut into
	# steps; BIN another test binary), each result copied to R as it
	# comes, then mlx-lm's step. With ROUNDS=N the list runs N times in
	# turn, each name suffixed -1 .. -N: a step the host paces moves by
	# up to 30 % between processes, so settings are compared in turn.
	# Where the host's cores lie against the GPU's (a step the host paces
	# may run at one of two speeds from one process to the next).
	{
		nvidia-smi topo -m
		echo "GPU-local cores: $(gpu_cpus)"
		lscpu
	} >"$D/topo.txt" 2>&1
	cp "$D/topo.txt" "$R/"
	kvpool_test
	cp "$D/kvpool.txt" "$R/"
	[ ! -f "$D/mlx.txt" ] || cp "$D/mlx.txt" "$R/"
	checkpoint
	if [ -n "${LLAMA_RUN:-}" ]; then
		cuda_test llama model/llama "$LLAMA_RUN" PROVIDER_BENCH_MODEL="$CKPT"
		cp "$D/llama.txt" "$R/"
	fi
	rounds=${ROUNDS:-1}
	specs=()
	for round in $(seq 1 "$rounds"); do
		for spec in $RUNS; do
			[ "$rounds" = 1 ] || spec="${spec%%|*}-$round|${spec#*|}"
			specs+=("$spec")
		done
	done
	for spec in "${specs[@]}"; do
		IFS='|' read -r name sub steps setting trace TESTBIN <<<"$spec"
		setting_vars "$setting"
		kt=()
		[ "$trace" != trace ] || traced "$D/trace-$name.txt"
		decode_step "$name" "$sub" "$steps" "${kt[@]}" "${vars[@]}"
		cp "$D/$name.txt" "$R/"
		if [ "$trace" = trace ]; then
			steps_of "$name" 5
			cp "$D/trace-$name.txt.xz" "$D/steps-$name.txt" "$R/"
		fi
	done
	timeout 150 python3 scripts/mlxlm_decode_step.py "$CKPT" --steps 30 >"$D/step-mlxlm.txt" 2>&1
	grep -E '^mlx-lm' "$D/step-mlxlm.txt"
	;;
hprof)
	# Where the host's time goes: ktrace's host sampler (no device activity
	# recorded) on decode-step sub-benchmarks, HPROF's SUB:STEPS (the
	# steps enough for a few seconds: a busy thread is sampled at the
	# kernel's clock tick; an optional third field names another test
	# binary), then on mlx-lm's step. hsamples.py resolves the
	# samples afterwards, against unstripped copies of the binaries.
	checkpoint
	sampled() {
		KS=(CUDA_INJECTION64_PATH=/tmp/libktrace.so KTRACE_SAMPLES="$D/samples-$1.txt")
	}
	for spec in ${HPROF:-build1:3000 rows1:500 rows8:250}; do
		IFS=: read -r sub steps TESTBIN <<<"$spec"
		name=$sub${TESTBIN:+-$(basename "$TESTBIN" .test)}
		sampled "$name"
		decode_step "hprof-$name" "$sub" "$steps" "${KS[@]}"
	done
	TESTBIN=
	sampled mlxlm
	env "${KS[@]}" timeout 150 python3 scripts/mlxlm_decode_step.py "$CKPT" --steps 400 --rows 1 >"$D/hprof-mlxlm.txt" 2>&1
	grep -E '^mlx-lm' "$D/hprof-mlxlm.txt"
	xz -T0 "$D"/samples-*.txt
	;;
qmvtrace)
	# Each product's time on the device, per case of BenchmarkAffineGemvCUDA
	# in CASES (its sub-benchmark path), each in its own traced process
	# with MLX's CUDA graphs off: in a graph, MLX's independent products
	# may run side by side, so the benchmark's own time a product is a
	# throughput, not one product's time as in a step, where each waits
	# for the last.
	for c in ${CASES:?CASES: sub-benchmarks of BenchmarkAffineGemvCUDA}; do
		name=$(echo "$c" | tr / -)
		traced "$D/trace-$name.txt"
		(cd mlx && env MLX_USE_CUDA_GRAPHS=0 "${kt[@]}" timeout 150 /tmp/mlx.test -test.run '^$' \
			-test.bench "BenchmarkAffineGemvCUDA/$c\$" -test.benchtime 20x) >"$D/$name.txt" 2>&1
		echo "$c: exit $?"
		python3 scripts/gpu/ksteps.py "$D/trace-$name.txt" --by-kernel --top 3 | tee "$D/kernels-$name.txt"
		rm -f "$D/trace-$name.txt"
	done
	;;
*)
	echo "session.sh: unknown phase $PHASE" >&2
	exit 2
	;;
esac
tar czf "$R/$PHASE${TAG:-}.tgz" -C /tmp "session-$PHASE"
