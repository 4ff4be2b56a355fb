#!/bin/bash
# session 44 call 11: t26 = t23 + the outputs staged in a 16 KiB buffer of their own (v loaded with the image's part 0, no longer after chunk c-2's output stores); Wy64 tests + racecheck; A/B t23/t26 three rounds
mkdir -p $OUT
timeout 120 build-gpu/wy/t26 --gtest_filter='PrefillGpu.Wy64*' > $OUT/tests_t26.log 2>&1; echo "t26 wy64 tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $OUT/tests_t26.log
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/wy/t26 --gtest_filter='PrefillGpu.Wy64Invariants' > $OUT/san_racecheck.log 2>&1; echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/san_racecheck.log)"
for r in 1 2 3; do for b in t23 t26; do
  FASTKDA_PREFILL_WY64=1 FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/round $r $b /"
done; done
