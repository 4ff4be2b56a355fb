#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
for r in 1 2; do
FASTKDA_BENCH_FILTER=H32_T timeout 150 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/lib_r$r.txt 2>&1; grep '^BENCH' $OUT/lib_r$r.txt
timeout 150 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/wy_r$r.txt | grep '^H32\|^shape'
done
