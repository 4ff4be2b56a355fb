#!/usr/bin/env bash
# device: tests + racecheck of the persistent branch, then interleaved benchmarks
A=build-gpu/ab; O=${OUT:-/tmp/o}; mkdir -p $O
timeout 90 $A/pending-persistent_tests --gtest_filter='PrefillGpu.PersistentGrid' > $O/persist_test.log 2>&1
echo "persistent test rc=$?"; grep -E "^\[prefill\]|FAILED  \]|OK \]" $O/persist_test.log | head -8
timeout 200 $A/pending-persistent_tests --gtest_filter='PrefillGpu.*:PtxGpu.*:WgmmaGpu.*' > $O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"; grep "FAILED  \]" $O/tests.log | sort -u
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $A/pending-persistent_tests --gtest_filter=PrefillGpu.PersistentGrid > $O/racecheck.log 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' $O/racecheck.log)"
for r in 1 2; do
  for cfg in base cand candP; do
    bin=$A/pending-persistent_tests; [ $cfg = base ] && bin=$A/base_tests
    env $([ $cfg = candP ] && echo FASTKDA_PREFILL_PERSIST=1) timeout 150 $bin --gtest_also_run_disabled_tests \
      --gtest_filter='PrefillBench.*' > $O/bench_${r}_$cfg.txt 2>&1
  done
done
python3 - $O <<'PY'
import collections, glob, os, sys
d = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "bench_*_*.txt")):
    name = os.path.basename(f)[:-4].split("_", 2)[2]
    for line in open(f):
        if line.startswith("BENCH "):
            _, shape, ms, *_ = line.split(); d[(shape, name)].append(float(ms))
names = ["base", "cand", "candP"]
print("| shape | " + " | ".join(names) + " |")
for s in dict.fromkeys(s for s, _ in sorted(d)):
    print(f"| {s} | " + " | ".join(f"{sum(d[(s,n)])/len(d[(s,n)]):.4f}" if d.get((s,n)) else "-" for n in names) + " |")
PY
