#!/usr/bin/env bash
# Test and A/B-benchmark git branches against the current checkout in one device call.
#
#   scripts/ab_branches.sh build BRANCH...   here (nvcc, no GPU): build-gpu/ab/<name>_tests for
#                                            each branch (a worktree per branch under /tmp) and
#                                            build-gpu/ab/base_tests for HEAD
#   scripts/ab_branches.sh run [ROUNDS]      on the GPU machine: every build-gpu/ab/*_tests runs
#                                            the GPU tests, then PrefillBench for all of them,
#                                            interleaved ROUNDS times (default 2); a table last
#
# Device call: run(command="scripts/ab_branches.sh run", carry=["build-gpu/ab"]). Env: BENCH_FILTER
# (shape substring), TEST_FILTER (gtest filter), SANITIZE (binary names for compute-sanitizer),
# AB_SEEDS (pinned seeds of the adversarial tests per build, worst final states; default 2, 0: off).
# Full logs: $OUT/ab_logs.tgz (or build-gpu/ab/logs).
set -uo pipefail
cd "$(dirname "$0")/.."
AB=build-gpu/ab

build_one() {  # build_one REV NAME
  local rev=$1 name=$2 wt=/tmp/fastkda-wt-$2 cutlass=() sha
  sha=$(git rev-parse --short "$rev") || return 1  # now: HEAD may move while this builds
  [ -d .deps/cutlass_include ] && cutlass=(-DFASTKDA_CUTLASS_INCLUDE="$PWD/.deps/cutlass_include")
  git worktree remove --force "$wt" >/dev/null 2>&1
  git worktree add --force --detach "$wt" "$sha" >/dev/null || return 1
  cmake -S "$wt" -B "$wt/build" -G Ninja -DFASTKDA_TESTS=ON "${cutlass[@]}" >/dev/null &&
    ninja -C "$wt/build" fastkda_gpu_tests >/dev/null || return 1
  cp "$wt/build/fastkda_gpu_tests" "$AB/${name}_tests"
  strip "$AB/${name}_tests"  # host symbols only (~0.6 MB each): 8 binaries fit the 64 MiB carry
  echo "built $AB/${name}_tests from $rev ($sha)"
}

build() {
  mkdir -p "$AB"
  rm -f "$AB"/*_tests
  build_one HEAD base || exit 1
  for b in "$@"; do build_one "$b" "$(echo "$b" | tr '/' '-')" || exit 1; done
}

run() {
  # Logs go to a scratch folder, packed into $OUT/ab_logs.tgz at the end (at most 8 files come
  # back from a device call's $OUT); without $OUT they stay in build-gpu/ab/logs.
  local rounds=${1:-2} out=${OUT:+/tmp/ab_logs} summary=""
  out=${out:-$AB/logs}
  mkdir -p "$out"
  for bin in "$AB"/*_tests; do
    local name
    name=$(basename "$bin" _tests)
    timeout 300 "$bin" --gtest_filter="${TEST_FILTER:-PrefillGpu.*:PtxGpu.*:WgmmaGpu.*}" \
      > "$out/tests_$name.log" 2>&1
    summary+="$name tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests_$name.log" | tr '\n' ' ')"$'\n'
    summary+="$(grep -E 'FAILED  \]' "$out/tests_$name.log" | sort -u)"$'\n'
    # Precision per build (AB_SEEDS pinned seeds of the adversarial tests; 0: skipped): a change
    # can stay inside the tests' bounds and still lose accuracy (session 19's intra operands
    # doubled the collinear case's state error, seen only in the final seeds run).
    if [ "${AB_SEEDS:-2}" -gt 0 ]; then
      local seeds_out
      seeds_out=$(BIN="$bin" OUT="$out/seeds_$name" SEEDS="${AB_SEEDS:-2}" \
        scripts/gpu_check_prefill.sh seeds)
      summary+="$name seeds ${AB_SEEDS:-2}: $(echo "$seeds_out" | grep -o '[0-9]* failed test runs');"
      summary+=" worst: $(echo "$seeds_out" | grep -A8 '^seeds' | tail -n +2 | sort -g | tail -3 |
        awk '{printf "%s %s %s %s | ", $1, $3, $4, $5}')"$'\n'
    fi
  done
  # Optional: compute-sanitizer on chosen binaries (SANITIZE="name ...", SANITIZE_STEP=racecheck
  # or sanitize for memcheck too), every value split and split T (gpu_check_prefill.sh).
  for name in ${SANITIZE:-}; do
    summary+="$name: $(BIN="$AB/${name}_tests" OUT="$out/san_$name" \
      scripts/gpu_check_prefill.sh "${SANITIZE_STEP:-racecheck}" | grep '^sanitizer' | tr '\n' ';')"$'\n'
  done
  # The first benchmark run after the machine starts is ~0.7 % slower (session 12: base's first
  # round against its second): one discarded warm-up run, then the binaries in alternating order
  # (forward in odd rounds, backward in even ones), so that no binary always runs first.
  local bins=("$AB"/*_tests)
  FASTKDA_BENCH_FILTER=${BENCH_FILTER:-} timeout 150 "${bins[0]}" --gtest_also_run_disabled_tests \
    --gtest_filter='PrefillBench.*' > "$out/warmup.txt" 2>&1
  for r in $(seq 1 "$rounds"); do
    local order=("${bins[@]}")
    if ((r % 2 == 0)); then
      order=()
      for ((i = ${#bins[@]} - 1; i >= 0; --i)); do order+=("${bins[i]}"); done
    fi
    for bin in "${order[@]}"; do
      FASTKDA_BENCH_FILTER=${BENCH_FILTER:-} timeout 150 "$bin" --gtest_also_run_disabled_tests \
        --gtest_filter='PrefillBench.*' > "$out/bench_${r}_$(basename "$bin" _tests).txt" 2>&1
    done
  done
  # Table: mean over rounds, ms per shape and binary.
  summary+="$(python3 - "$out" <<'EOF'
import collections, glob, os, sys
d = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "bench_*_*.txt")):
    name = os.path.basename(f)[len("bench_"):-len(".txt")].split("_", 1)[1]
    for line in open(f):
        if line.startswith("BENCH "):
            _, shape, ms, *_ = line.split()
            d[(shape, name)].append(float(ms))
names = sorted({n for _, n in d}, key=lambda n: (n != "base", n))
shapes = list(dict.fromkeys(s for s, _ in sorted(d)))
print("| shape | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for s in shapes:
    cells = []
    for n in names:
        v = d.get((s, n))
        cells.append(f"{sum(v) / len(v):.4f}" if v else "-")
    print(f"| {s} | " + " | ".join(cells) + " |")
EOF
)"
  echo "$summary" | tee "$out/summary.txt"
  [ -n "${OUT:-}" ] && tar czf "$OUT/ab_logs.tgz" -C "$(dirname "$out")" "$(basename "$out")"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 build BRANCH... | run [ROUNDS]" >&2; exit 2 ;;
esac
