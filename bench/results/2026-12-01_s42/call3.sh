#!/bin/bash
mkdir -p $OUT
for v in 11 00 01; do
  timeout 60 build-gpu/wy/t$v --gtest_filter='PrefillGpu.Wy64*' > $OUT/wy64_tests_$v.log 2>&1; echo "wy64 tests $v rc=$?"
  grep -E 'FAILED  \]|PASSED' $OUT/wy64_tests_$v.log | head -4
  grep -E '^\[prefill\]' $OUT/wy64_tests_$v.log | awk '{print $(NF-3), $NF}' | sort -g | tail -2
done
FASTKDA_PREFILL_WY64=0 FASTKDA_BENCH_FILTER=H32_T timeout 120 build-gpu/wy/t11 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_off.txt 2>&1
echo "wy64 off"; grep -E '^BENCH' $OUT/bench_off.txt
for r in 1 2; do
  for v in 11 00 01; do
    FASTKDA_BENCH_FILTER=H32_T timeout 120 build-gpu/wy/t$v --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/bench_${v}_$r.txt 2>&1
    echo "round $r variant $v rc=$?"; grep -E '^BENCH' $OUT/bench_${v}_$r.txt
  done
done
WY64_QUICK=1 timeout 150 build-gpu/wy/t11 --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/probe.txt 2>&1; echo "probe rc=$?"
grep -E 'PDL|alone|^H|T4096|T16384|T65536' $OUT/probe.txt | head -30
