#!/bin/bash
# session 42 final: prefill suite, sanitizers (wy64 + vs1), the full bench table
mkdir -p $OUT
BIN=build-gpu/wy/tF
timeout 240 $BIN --gtest_filter='PrefillGpu.*' > $OUT/tests.log 2>&1; echo "prefill tests rc=$?"
grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests.log | head
grep -E '^\[prefill\] wy64' $OUT/tests.log | head -20
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $BIN --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_${tool}_wy64.log 2>&1
  echo "sanitizer $tool wy64 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_${tool}_wy64.log | head -1)"
done
timeout 200 $BIN --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_all.txt 2>&1; echo "bench rc=$?"; grep -E '^(BENCH|HOST)' $OUT/bench_all.txt
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T timeout 120 $BIN --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r wy64=$w /"
done; done
