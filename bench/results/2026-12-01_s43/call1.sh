#!/bin/bash
# session 43 call 1: baseline wy64 on/off (H32 rows) and ncu of the wy64 pipeline's two kernels (run one after the other by ncu: producer alone, scan alone)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/env.txt
for r in 1 2; do for w in 1 0; do
  FASTKDA_PREFILL_WY64=$w FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/t0 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r wy64=$w /"
done; done
for T in 4096 16384 65536; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T$T timeout 200 ncu --clock-control none -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 2 --set full -o $OUT/ncu_T$T build-gpu/wy/t0 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/ncu_T$T.log 2>&1
echo "ncu T$T rc=$?"
ncu -i $OUT/ncu_T$T.ncu-rep --page details --csv > $OUT/ncu_T$T.csv 2>/dev/null; ncu -i $OUT/ncu_T$T.ncu-rep --page raw --csv > $OUT/ncu_T${T}_raw.csv 2>/dev/null
ncu -i $OUT/ncu_T$T.ncu-rep --page details 2>/dev/null | grep -E 'scan_kernel|producer_kernel|Duration|Elapsed Cycles|SM Frequency|Registers Per|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued' 
done
