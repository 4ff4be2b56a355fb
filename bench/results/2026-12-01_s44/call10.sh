#!/bin/bash
# session 44 call 10: t23p = t23 + probes (scan loader: chunks whose ready flag was not set at first look, cycles spinning; warpgroup 0's cycles waiting on full0 / full1; totals) for bh 0-5, last launch of each shape; the pair (PDL) as benchmarked
mkdir -p $OUT
PROBE=1 FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/t23p --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH|^PROBE'
