#!/bin/bash
# session 42: H32 T8192 (a bench row added for this call only), wy64 on / off, two rounds
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T8192 timeout 60 build-gpu/wy/tT --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r wy64=$w /"
done; done
