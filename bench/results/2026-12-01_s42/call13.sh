#!/bin/bash
mkdir -p $OUT
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/wy/tB --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_tB.log 2>&1
echo "tB racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/san_tB.log)"
grep -A2 'Race reported' $OUT/san_tB.log | sed 's/.*access at //' | sed 's/+0x[0-9a-f]*//' | cut -c1-150 | sort | uniq -c | sort -rn | head -8
timeout 60 build-gpu/wy/tB --gtest_filter='PrefillGpu.Wy64*' 2>&1 | grep -E 'PASSED|FAILED'
for r in 1 2; do for b in t9 tB; do FASTKDA_BENCH_FILTER=H32_T4096 timeout 60 build-gpu/wy/$b --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH' | sed "s/^/$b /"; done; done
