#!/bin/bash
# session 43 call 19: t13 (the next image prefetched into L2): PrefillGpu.*, sanitizers, then fla chunk_kda vs fastkda on the H32 rows in one call
mkdir -p $OUT
timeout 60 build-gpu/wy/t13 --gtest_filter='PrefillGpu.*' > $OUT/tests_t13.log 2>&1; echo "t13 PrefillGpu rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t13.log
for tool in memcheck racecheck; do
timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/wy/t13 --gtest_filter='PrefillGpu.Wy64Invariants' > $OUT/san_$tool.log 2>&1
echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
done
BIN=build-gpu/wy/t13 BENCH_FILTER=H32_T FLA_FILTER=H32_T VSPLITS= FLA_TIMEOUT=150 scripts/gpu_check_prefill.sh bench fla 2>&1 | tail -8
