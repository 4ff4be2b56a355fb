#!/bin/bash
# session 44 call 7: t23 = t22 + producer stages the next item's q after step 3 (kh's upper half), g after step 4, k after step 6 (items taken two ahead); tests; A/B t16/t22/t23 three rounds; ncu producer/scan alone T16384
mkdir -p $OUT
timeout 120 build-gpu/wy/t23 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t23.log 2>&1; echo "t23 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]|Which is' $OUT/tests_t23.log | head; grep -E '^\[prefill\]' $OUT/tests_t23.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
for r in 1 2 3; do for b in t16 t22 t23; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for b in t22 t23; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T16384 timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 2 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E "scan_kernel|producer_kernel|gpu__time" | paste - - | awk -v b=$b '{print b, $1, $NF}'
done
