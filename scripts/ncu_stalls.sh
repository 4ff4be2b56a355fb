#!/usr/bin/env bash
# Per-instruction warp stall samples of one kernel launch in the prefill benchmark (GPU machine):
# Nsight Compute's source counters, exported as the SASS view (address, instruction, samples per
# stall reason) to $OUT/stalls_<bin>_<shape>.csv, and a summary of the reasons last. Map the
# addresses to code with cuobjdump -sass of the same object (built here, same nvcc).
#   run(command="BIN=base SHAPE=H64_fixed_T8192 KERNEL=prefill_kernel scripts/ncu_stalls.sh",
#       carry=["build-gpu/ab"])
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
b=${BIN:-base} s=${SHAPE:-H64_fixed_T8192}
rep="/tmp/stalls_${b}_$s"
FASTKDA_BENCH_FILTER=$s timeout 300 ncu --clock-control none --section SourceCounters \
  --section WarpStateStats --kernel-name "regex:${KERNEL:-prefill_kernel}" \
  --launch-skip "${SKIP:-4}" --launch-count 1 -f -o "$rep" "build-gpu/ab/${b}_tests" \
  --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > "$OUT/stalls_${b}_$s.log" 2>&1
echo "== $b $s ncu rc=$?"
ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$OUT/stalls_${b}_$s.csv" 2>&1
echo "source page rc=$? lines $(wc -l < "$OUT/stalls_${b}_$s.csv")"
ncu -i "$rep.ncu-rep" --page details --section WarpStateStats --csv 2>&1 | tail -40
