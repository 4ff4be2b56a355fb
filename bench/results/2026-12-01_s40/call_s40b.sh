#!/usr/bin/env bash
# Session 40: fields + oracle of $B, then the quick producer timing of VARIANTS, two rounds.
cd "$(dirname "$0")/../.."
B=${B:-build-gpu/wy/vs2}
timeout 100 $B --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' 2>&1 | tee $OUT/fields.txt | grep -v "^\[ \|^\[-\|^\[=" | grep -v "^staged" | cut -c1-200 | head -12
grep "^staged" $OUT/fields.txt | head -3
for r in 1 2; do for v in ${VARIANTS:-base vr1 vs2}; do
  echo "== $v round $r"
  WY64_QUICK=1 timeout 100 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/producer_${v}_r$r.txt | grep "^H32"
done; done
