#!/bin/bash
# session 43 call 18: t13 = t12 (HEAD) + the next chunk's image prefetched into L2 by the loader when its flag is already set; A/B vs t12, three rounds; Wy64 tests
mkdir -p $OUT
timeout 120 build-gpu/wy/t13 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t13.log 2>&1; echo "t13 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t13.log
for r in 1 2 3; do for b in t12 t13; do
  FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
