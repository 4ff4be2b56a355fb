#!/usr/bin/env bash
# Nsight Compute metrics of chosen kernels in the prefill benchmark, per build and shape (GPU
# machine). BINS: build names under build-gpu/ab (<name>_tests, scripts/ab_branches.sh build);
# SHAPES: bench shape names; KERNEL: kernel-name regex (default intra); SKIP / COUNT: launches.
#   run(command="BINS='base pending-x' SHAPES=H64_fixed_T8192 scripts/ncu_kernels.sh",
#       carry=["build-gpu/ab"])
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
M=gpu__time_duration.sum,sm__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M+=,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
M+=,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__grid_size
for b in ${BINS:-base}; do
  for s in ${SHAPES:-H64_fixed_T8192}; do
    FASTKDA_BENCH_FILTER=$s timeout 200 ncu --clock-control none --metrics "$M" \
      --kernel-name "regex:${KERNEL:-intra}" --launch-skip "${SKIP:-4}" --launch-count "${COUNT:-1}" \
      --csv "build-gpu/ab/${b}_tests" --gtest_also_run_disabled_tests \
      --gtest_filter='PrefillBench.*' > "$OUT/nc_${b}_$s.csv" 2> "$OUT/nc_${b}_$s.err"
    echo "== $b $s rc=$?"
    python3 - "$OUT/nc_${b}_$s.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]
k, m, v, u = (hdr.index(x) for x in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
for r in rows[1:]:
    print(f"{r[m][:60]:60} {r[v]:>14} {r[u]:6} {r[k][:40]}")
PY
  done
done
