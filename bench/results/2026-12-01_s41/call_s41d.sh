#!/usr/bin/env bash
# Session 41: fields + oracle of FIELDS, then quick timing of VARIANTS alternating, two rounds.
cd "$(dirname "$0")/../.."
for B in ${FIELDS}; do
  echo "== fields $B"
  timeout 120 build-gpu/wy/$B --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields:Wy64Bench.DISABLED_ProducerConsumerMatchOracle' > $OUT/fields_$B.txt 2>&1
  grep "oracle\|FAIL\|PASSED" $OUT/fields_$B.txt | cut -c1-200 | head -8; grep "^staged" $OUT/fields_$B.txt | head -2
done
for r in 1 2; do for v in ${VARIANTS}; do
  echo "== $v round $r"
  WY64_QUICK=1 timeout 120 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/q_${v}_r$r.txt 2>&1; grep "^H32\|FAIL\|producer alone\|behind" $OUT/q_${v}_r$r.txt
done; done
