#!/bin/bash
# session 44 call 9: t25 = t23 + the scan's SMs spread (producer CTAs idle on every (SMs / heads)-th SM instead of SMs < heads); Wy64 tests; A/B t23/t25 three rounds; SM clock sampled during the pair (T65536)
mkdir -p $OUT
timeout 120 build-gpu/wy/t25 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t25.log 2>&1; echo "t25 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t25.log
for r in 1 2 3; do for b in t23 t25; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 20 > $OUT/clk.txt &
sp=$!
for i in 1 2 3; do FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T65536 build-gpu/wy/t23 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > /dev/null 2>&1; done
kill $sp
sort $OUT/clk.txt | uniq -c | sort -k2 -n | tail -15
