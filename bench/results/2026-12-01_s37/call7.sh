#!/usr/bin/env bash
# Session 37 call 7: main (the staged end states in split T and the unsplit kVs = 128 scan) under
# compute-sanitizer: memcheck and racecheck on the unsplit tests that end CTAs with staged states
# (persistent grid, varlen, longest first, f16), then every GPU test.
set -uo pipefail
B=build-gpu/ab
SECONDS=0
mkdir -p $OUT/c
F='PrefillGpu.PersistentGrid:PrefillGpu.F16ScaledState:PrefillGpu.LongestFirstOrder:PrefillGpu.BoundaryStates'
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool $B/base_tests --gtest_filter="$F" > $OUT/c/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/c/san_$tool.log | tr '\n' ' ') (${SECONDS}s)"
done
timeout 100 $B/base_tests > $OUT/c/tests_base.log 2>&1
echo "base tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/c/tests_base.log | tr '\n' ' ') (${SECONDS}s)"
BIN=$B/base_tests OUT=$OUT/c/seeds SEEDS=2 scripts/gpu_check_prefill.sh seeds 2>&1 | tail -8
echo "total ${SECONDS}s"
cd $OUT && tar czf c.tgz c && rm -rf c
