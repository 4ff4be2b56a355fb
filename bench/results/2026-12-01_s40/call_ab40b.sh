#!/usr/bin/env bash
# Session 40, final: fields / oracle of uv; the library's H32 rows (PrefillBench, L2 flushed per
# call) and the pipeline (u16 = 2be83e8; uv = u16 with U's value-half loop unrolled), alternating.
cd "$(dirname "$0")/../.."
timeout 100 build-gpu/wy/uv --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' 2>&1 | tee $OUT/fields_uv.txt | grep "oracle\|FAIL\|PASSED" | head -6
for r in 1 2; do
FASTKDA_BENCH_FILTER=H32_T timeout 150 build-gpu/wy/u16 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/lib_r$r.txt 2>&1; grep '^BENCH' $OUT/lib_r$r.txt
for v in u16 uv; do echo "== $v"
WY64_QUICK=1 timeout 150 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/wy_${v}_r$r.txt | grep '^H32'
done; done
