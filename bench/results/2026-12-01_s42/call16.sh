#!/bin/bash
# session 42: A_qk in tf32 (8 m64n64k8 from V_new's accumulators; the bound's max fused into the conversion) vs split bf16
mkdir -p $OUT
timeout 90 build-gpu/wy/tH --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_tH.log 2>&1; echo "tH wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_tH.log; grep -E '^\[prefill\]' $OUT/tests_tH.log | awk '{print $(NF-3), $NF}' | sort -g | tail -2
for r in 1 2; do for b in tG tH; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
