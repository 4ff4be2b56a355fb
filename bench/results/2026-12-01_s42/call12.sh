#!/bin/bash
mkdir -p $OUT
for v in t9 tA; do
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/wy/$v --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_$v.log 2>&1
  echo "$v racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/san_$v.log)"
done
timeout 150 compute-sanitizer --tool racecheck --racecheck-memcpy-async no --error-exitcode 9 build-gpu/wy/t9 --gtest_filter=PrefillGpu.Wy64Invariants > $OUT/san_t9_nomemcpy.log 2>&1
echo "t9 racecheck memcpy-async no rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/san_t9_nomemcpy.log)"
compute-sanitizer --version | tail -1
