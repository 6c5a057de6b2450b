#!/usr/bin/env bash
# devrun.sh: one call of the GPU machine (see gpu/README.md). Builds the
# kernels' PTX with the machine's nvcc and packs it into $OUT/ptx.tgz for
# committing (NOBUILD=1: use the PTX built into the binaries), then runs
# the steps named in STEPS (functions below), logging under $OUT and
# summing up in $OUT/summary.txt.
#
#   make devbin                          # here: .devbin/bin.tgz (lowbit, gpu.test)
#   STEPS="gputest ab" bash gpu/devrun.sh  # there, carrying .devbin (and shared/)
#
# A baseline binary for same-machine A/B runs goes into bin.tgz as
# lowbit-base.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/devrun}
mkdir -p "$OUT"
BIN=$PWD/.devbin
for f in "$BIN"/bin.tgz "$BIN"/bin.txz; do [ -f "$f" ] && tar xf "$f" -C "$BIN"; done # the binaries travel packed
export LOWBIT_PTX_DIR=$PWD/gpu/kernels
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

build() {
	nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee -a "$OUT/summary.txt"
	[ -n "${NOBUILD:-}" ] && { unset LOWBIT_PTX_DIR; return; }
	if ! make -C gpu/kernels -j16 >"$OUT/make.log" 2>&1; then
		tail -40 "$OUT/make.log"
		exit 1
	fi
	tar czf "$OUT/ptx.tgz" gpu/kernels/*.ptx.gz
}

# gputest: every gpu test against the fresh PTX, and the runtime's own.
gputest() {
	(cd gpu && "$BIN/gpu.test" -test.v -test.count=1) >"$OUT/gputest.log" 2>&1
	log "gpu.test exit $?: $(grep -c '^--- PASS' "$OUT/gputest.log") passed, $(grep -c '^--- FAIL' "$OUT/gputest.log") failed"
	grep -E '^--- FAIL' -A5 "$OUT/gputest.log" | head -40
	(cd gpu/cuda && "$BIN/cuda.test" -test.v -test.count=1) >"$OUT/cudatest.log" 2>&1
	log "cuda.test exit $?: $(grep -c '^--- PASS' "$OUT/cudatest.log") passed, $(grep -c '^--- FAIL' "$OUT/cudatest.log") failed"
	grep -E '^--- FAIL' -A5 "$OUT/cudatest.log" | head -20
}

# bench SHAPE BITS [ENV...]: one measurement (tg128, and pp when PP is
# set), its line in the summary; LOWBIT=path runs another binary.
bench() {
	local shape=$1 bits=$2
	shift 2
	local line out
	out=$(env "$@" "${LOWBIT:-$BIN/lowbit}" bench --shape "$shape" --bits "$bits" -p "${PP:-0}" -n 128 -d "${DEPTH:-0}" -r "${REPS:-3}" --device cuda -q ${KV:+--kv-cache $KV} ${SAMPLE:+$SAMPLE} 2>&1)
	line=$(echo "$out" | grep -E '^\| .*(tg|pp)[0-9]' | awk -F'|' '{printf "%s %s", $(NF-2), $(NF-1)}')
	log "$shape $bits ${DEPTH:+d$DEPTH }${KV:+kv=$KV }${SAMPLE:+[$SAMPLE] }$* :$line"
	echo "$out" | grep -E 'achieved' | sed 's/^/   /' >>"$OUT/summary.txt"
}

# base: bench with the baseline binary and its own PTX.
base() { LOWBIT=$BIN/lowbit-base bench "$@" LOWBIT_PTX_DIR= BASE=1; }

# profile: tg128 with one kind of decode kernel left out (LOWBIT_SKIP,
# skip.go): what each costs in the pipeline, boundaries included.
profile() {
	local all=qkv,o,gateup,down,head
	for sh in "tinyllama 4" "bitnet-2b tq2" "llama2-7b 4"; do
		bench $sh
		for k in attn qkv o gateup down head $all attn,$all; do bench $sh LOWBIT_SKIP=$k; done
	done
}

# ab: the baseline against this build, alternating on one machine; then
# pp512, and the step with every layer kernel left out.
ab() {
	for round in 1 2 3; do
		for b in "tinyllama 4" "tinyllama 8" "bitnet-2b tq2" "llama2-7b 4"; do
			base $b
			bench $b
		done
	done
	PP=512 base tinyllama 4
	PP=512 bench tinyllama 4
	bench tinyllama 4 LOWBIT_SKIP=attn,qkv,o,gateup,down,head
}

# pp: the baseline against this build on TinyLlama q4's pp512, ROUNDS
# times (default 3), alternating.
pp() {
	for round in $(seq "${ROUNDS:-3}"); do
		PP=512 base tinyllama 4
		PP=512 bench tinyllama 4
	done
}

# ab512: ab with the prompt test too (-p 512 -n 128, as the issues
# measure): the session's cache then holds 641 positions.
ab512() {
	for round in 1 2; do
		for b in "tinyllama 4" "tinyllama 8" "bitnet-2b tq2" "llama2-7b 4"; do
			PP=512 base $b
			PP=512 bench $b
		done
	done
}

# depth: the baseline against this build at depth (-d), alternating.
depth() {
	for round in 1 2; do
		for b in base bench; do
			DEPTH=1900 $b tinyllama 4
			DEPTH=3900 $b llama2-7b 4
		done
	done
}

# table: the baseline against this build on every row of BENCHMARKS.md's
# H200 table (-p 512 -n 128 -r 3, and tg128 at depth), alternating, ROUNDS
# times (default 1); ROWS picks "small" (TinyLlama and BitNet shapes) or
# "large" (Llama-2-7B), default both.
table() {
	local small=("tinyllama 4" "tinyllama 8" "tinyllama f16" "bitnet-2b tq2" "bitnet-2b f16")
	local large=("llama2-7b 4" "llama2-7b 8")
	local rows=()
	[ "${ROWS:-all}" != large ] && rows+=("${small[@]}")
	[ "${ROWS:-all}" != small ] && rows+=("${large[@]}")
	for round in $(seq "${ROUNDS:-1}"); do
		for b in "${rows[@]}"; do
			PP=512 base $b
			PP=512 bench $b
		done
		if [ "${ROWS:-all}" != large ]; then DEPTH=1900 base tinyllama 4; DEPTH=1900 bench tinyllama 4; fi
		if [ "${ROWS:-all}" != small ]; then DEPTH=3900 base llama2-7b 4; DEPTH=3900 bench llama2-7b 4; fi
	done
}

# serve: one stream through lowbit serve against lowbit run, on a
# TinyLlama-shaped q4 model of random weights (transformers makes it, with
# TinyLlama's tokenizer from shared/models/llama2-tokenizer), greedy, 512
# tokens; then the time to first token of a 512-token prompt.
serve() {
	local m=/tmp/tinyllama-rand port=8089
	if [ ! -d $m-q4 ]; then
		python3 -c "
import torch, transformers as t
c = t.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
    rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
t.LlamaForCausalLM(c).to(torch.float16).save_pretrained('$m')
" >"$OUT/serve-model.log" 2>&1 || { tail -5 "$OUT/serve-model.log"; return; }
		cp ${TOKDIR:-shared/models/llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0}/* $m/
		"$BIN/lowbit" convert $m --bits 4 --out $m-q4 --no-validate -q >>"$OUT/serve-model.log" 2>&1 || { tail -5 "$OUT/serve-model.log"; return; }
	fi
	[ -n "${SERVE_MODEL_ONLY:-}" ] && return
	for i in 1 2 3; do
		"$BIN/lowbit" run $m-q4 "Once upon a time" -n 512 --temp 0 --device cuda --json -q |
			grep -E '"(generated_tokens|gen_tokens_per_sec)"' | tr -d ' \n' | sed 's/^/run: /' | tee -a "$OUT/summary.txt"
		echo | tee -a "$OUT/summary.txt"
	done
	"$BIN/lowbit" serve $m-q4 --device cuda --port $port -q --json 2>"$OUT/serve.log" &
	local pid=$!
	for _ in $(seq 120); do "$BIN/lowbit" loadtest http://127.0.0.1:$port -n 1 -c 1 --max-tokens 1 >/dev/null 2>&1 && break; sleep 1; done
	"$BIN/lowbit" loadtest http://127.0.0.1:$port -n 4 -c 1 --prompt-words 4 --max-tokens 512 --json >"$OUT/load-decode.json"
	"$BIN/lowbit" loadtest http://127.0.0.1:$port -n 8 -c 1 --prompt-words 511 --max-tokens 16 --json >"$OUT/load-ttft.json"
	kill -TERM $pid
	wait $pid
	log "serve exit $?"
	for f in load-decode load-ttft; do
		log "$f: $(tr -d ' \n' <"$OUT/$f.json" | grep -oE '"(completed|total_input_tokens|total_output_tokens|output_throughput)":[0-9.]+|"(ttft|tpot|itl)":\{[^}]*\}' | tr '\n' ' ')"
	done
}

# kv: decode at depth with each KV cache type, against the baseline
# (its cache is f32; the old binary knows no --kv-cache).
kv() {
	for round in 1 2; do
		DEPTH=1900 base tinyllama 4
		for t in f32 f16 q8; do DEPTH=1900 KV=$t bench tinyllama 4; done
		DEPTH=3900 base llama2-7b 4
		for t in f32 f16 q8; do DEPTH=3900 KV=$t bench llama2-7b 4; done
	done
}

# sampled: greedy against sampled decode (the issue's two settings), on
# this build, and depth 0 against the baseline.
sampled() {
	for b in "tinyllama 4" "llama2-7b 4"; do
		base $b
		bench $b
		SAMPLE="--temp 0.8 --top-p 0.9 --top-k 40" bench $b
		SAMPLE="--temp 0.8 --top-p 0.9 --top-k 40 --repeat-penalty 1.1" bench $b
	done
}

# prof: the kernels' time in a decode run (nsys's kernel summary): sampled
# TinyLlama, and the model families whose decode is furthest from its
# target.
prof() {
	command -v nsys >/dev/null || { log "prof: no nsys"; return; }
	for args in "tinyllama 4 --temp 0.8 --top-p 0.9 --top-k 40" "gemma2-9b 4" "qwen2.5-7b 4"; do
		set -- $args
		local name=$1-$2
		nsys profile -o "$OUT/prof-$name" -f true "$BIN/lowbit" bench --shape "$1" --bits "$2" -p 0 -n 64 -r 1 --device cuda -q "${@:3}" >/dev/null 2>&1
		nsys stats -q --report cuda_gpu_kern_sum --format csv "$OUT/prof-$name.nsys-rep" >"$OUT/kern-$name.csv" 2>/dev/null
		rm -f "$OUT/prof-$name.nsys-rep" "$OUT/prof-$name.sqlite"
		log "prof $name:"
		head -12 "$OUT/kern-$name.csv" | cut -d, -f1-4,9 | tee -a "$OUT/summary.txt"
	done
}

# batched: aggregate decode of B streams (bench -b).
batched() {
	for sh in tinyllama llama2-7b; do
		"$BIN/lowbit" bench --shape $sh --bits 4 -p 0 -n 128 -d 128 -b 1,8,32,64 -r 2 --device cuda -q 2>&1 | grep -E '^\|' | tee -a "$OUT/summary.txt"
	done
}

# parallel: lowbit serve --parallel 64 on a TinyLlama-shaped q4 model of
# random weights (as serve makes it), 64 clients at once, prompts of 128
# to 1024 words, 256 tokens each (issue 27's load).
parallel() {
	local m=/tmp/tinyllama-rand port=8090
	[ -d $m-q4 ] || { SERVE_MODEL_ONLY=1 serve; }
	"$BIN/lowbit" serve $m-q4 --device cuda --port $port --parallel 64 --ctx 4096 -q --json 2>"$OUT/parallel.log" &
	local pid=$!
	for _ in $(seq 120); do "$BIN/lowbit" loadtest http://127.0.0.1:$port -n 1 -c 1 --max-tokens 1 >/dev/null 2>&1 && break; sleep 1; done
	"$BIN/lowbit" loadtest http://127.0.0.1:$port -n 64 -c 64 --prompt-words 128 --prompt-words-max 1024 --max-tokens 256 --ignore-eos >"$OUT/load-parallel.txt" 2>&1
	"$BIN/lowbit" loadtest http://127.0.0.1:$port -n 64 -c 64 --prompt-words 128 --prompt-words-max 1024 --max-tokens 256 --ignore-eos --json >"$OUT/load-parallel.json" 2>&1
	kill -TERM $pid
	wait $pid
	log "parallel serve exit $?"
	cat "$OUT/load-parallel.txt" | tee -a "$OUT/summary.txt"
}

# attnsweep: decode at depth with decode attention's split and slice
# retuned (LOWBIT_ATTN_BLOCKS, LOWBIT_ATTN_SLICE).
attnsweep() {
	DEPTH=1900 bench tinyllama 4
	for b in 4 8 16; do for sl in 32 64 128; do DEPTH=1900 bench tinyllama 4 LOWBIT_ATTN_BLOCKS=$b LOWBIT_ATTN_SLICE=$sl; done; done
	DEPTH=3900 bench llama2-7b 4
	for sl in 64 128; do DEPTH=3900 bench llama2-7b 4 LOWBIT_ATTN_SLICE=$sl; done
}

# longplan: decode at depth with the long-context plan against the short
# one everywhere (LOWBIT_ATTN_BLOCKS=32 LOWBIT_ATTN_SLICE=256).
longplan() {
	for d in 0 512 1900; do
		DEPTH=$d bench tinyllama 4
		DEPTH=$d bench tinyllama 4 LOWBIT_ATTN_BLOCKS=32 LOWBIT_ATTN_SLICE=256
	done
	DEPTH=3900 bench llama2-7b 4
	DEPTH=3900 bench llama3.1-8b 4
	DEPTH=3900 bench llama3.1-8b 4 LOWBIT_ATTN_BLOCKS=32 LOWBIT_ATTN_SLICE=256
}

# ab0: decode at depth 0 against the baseline, alternating, two rounds.
ab0() {
	for round in 1 2; do
		for b in "tinyllama 4" "llama2-7b 4"; do
			base $b
			bench $b
		done
	done
}

# attnsplit: TinyLlama decode with four query heads a block and slices of
# 128 against today's split, at depths from 0 to 1900.
attnsplit() {
	for d in 0 512 1900; do
		DEPTH=$d bench tinyllama 4
		DEPTH=$d bench tinyllama 4 LOWBIT_ATTN_BLOCKS=8 LOWBIT_ATTN_SLICE=128
		DEPTH=$d bench tinyllama 4 LOWBIT_ATTN_BLOCKS=8 LOWBIT_ATTN_SLICE=256
	done
}

# kernels: lowbit validate --kernels on the GPU.
kernels() {
	"$BIN/lowbit" validate --kernels --device cuda >"$OUT/validate.log" 2>&1
	log "validate --kernels exit $?: $(grep -ciE 'pass' "$OUT/validate.log") lines with PASS"
	tail -3 "$OUT/validate.log" | tee -a "$OUT/summary.txt"
}

# final: the issues' commands on this build: pp512 and tg128 of every
# target shape, -r 5, and decode at depth.
final() {
	for b in "tinyllama 4" "tinyllama 8" "llama2-7b 4" "llama2-7b 8"; do PP=512 REPS=5 bench $b; done
	PP=512 bench bitnet-2b f16
	PP=512 bench bitnet-2b tq2
	"$BIN/lowbit" bench --shape tinyllama --bits 4 -p 0 -n 128 -d 1900 -r 3 --device cuda -q 2>&1 | grep -E '^\|' | tail -1 | tee -a "$OUT/summary.txt"
	"$BIN/lowbit" bench --shape llama2-7b --bits 4 -p 0 -n 128 -d 3900 -r 3 --device cuda -q 2>&1 | grep -E '^\|' | tail -1 | tee -a "$OUT/summary.txt"
}

# products: the matrix-vector benchmark (PRODUCTS: shape/format patterns).
products() {
	log "products"
	for pat in ${PRODUCTS:-bitnet2b.*/tq2-i8 tinyllama.*/^(q4|q8)}; do
		"$BIN/gpu.test" -test.run '^$' -test.bench "BenchmarkMatVec/$pat" -test.benchtime 30x >>"$OUT/products.log" 2>&1
	done
	grep -E '^BenchmarkMatVec' "$OUT/products.log" | awk '{print $1, $9 "us", $5 "%"}' |
		sed 's/BenchmarkMatVec.//' >>"$OUT/summary.txt"
}

build
for s in ${STEPS:-gputest ab}; do
	log "step $s ($(date -u +%H:%M:%S))"
	"$s"
done
log "done $(date -u +%H:%M:%S)"
