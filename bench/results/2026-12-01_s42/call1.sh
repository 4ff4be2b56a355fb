#!/bin/bash
# session 42 call: wy64 tests, the whole prefill suite, H32 bench wy64 auto vs off (alternating)
B=build-gpu/wy/t2
mkdir -p $OUT
timeout 60 $B --gtest_filter='PrefillGpu.Wy64*' > $OUT/wy64_tests.log 2>&1; echo "wy64 tests rc=$?"
grep -E '^\[prefill\]|FAILED|PASSED' $OUT/wy64_tests.log | tail -30
t0=$(date +%s)
timeout 300 $B --gtest_filter='PrefillGpu.*:-PrefillGpu.Wy64*' > $OUT/prefill_tests.log 2>&1; echo "prefill tests rc=$? $(( $(date +%s) - t0 )) s"
grep -E 'FAILED|PASSED' $OUT/prefill_tests.log | tail -10
for r in 1 2; do
  for w in 0 auto; do
    if [ $w = 0 ]; then export FASTKDA_PREFILL_WY64=0; else unset FASTKDA_PREFILL_WY64; fi
    FASTKDA_BENCH_FILTER=H32_T timeout 120 $B --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_${w}_$r.txt 2>&1
    echo "round $r wy64=$w rc=$?"; grep -E '^(BENCH|HOST)' $OUT/bench_${w}_$r.txt
  done
done
