#!/usr/bin/env bash
# Session 37 call 8: main with copy_state_rows's closing barrier (the fix of call 7's racecheck hazards)
# compute-sanitizer: memcheck and racecheck on the unsplit tests that end CTAs with staged states
# (persistent grid, varlen, longest first, f16), then every GPU test.
set -uo pipefail
B=build-gpu/ab
SECONDS=0
mkdir -p $OUT/c
F='PrefillGpu.PersistentGrid:PrefillGpu.F16ScaledState:PrefillGpu.LongestFirstOrder:PrefillGpu.BoundaryStates:PrefillGpu.SplitTPairs'
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool $B/base_tests --gtest_filter="$F" > $OUT/c/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/c/san_$tool.log | tr '\n' ' ') (${SECONDS}s)"
done
timeout 100 $B/base_tests > $OUT/c/tests_base.log 2>&1
echo "base tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/c/tests_base.log | tr '\n' ' ') (${SECONDS}s)"
for r in 1 2; do timeout 60 $B/base_tests --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/c/bench_$r.txt 2>&1; grep BENCH $OUT/c/bench_$r.txt | tr '\n' ';'; echo; done
echo "total ${SECONDS}s"
cd $OUT && tar czf c.tgz c && rm -rf c
