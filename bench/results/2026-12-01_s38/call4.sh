#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
ncu --clock-control none --kernel-name regex:producer --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats \
  --section SourceCounters --print-details all \
  build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.DISABLED_Producer' > $OUT/ncu_producer.txt 2>&1
grep -v "^    ---\|^  Section" $OUT/ncu_producer.txt | grep -i "duration\|throughput\|stall\|issued\|warp cycles\|occupancy\|executed ipc\|pipe\|registers\|shared memory\|bank\|L1/TEX Hit\|L2 Hit\|DRAM" | head -80
