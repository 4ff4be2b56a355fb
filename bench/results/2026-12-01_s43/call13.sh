#!/bin/bash
# session 43 call 13: where the plan should take wy64 (t10 scan): bench rows added for this binary only (X_H16-H48 x T8192-65536), wy64 forced on / off, two rounds
mkdir -p $OUT
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=X_ timeout 200 build-gpu/wy/tX --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r wy64=$w /"
done; done
