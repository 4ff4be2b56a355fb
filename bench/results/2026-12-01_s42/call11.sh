#!/bin/bash
# session 42: fla chunk_kda vs fastkda (C++ bench, same call), H32 rows; the probe producer under racecheck
mkdir -p $OUT
BIN=build-gpu/wy/t9 BENCH_FILTER=H32_T FLA_FILTER=H32_T VSPLITS= FLA_TIMEOUT=400 scripts/gpu_check_prefill.sh bench fla 2>&1 | tail -25
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/wy/t9 --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_ProducerFields' > $OUT/san_probe.log 2>&1
echo "probe racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/san_probe.log)"; grep -E 'Race reported' $OUT/san_probe.log | cut -c1-200 | sort | uniq -c | head -5
