#!/bin/bash
# session 43 call 12: t11 = t10 with the warpgroups' part-1 barrier split (arrive after the wgmmas, sync after the packs); vs t0, t10; PrefillGpu.* on t11, ncu scan alone, sanitizers
mkdir -p $OUT
timeout 240 build-gpu/wy/t11 --gtest_filter='PrefillGpu.*' > $OUT/tests_t11.log 2>&1; echo "t11 PrefillGpu rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t11.log; grep -E '^\[prefill\].*wy64' $OUT/tests_t11.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
for r in 1 2; do for b in t0 t10 t11; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
for T in 16384 65536; do
FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T$T timeout 100 ncu --clock-control none -k regex:'scan_kernel' --launch-skip 2 --launch-count 1 --metrics gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active build-gpu/wy/t11 --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/ncu_t11_$T.log 2>&1
echo "t11 T$T: $(grep -E 'scan_kernel|gpu__time_duration|tensor_cycles' $OUT/ncu_t11_$T.log | awk '{print $1, $NF}' | tr '\n' ' ')"
done
for tool in memcheck racecheck; do
timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/wy/t11 --gtest_filter='PrefillGpu.Wy64Invariants' > $OUT/san_$tool.log 2>&1
echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
done
