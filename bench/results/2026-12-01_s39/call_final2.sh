#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' > $OUT/fields.txt 2>&1; echo "fields rc $?"; grep -c FAILED $OUT/fields.txt
for r in 1 2; do
timeout 200 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/producer_r$r.txt | grep -v "^\[ \|^\[-\|^\[=\|^Running\|^Note"
done
timeout 200 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Consumer' 2>&1 | tee $OUT/consumer.txt | grep -v "^\[ \|^\[-\|^\[=\|^Running\|^Note" | tail -16
