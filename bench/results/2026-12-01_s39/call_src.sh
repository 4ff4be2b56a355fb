#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
timeout 300 ncu --clock-control none --kernel-name regex:producer --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats --section Occupancy --import-source no \
  -o $OUT/prod_src build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/ncu_run.txt 2>&1
echo "ncu rc $?"
ncu -i $OUT/prod_src.ncu-rep --print-details all > $OUT/details.txt 2>&1
grep -i "duration\|executed ipc\|issued warp\|warp cycles per issued\|Stall \|eligible warps" $OUT/details.txt | head -30
timeout 120 ncu -i $OUT/prod_src.ncu-rep --page source --csv --print-source sass > $OUT/src_sass.csv 2> $OUT/src_err.txt; echo "page source rc $?"
