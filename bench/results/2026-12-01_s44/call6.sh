#!/bin/bash
# session 44 call 6: t22 = t19 with the triangular images at LBO 1024 (padded packing, 5632 B per half) instead of per-step LBOs; Oracle test; A/B t16/t19/t22 two rounds; ncu scan/producer alone T16384
mkdir -p $OUT
timeout 120 build-gpu/wy/t22 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t22.log 2>&1; echo "t22 wy64 tests rc=$? (size checks expected to fail)"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]|Which is' $OUT/tests_t22.log | head; grep -E '^\[prefill\]' $OUT/tests_t22.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
for r in 1 2; do for b in t16 t19 t22; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for b in t16 t19 t22; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T16384 timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 2 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E "scan_kernel|producer_kernel|gpu__time|tensor" | sed "s/^/$b /"
done
