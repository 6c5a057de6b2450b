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
[ -f "$BIN/bin.tgz" ] && tar xzf "$BIN/bin.tgz" -C "$BIN" # the binaries travel packed
export LOWBIT_PTX_DIR=$PWD/gpu/kernels
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

build() {
	nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee -a "$OUT/summary.txt"
	[ -n "${NOBUILD:-}" ] && { unset LOWBIT_PTX_DIR; return; }
	if ! make -C gpu/kernels -j16 >"$OUT/make.log" 2>&1; then
		tail -40 "$OUT/make.log"
		exit 1
	fi
	tar czf "$OUT/ptx.tgz" gpu/kernels/*.ptx
}

# gputest: every gpu test against the fresh PTX.
gputest() {
	"$BIN/gpu.test" -test.v -test.count=1 >"$OUT/gputest.log" 2>&1
	log "gpu.test exit $?: $(grep -c '^--- PASS' "$OUT/gputest.log") passed, $(grep -c '^--- FAIL' "$OUT/gputest.log") failed"
	grep -E '^--- FAIL' -A5 "$OUT/gputest.log" | head -40
}

# bench SHAPE BITS [ENV...]: one measurement (tg128, and pp when PP is
# set), its line in the summary; LOWBIT=path runs another binary.
bench() {
	local shape=$1 bits=$2
	shift 2
	local line out
	out=$(env "$@" "${LOWBIT:-$BIN/lowbit}" bench --shape "$shape" --bits "$bits" -p "${PP:-0}" -n 128 -d "${DEPTH:-0}" -r "${REPS:-3}" --device cuda -q 2>&1)
	line=$(echo "$out" | grep -E '^\| .*(tg|pp)[0-9]' | awk -F'|' '{printf "%s %s", $6, $7}')
	log "$shape $bits ${DEPTH:+d$DEPTH }$* :$line"
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
