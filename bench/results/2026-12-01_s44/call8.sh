#!/bin/bash
# session 44 call 8: t23 (= c783ef1's kernels, SASS-identical): PrefillGpu.*, sanitizers on Wy64Invariants, then fla chunk_kda vs fastkda on the H32 rows in one call
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
timeout 150 build-gpu/wy/t23 --gtest_filter='PrefillGpu.*' > $OUT/tests_t23.log 2>&1; echo "t23 PrefillGpu rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t23.log
grep -E '^\[prefill\]' $OUT/tests_t23.log | sort -t'|' -k1 | awk '{o=$(NF-3); s=$NF; if (o>mo) mo=o; if (s>ms) ms=s} END {print "worst out", mo, "worst state", ms}'
for tool in memcheck racecheck; do
timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/wy/t23 --gtest_filter='PrefillGpu.Wy64Invariants' > $OUT/san_$tool.log 2>&1
echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
done
BIN=build-gpu/wy/t23 BENCH_FILTER=H32_T FLA_FILTER=H32_T VSPLITS= FLA_TIMEOUT=200 scripts/gpu_check_prefill.sh bench fla 2>&1 | tail -8
