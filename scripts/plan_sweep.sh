#!/usr/bin/env bash
# Re-fit the prefill plan's cost model (plan.cu choose_split): PrefillBench times of chosen
# shapes at forced value splits and segment lengths, one line per (shape, vsplit, segment tokens).
#
#   scripts/plan_sweep.sh [BIN]     on the GPU machine (default BIN build-gpu/fastkda_gpu_tests)
#
# Env: SHAPES (bench shape names, space separated), VSPLITS (default "1 2 4"), SEGS (segment
# tokens, 0 = unsplit; default "0 1024 2048 4096"). Prints "SWEEP <shape> vs=<v> seg=<L> <ms>".
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build-gpu/fastkda_gpu_tests}
for shape in ${SHAPES:-H32_T4096 H32_T16384 H32_T65536 H8_T65536 H4_T65536}; do
  for vs in ${VSPLITS:-1 2 4}; do
    for seg in ${SEGS:-0 1024 2048 4096}; do
      # The bench sets FASTKDA_PREFILL_VSPLIT itself (its "@vsplit" runs), after a default run.
      ms=$(FASTKDA_BENCH_FILTER=$shape FASTKDA_BENCH_VSPLITS=$vs FASTKDA_BENCH_VSPLITS_ALL=1 \
        FASTKDA_PREFILL_SEG=$seg timeout 120 "$bin" --gtest_also_run_disabled_tests \
        --gtest_filter='PrefillBench.*' 2>&1 |
        awk -v s="$shape@vsplit$vs" '$1 == "BENCH" && $2 == s { print $3 }')
      echo "SWEEP $shape vs=$vs seg=$seg ${ms:-failed}"
    done
  done
done
