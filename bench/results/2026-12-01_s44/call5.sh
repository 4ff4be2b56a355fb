#!/bin/bash
# session 44 call 5: t19 = t16 + triangular images (A_qk, Tb: only the blocks on and below the diagonal, stored and loaded: -12 KiB per image); t20 = t19 + warps 1-3 discard each image's L2 lines once loaded; tests; A/B t16/t19/t20 three rounds; ncu durations + dram bytes
mkdir -p $OUT
for b in t19 t20; do
timeout 120 build-gpu/wy/$b --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_$b.log 2>&1; echo "$b wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_$b.log; grep -E '^\[prefill\]' $OUT/tests_$b.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
done
for r in 1 2 3; do for b in t16 t19 t20; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for b in t16 t19 t20; do for T in 16384; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T$T timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 2 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E "scan_kernel|producer_kernel|gpu__time|dram__" | sed "s/^/$b /"
done; done
