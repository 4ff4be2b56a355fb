#!/usr/bin/env bash
# Session 41 call 4: the scan's clock and waits alone / behind the producer.
cd "$(dirname "$0")/../.."
for r in 1 2; do for v in ${VARIANTS:-u41p u41sp}; do
  echo "== $v round $r"
  WY64_QUICK=1 timeout 120 build-gpu/wy/$v --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/q_${v}_r$r.txt 2>&1; grep "^H32\|FAIL\|  scan" $OUT/q_${v}_r$r.txt
done; done
