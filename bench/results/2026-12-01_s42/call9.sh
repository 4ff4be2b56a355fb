#!/bin/bash
# session 42: the whole prefill suite, sanitizers on the wy64 invariants, the full bench (wy64 auto), H32 wy64 forced on/off
mkdir -p $OUT
export BIN=build-gpu/wy/t8
timeout 240 $BIN --gtest_filter='PrefillGpu.*' > $OUT/tests.log 2>&1; echo "prefill tests rc=$?"
grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests.log | head
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $BIN --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_$tool.log 2>&1
  echo "sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log | head -2 | tr '\n' ' ')"
done
timeout 200 $BIN --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_all.txt 2>&1; echo "bench rc=$?"; grep -E '^(BENCH|HOST)' $OUT/bench_all.txt
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T timeout 120 $BIN --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_h32_${w}_$r.txt 2>&1
  echo "round $r wy64=$w"; grep -E '^BENCH' $OUT/bench_h32_${w}_$r.txt
done; done
