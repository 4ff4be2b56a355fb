#!/bin/bash
# session 43 call 9: timing probes of t9 (outputs staged by stmatrix, stored by the loader): q1 no fence.proxy.async, q2 no 2^-sigma multiply, q3 no staging (last chunk only); vs t0, t9
mkdir -p $OUT
for r in 1 2; do for b in t0 t9 q1 q2 q3; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
