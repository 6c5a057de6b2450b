#!/usr/bin/env bash
# devrun.sh: one call of the GPU machine (see gpu/README.md). Builds the
# kernels' PTX with the machine's nvcc (and a variant with extra flags in
# /tmp/ptx-variant when VARIANT_FLAGS is set), packs it into $OUT/ptx.tgz
# for committing, runs the gpu tests against it, then the timings named in
# STEPS (each a function below), logging everything under $OUT.
#
#   make devbin                                              # here: .devbin/bin.tgz
#   STEPS="gputest profile" bash gpu/devrun.sh                   # there (carry .devbin)
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
	[ -n "${NOBUILD:-}" ] && { unset LOWBIT_PTX_DIR; return; } # the PTX built into the binaries
	if ! make -C gpu/kernels -j16 >"$OUT/make.log" 2>&1; then
		tail -40 "$OUT/make.log"
		exit 1
	fi
	tar czf "$OUT/ptx.tgz" gpu/kernels/*.ptx
	if [ -n "${VARIANT_FLAGS:-}" ]; then
		rm -rf /tmp/ptx-variant && cp -r gpu/kernels /tmp/ptx-variant && rm -f /tmp/ptx-variant/*.ptx
		make -C /tmp/ptx-variant -j16 FLAGS="-O3 -std=c++17 --ptx $VARIANT_FLAGS" >>"$OUT/make.log" 2>&1 || exit 1
	fi
}

# gputest: every gpu test against the fresh PTX.
gputest() {
	"$BIN/gpu.test" -test.v -test.count=1 >"$OUT/gputest.log" 2>&1
	log "gpu.test exit $?: $(grep -c '^--- PASS' "$OUT/gputest.log") passed, $(grep -c '^--- FAIL' "$OUT/gputest.log") failed"
	grep -E '^--- FAIL' -A5 "$OUT/gputest.log" | head -40
}

# bench SHAPE BITS [ENV...]: one tg128 measurement, its line in the summary.
bench() {
	local shape=$1 bits=$2
	shift 2
	local line
	line=$(env "$@" "$BIN/lowbit" bench --shape "$shape" --bits "$bits" -p "${PP:-0}" -n 128 -r "${REPS:-3}" --device cuda -q 2>&1 |
		grep -E '^\| .*(tg|pp)[0-9]' | awk -F'|' '{printf "%s %s", $6, $7}')
	log "$shape $bits $* :$line"
}

# profile: tg128 with one kind of decode kernel left out (LOWBIT_SKIP,
# skip.go): what each costs in the pipeline, boundaries included.
profile() {
	local all=qkv,o,gateup,down,head
	for sh in "tinyllama 4" "bitnet-2b tq2" "llama2-7b 4"; do
		bench $sh
		for k in attn qkv o gateup down head $all attn,$all; do bench $sh LOWBIT_SKIP=$k; done
	done
	bench tinyllama 4 LOWBIT_PDL=off
	bench tinyllama 4
}

# products: the matrix-vector benchmark, BitNet's int8 products on every
# kernel and TinyLlama's q4 and q8 products, prefetch off and on.
products() {
	for pf in off 25; do
		log "products prefetch=$pf"
		for pat in 'bitnet2b.*/tq2-i8' 'tinyllama.*/^(q4|q8)$'; do
			LOWBIT_PREFETCH=$pf "$BIN/gpu.test" -test.run '^$' -test.bench "BenchmarkMatVec/$pat" \
				-test.benchtime 30x >>"$OUT/products-$pf.log" 2>&1
		done
		grep -E '^BenchmarkMatVec' "$OUT/products-$pf.log" | awk '{print $1, $5 "us", $9 "%"}' |
			sed 's/BenchmarkMatVec.//' >>"$OUT/summary.txt"
	done
}

build
for s in ${STEPS:-gputest profile}; do
	log "step $s ($(date -u +%H:%M:%S))"
	"$s"
done
log "done $(date -u +%H:%M:%S)"
