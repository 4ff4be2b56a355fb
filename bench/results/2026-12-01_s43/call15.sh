#!/bin/bash
# session 43 call 15: the final build (t10's scan, the plan's new wy64 window): PrefillGpu.*, fla chunk_kda vs fastkda (default plan) on the H32 rows in one call, then the rows with wy64 off
mkdir -p $OUT
timeout 240 build-gpu/wy/tF --gtest_filter='PrefillGpu.*' > $OUT/tests_tF.log 2>&1; echo "tF PrefillGpu rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_tF.log
grep -E '^\[prefill\]' $OUT/tests_tF.log > $OUT/prefill_errors.txt; echo "worst out / state: $(awk '{print $(NF-3)}' $OUT/prefill_errors.txt | sort -g | tail -1) / $(grep -v 'bf16\|boundary' $OUT/prefill_errors.txt | awk '{print $NF}' | sort -g | tail -1)"
BIN=build-gpu/wy/tF BENCH_FILTER=H32_T FLA_FILTER=H32_T VSPLITS= FLA_TIMEOUT=400 scripts/gpu_check_prefill.sh bench fla 2>&1 | tail -12
for w in 0 1; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/tF --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/wy64=$w /"
done
