#!/usr/bin/env bash
# Session 41: fields / oracle of u41p; then, alternating over two rounds, the library's H32 rows
# (PrefillBench, L2 flushed per call) and the pipeline (u41b2; u41p = u41b2 + the PDL column).
cd "$(dirname "$0")/../.."
timeout 100 build-gpu/wy/u41p --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' > $OUT/fields_u41p.txt 2>&1; grep "oracle\|FAIL\|PASSED" $OUT/fields_u41p.txt | head -6
for r in 1 2; do
FASTKDA_BENCH_FILTER=H32_T timeout 150 build-gpu/wy/u41p --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/lib_r$r.txt 2>&1; grep '^BENCH' $OUT/lib_r$r.txt
for v in u41b2 u41p; do echo "== $v"
WY64_QUICK=1 timeout 150 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/wy_${v}_r$r.txt 2>&1; grep '^H32\|one stream\|timeline' $OUT/wy_${v}_r$r.txt
done; done
