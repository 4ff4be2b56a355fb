#!/bin/bash
# session 43 call 16: t12 = outputs staged over the warpgroup's own v half (no barrier between the warpgroups), stored by the loader before chunk c's v load; v prefetched into L2 (bulk tensor prefetch) 1.5 chunks ahead; vs tF (HEAD: staged over part 1); PrefillGpu.*, sanitizers
mkdir -p $OUT
timeout 240 build-gpu/wy/t12 --gtest_filter='PrefillGpu.*' > $OUT/tests_t12.log 2>&1; echo "t12 PrefillGpu rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t12.log
for r in 1 2; do for b in tF t12; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for tool in memcheck racecheck; do
timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/wy/t12 --gtest_filter='PrefillGpu.Wy64Invariants' > $OUT/san_$tool.log 2>&1
echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
done
