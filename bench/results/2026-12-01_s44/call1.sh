#!/bin/bash
# session 44 call 1: t14 = HEAD + triangular skip (Tb^T, A_qk^T k16 steps on their nonzero token blocks only; token blocks reversed in the image); Wy64 tests, A/B vs t13 (HEAD kernels), three rounds
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
timeout 120 build-gpu/wy/t14 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t14.log 2>&1; echo "t14 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]|^\[prefill\]' $OUT/tests_t14.log | head -20
for r in 1 2 3; do for b in t13 t14; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
