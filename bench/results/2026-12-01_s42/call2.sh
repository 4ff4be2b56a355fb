#!/bin/bash
B=build-gpu/wy/t3
mkdir -p $OUT
timeout 60 $B --gtest_filter='PrefillGpu.Wy64*' > $OUT/wy64_tests.log 2>&1; echo "wy64 tests rc=$?"
grep -E '^\[prefill\]|FAILED|PASSED' $OUT/wy64_tests.log | tail -30
for r in 1 2; do
  for w in 0 auto; do
    if [ $w = 0 ]; then export FASTKDA_PREFILL_WY64=0; else unset FASTKDA_PREFILL_WY64; fi
    FASTKDA_BENCH_FILTER=H32_T timeout 120 $B --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_${w}_$r.txt 2>&1
    echo "round $r wy64=$w rc=$?"; grep -E '^(BENCH)' $OUT/bench_${w}_$r.txt
  done
done
unset FASTKDA_PREFILL_WY64
WY64_QUICK=1 timeout 150 $B --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.Producer' > $OUT/probe.txt 2>&1; echo "probe rc=$?"
grep -E 'PDL|alone|H32|T4096|T16384|T65536' $OUT/probe.txt | head -30
