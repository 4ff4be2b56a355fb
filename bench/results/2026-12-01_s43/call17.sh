#!/bin/bash
# session 43 call 17: the final build (t12's scan): fla chunk_kda vs fastkda (default plan) on the H32 rows in one call, then the rows with wy64 off / on
mkdir -p $OUT
BIN=build-gpu/wy/t12 BENCH_FILTER=H32_T FLA_FILTER=H32_T VSPLITS= FLA_TIMEOUT=300 scripts/gpu_check_prefill.sh bench fla 2>&1 | tail -9
for w in 0 1; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/t12 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/wy64=$w /"
done
