#!/bin/bash
# session 44 call 4: t18 = t16 + producer: next item taken in step 1 and its q/k/g rows and beta prefetched into L2 at step 2, -kw (W comes out negated); tests; A/B t16/t18 three rounds; ncu durations of the two kernels alone (T16384, T65536)
mkdir -p $OUT
timeout 120 build-gpu/wy/t18 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t18.log 2>&1; echo "t18 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t18.log; grep -E '^\[prefill\]' $OUT/tests_t18.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
for r in 1 2 3; do for b in t16 t18; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for b in t16 t18; do for T in 16384 65536; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T$T timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 4 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E "scan_kernel|producer_kernel|gpu__time" | paste - - | awk -v b=$b -v T=$T '{print b, T, $1, $(NF)}'
done; done
