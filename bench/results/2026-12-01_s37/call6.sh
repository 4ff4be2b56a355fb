#!/usr/bin/env bash
# Session 37 call 6: pending/s37-whole128 (the unsplit scan's final state staged at kVs = 128 only) against main:
# its GPU tests, every row 6 rounds alternating.
set -uo pipefail
B=build-gpu/ab
N1=pending-s37-whole128
SECONDS=0
mkdir -p $OUT/c
timeout 100 $B/${N1}_tests > $OUT/c/tests_$N1.log 2>&1
echo "$N1 tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/c/tests_$N1.log | tr '\n' ' ') (${SECONDS}s)"; grep -E 'FAILED  \]' $OUT/c/tests_$N1.log | sort -u | head
for r in 1 2 3 4 5 6; do
  order="base $N1"; [ $((r % 2)) -eq 0 ] && order="$N1 base"
  for b in $order; do
    timeout 60 $B/${b}_tests --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > $OUT/c/bench_${r}_$b.txt 2>&1
  done
done
python3 - $OUT/c $N1 <<'PY'
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
echo "total ${SECONDS}s"
cd $OUT && tar czf c.tgz c && rm -rf c
