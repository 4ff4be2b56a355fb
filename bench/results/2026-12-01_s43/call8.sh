#!/bin/bash
# session 43 call 8: the WY scan outputs staged by stmatrix over the v halves, stored by the loader thread (two TMA stores before chunk c+2 v load) (t9) vs t0, pa
mkdir -p $OUT
timeout 120 build-gpu/wy/t9 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t9.log 2>&1; echo "t9 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t9.log; grep -E '^\[prefill\]' $OUT/tests_t9.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
for r in 1 2; do for b in t0 t9 pa; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for tool in memcheck racecheck; do
timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/wy/t9 --gtest_filter='PrefillGpu.Wy64Invariants' > $OUT/san_$tool.log 2>&1
echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
done
