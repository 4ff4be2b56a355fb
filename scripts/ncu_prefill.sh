#!/usr/bin/env bash
# Profile one launch of each prefill kernel with Nsight Compute on the GPU machine and print the
# per-SASS-instruction view (stall samples, executed instructions) as CSV, to be read here.
#   BIN=build-gpu/fastkda_gpu_tests scripts/ncu_prefill.sh SHAPE [KERNEL_REGEX]
# SHAPE: a PrefillBench shape name (FASTKDA_BENCH_FILTER), e.g. H96_fixed_T8192.
# KERNEL_REGEX: default "prefill_kernel|intra_kernel". Clocks are left alone (--clock-control none).
# Output under $OUT (or ./gpu_out): <kernel>.ncu-rep, details_<shape>.csv, source_<shape>.csv.
set -uo pipefail
shape=${1:?shape}
kernels=${2:-prefill_kernel|intra_kernel}
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
BIN=${BIN:-build-gpu/fastkda_gpu_tests}
rep="$OUT/ncu_$shape"
FASTKDA_BENCH_FILTER=$shape timeout 400 ncu --clock-control none \
  --set full --import-source no -k "regex:$kernels" --launch-skip "${SKIP:-2}" --launch-count "${COUNT:-2}" \
  -f -o "$rep" "$BIN" --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' \
  > "$OUT/ncu_run_$shape.log" 2>&1
echo "ncu rc=$?"; tail -3 "$OUT/ncu_run_$shape.log"
ncu -i "$rep.ncu-rep" --page details --csv > "$OUT/details_$shape.csv" 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/source_$shape.csv" 2>&1
ls -la "$OUT"
