#!/bin/bash
mkdir -p $OUT
BIN=build-gpu/wy/t9
timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $BIN --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/san_racecheck.log)"
grep -E 'hazard|Race|Write|Read|thread|address|at 0x' $OUT/san_racecheck.log | head -60 | cut -c1-250
timeout 60 $BIN --gtest_filter='PrefillGpu.Wy64*' 2>&1 | grep -E 'PASSED|FAILED'
