#!/usr/bin/env bash
# Runs the benchmarks quoted in the README and closing notes (model decode
# and prefill, the engine, one sampler step, the GEMM kernel) and writes
# them to bench/baseline.txt with the machine noted. Compare two runs with
# benchstat. `make bench` runs every benchmark instead.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/baseline.txt}"
{
	echo "# kvhost benchmarks, $(date -u +%Y-%m-%d), $(go version | cut -d' ' -f3)"
	echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GiB"
	go test -run '^$' -bench 'Decode|Prefill' -benchmem -benchtime 2s ./host/model/
	go test -run '^$' -bench . -benchmem -benchtime 3x ./host/engine/
	go test -run '^$' -bench 'StandardStep' -benchmem -benchtime 1s ./host/sampling/
	go test -run '^$' -bench 'MatMulGEMM|MatMul$|MatVecStream' -benchmem -benchtime 200ms ./kernels/cpu/
} 2>&1 | tee "$out"
