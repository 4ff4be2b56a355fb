#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
timeout 100 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' 2>&1 | tee $OUT/fields.txt | grep -v "^\[ \|^\[-\|^\[=" | cut -c1-300 | head -30; true
timeout 200 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/producer.txt | grep -v "^\[ \|^\[-\|^\[="; true
