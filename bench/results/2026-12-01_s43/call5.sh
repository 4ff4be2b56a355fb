#!/bin/bash
# session 43 call 5: the WY scan decay between P and O1 issue (t5c), plus O stored in the next chunk P shadow (t7) vs t0 (HEAD)
mkdir -p $OUT
for b in t5c t7; do
timeout 120 build-gpu/wy/$b --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_$b.log 2>&1; echo "$b wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_$b.log; grep -E '^\[prefill\]' $OUT/tests_$b.log | awk '{print $(NF-3), $NF}' | sort -g | tail -1
done
for r in 1 2; do for b in t0 t5c t7; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 90 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
