#!/bin/bash
# session 43 call 6: timing probes of the WY scan (wrong results): pa = O stored only for the last chunk, pb = no decay, pc = no absmax(P) in the bound; vs t0 (HEAD)
mkdir -p $OUT
for r in 1 2; do for b in t0 pa pb pc; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
