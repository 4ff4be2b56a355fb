#!/bin/bash
# session 44 call 2: t15 = t14 + producer H = 2^(Gend-Ga) x (1/F) (two ex2 fewer per row); tests; A/B t14 / t15 two rounds; ncu --set full of t14's producer and scan at H32 T16384
mkdir -p $OUT
timeout 120 build-gpu/wy/t15 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t15.log 2>&1; echo "t15 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t15.log; grep -E '^\[prefill\]' $OUT/tests_t15.log | awk '{print $NF}' | sort -g | tail -1
for r in 1 2; do for b in t14 t15; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
t0=$(date +%s)
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T16384 timeout 300 ncu --clock-control none --set full --import-source yes -k regex:'scan_kernel|producer_kernel' --launch-skip 4 --launch-count 2 -o $OUT/prof16k build-gpu/wy/t14 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/ncu_run.log 2>&1
echo "ncu rc=$? $(( $(date +%s) - t0 )) s"
ncu --import $OUT/prof16k.ncu-rep --page details --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy > $OUT/details.txt 2>&1
grep -E "producer_kernel|scan_kernel|Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|No Eligible|Warp Cycles Per Issued|Active Warps Per" $OUT/details.txt | head -40
ncu --import $OUT/prof16k.ncu-rep --page raw --csv --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed 2>&1 | cut -c1-400 | tail -4
ncu --import $OUT/prof16k.ncu-rep --page source --csv --print-source sass -k regex:scan_kernel > $OUT/scan_source.csv 2>&1; ls -la $OUT/scan_source.csv
ncu --import $OUT/prof16k.ncu-rep --page source --csv --print-source sass -k regex:producer_kernel > $OUT/producer_source.csv 2>&1; ls -la $OUT/producer_source.csv
