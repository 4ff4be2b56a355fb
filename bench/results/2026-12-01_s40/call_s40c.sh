#!/usr/bin/env bash
# Session 40: fields + oracle of each of FIELDS, then the quick producer timing of VARIANTS, two rounds.
cd "$(dirname "$0")/../.."
for B in ${FIELDS:-s5 s6}; do
echo "== fields $B"
timeout 100 build-gpu/wy/$B --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' 2>&1 | tee $OUT/fields_$B.txt | grep "oracle\|FAIL\|PASSED" | cut -c1-200 | head -8
grep "^staged" $OUT/fields_$B.txt | head -2
done
for r in 1 2; do for v in ${VARIANTS:-vs2 s5 s6}; do
  echo "== $v round $r"
  WY64_QUICK=1 timeout 100 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' 2>&1 | tee $OUT/producer_${v}_r$r.txt | grep "^H32"
done; done
