#!/usr/bin/env bash
# Session 40: the library's H32 rows (PrefillBench, L2 flushed per call) and the pipeline (s6), alternating.
cd "$(dirname "$0")/../.."
for r in 1 2; do
FASTKDA_BENCH_FILTER=H32_T timeout 150 build-gpu/wy/s6 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/lib_r$r.txt 2>&1; grep '^BENCH' $OUT/lib_r$r.txt
WY64_QUICK=1 timeout 150 build-gpu/wy/s6 --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/wy_r$r.txt | grep '^H32\|^shape'
done
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
