#!/usr/bin/env bash
# Session 40: fields + oracle of the new producer, then base / new alternating (H32 rows, quick).
cd "$(dirname "$0")/../.."
B=${B:-build-gpu/wy/tests}
timeout 100 $B --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' 2>&1 | tee $OUT/fields.txt | grep -v "^\[ \|^\[-\|^\[=" | cut -c1-200 | head -30
for r in 1 2; do for v in ${VARIANTS:-base tests}; do
  echo "== $v round $r"
  WY64_QUICK=1 timeout 100 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/producer_${v}_r$r.txt | grep "^H32\|shape"
done; done
