#!/usr/bin/env bash
# Session 41 call 1: oracle of p41, then quick timing: base, p41 at hot/mode probes.
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 100 build-gpu/wy/p41 --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' > $OUT/fields_p41.txt 2>&1; grep "oracle\|FAIL\|PASSED" $OUT/fields_p41.txt | cut -c1-200 | head -6
run() { # name bin hot mode
  echo "== $1"; WY64_QUICK=1 WY64_HOT=$3 WY64_MODE=$4 timeout 120 build-gpu/wy/$2 --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/q_$1.txt 2>&1; grep "^H32\|FAIL" $OUT/q_$1.txt
}
for r in 1 2; do
run base_r$r base 0 0
run p41_r$r p41 0 0
run skipu_r$r p41 4 0
run discard_r$r p41 0 1
run extra_r$r p41 0 2
run hotout_r$r p41 2 0
done
