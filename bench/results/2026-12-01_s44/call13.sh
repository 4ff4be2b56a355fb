#!/bin/bash
# session 44 call 13: tX = t26 + extra X_ shapes (tX_shapes.patch): the plan's wy64 window, wy64 on / off, two rounds
mkdir -p $OUT
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=X_ timeout 250 build-gpu/wy/tX --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r wy64=$w /"
done; done
