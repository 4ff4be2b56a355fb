#!/bin/bash
# session 42: the producer's all-idle fallback, grid 2 x SMs: wy64 tests, sanitizers, H32 A/B
mkdir -p $OUT
BIN=build-gpu/wy/tG
timeout 90 $BIN --gtest_filter='PrefillGpu.Wy64*:PrefillGpu.WorkspaceSizeAndDimsChecked' > $OUT/tests.log 2>&1; echo "tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests.log
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $BIN --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_${tool}.log 2>&1
  echo "sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_${tool}.log | head -1)"
done
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T4096 timeout 60 $BIN --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r wy64=$w /"
done; done
