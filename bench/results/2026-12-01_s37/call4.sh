#!/usr/bin/env bash
# Session 37 call 4: pending/s37-state-stg (end states staged in shared memory, 16-byte row stores) against main 2202a4b
# pending/s37-combine; sanitizers on the new combine; every row alternating 6 rounds (bounded),
# 4 rounds (softplus).
set -uo pipefail
B=build-gpu/ab
N1=pending-s37-state-stg
mkdir -p $OUT/c/sp
SECONDS=0
for b in $N1; do
  timeout 200 $B/${b}_tests > $OUT/c/tests_$b.log 2>&1
  echo "$b tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/c/tests_$b.log | tr '\n' ' ') (${SECONDS}s)"; grep -E 'FAILED  \]' $OUT/c/tests_$b.log | sort -u | head -20
done
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool $B/${N1}_tests --gtest_filter='PrefillGpu.SplitTPairs:PrefillGpu.SplitTFirstOutputs:PrefillGpu.SplitTCombineRows' > $OUT/c/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/c/san_$tool.log | tr '\n' ' ') (${SECONDS}s)"
done
for r in 1 2 3 4 5 6; do
  order="base $N1"; [ $((r % 2)) -eq 0 ] && order="$N1 base"
  for b in $order; do
    timeout 60 $B/${b}_tests --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/c/bench_${r}_$b.txt 2>&1
  done
done
for r in 1 2 3 4; do
  order="base $N1"; [ $((r % 2)) -eq 0 ] && order="$N1 base"
  for b in $order; do
    FASTKDA_BENCH_GATE=softplus timeout 60 $B/${b}_tests --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/c/sp/bench_${r}_$b.txt 2>&1
  done
done
echo "bench done (${SECONDS}s)"
for d in $OUT/c "$OUT/c/sp"; do
echo "== $d"
python3 - $d $N1 <<'PY'
import glob, os, sys, collections
d = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "bench_*_*.txt")):
    name = os.path.basename(f)[len("bench_"):-4].split("_", 1)[1]
    for line in open(f):
        if line.startswith("BENCH "):
            _, shape, ms, *_ = line.split(); d[(shape, name)].append(float(ms))
m = lambda v: sum(v) / len(v)
for s in dict.fromkeys(s for s, _ in sorted(d)):
    b = d[(s, "base")]
    row = f"{s:20} base {m(b):.4f} ({min(b):.4f}-{max(b):.4f})"
    for n in sys.argv[2:]:
        v = d[(s, n)]
        row += f" | {n[-3:]} {m(v):.4f} ({min(v):.4f}-{max(v):.4f}) {100*(m(v)/m(b)-1):+.1f} %"
    print(row)
PY
done
BINS="base $N1" SHAPES="H32_T4096 H8_T65536" KERNEL="combine|prefill" SKIP=0 COUNT=4 OUT=/tmp/nc scripts/ncu_kernels.sh 2>&1 | grep -E "==|gpu__time|grid_size"; tar czf $OUT/nc.tgz -C /tmp nc
echo "total ${SECONDS}s"
cd $OUT && tar czf c.tgz c && rm -rf c
