#!/bin/bash
# session 43 call 10: Nsight Compute durations of the producer and the scan run one after the other (ncu serialises them), H32 T16384 / T65536: t0 (HEAD), pa (no output stores), t9 (stmatrix + loader TMA stores), q3 (t9 without staging)
mkdir -p $OUT
for b in t0 pa t9 q3; do for T in 16384 65536; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T$T timeout 100 ncu --clock-control none -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/ncu_${b}_$T.log 2>&1
echo "$b T$T: $(grep -E 'scan_kernel|producer_kernel|gpu__time_duration|tensor_cycles' $OUT/ncu_${b}_$T.log | awk '{print $1, $NF}' | tr '\n' ' ')"
done; done
