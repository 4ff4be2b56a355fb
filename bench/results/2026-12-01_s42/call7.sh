#!/bin/bash
B=build-gpu/wy/t6
mkdir -p $OUT
for i in 1 2 3 4; do timeout 60 $B --gtest_filter='PrefillGpu.Wy64Invariants' 2>&1 | grep -E 'first:|FAILED  \]|OK \]' | cut -c1-160; done
timeout 60 $B --gtest_filter='PrefillGpu.Wy64*' > $OUT/wy64_tests.log 2>&1; echo "wy64 tests rc=$?"
grep -E '^\[prefill\]|FAILED|PASSED' $OUT/wy64_tests.log | tail -30
for r in 1 2; do
  for w in 0 auto; do
    if [ $w = 0 ]; then export FASTKDA_PREFILL_WY64=0; else unset FASTKDA_PREFILL_WY64; fi
    FASTKDA_BENCH_FILTER=H32_T timeout 120 $B --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_${w}_$r.txt 2>&1
    echo "round $r wy64=$w rc=$?"; grep -E '^BENCH' $OUT/bench_${w}_$r.txt
  done
done
