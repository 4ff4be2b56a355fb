#!/bin/bash
# session 44 call 3: t16 = t14 + the output stores' proxy fence and staged arrive after the next chunk's products are issued; t17 = t16 + v's ldmatrix before the f16 pack, one wgmma fence; tests; A/B t14/t16/t17 three rounds
mkdir -p $OUT
for b in t16 t17; do
timeout 120 build-gpu/wy/$b --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_$b.log 2>&1; echo "$b wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_$b.log; grep -E '^\[prefill\]' $OUT/tests_$b.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
done
for r in 1 2 3; do for b in t14 t16 t17; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
