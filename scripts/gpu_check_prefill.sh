#!/usr/bin/env bash
# One device-machine call for the prefill kernel: build (or use the carried binary), GPU tests,
# compute-sanitizer on a small case, the C++ benchmark and fla's chunk_kda in one process.
# Usage (repo root, on the GPU machine): scripts/gpu_check_prefill.sh [tests] [sanitize|racecheck] [bench] [fla]
#   env: BENCH_FILTER (shape substring), FLA_FILTER, TEST_FILTER (gtest filter), BIN (test binary)
# Full logs go to $OUT (or ./gpu_out); a short summary is printed last.
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
steps=${*:-tests sanitize bench}
BIN=${BIN:-build-prefill/dist/fastkda_gpu_tests}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} > "$OUT/env.txt" 2>&1
if ! "$BIN" --gtest_list_tests > /dev/null 2>&1; then
  echo "carried binary unusable; building here" | tee -a "$OUT/env.txt"
  t0=$(date +%s)
  cmake -S . -B build-dev -G Ninja -DFASTKDA_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DFASTKDA_CUTLASS_INCLUDE=.deps/cutlass_include > "$OUT/build.log" 2>&1 &&
  ninja -C build-dev -j16 fastkda_gpu_tests >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/env.txt"
  BIN=build-dev/fastkda_gpu_tests
fi
summary=""
for s in $steps; do
  case $s in
    tests)
      timeout 60 "$BIN" --gtest_filter=PrefillGpu.WorkspaceSizeAndDimsChecked:PrefillGpu.CollinearKeysBetaNearOne > "$OUT/smoke.log" 2>&1
      rc=$?; summary+="smoke rc=$rc $(grep -E '^\[prefill\]|FAILED  \]' "$OUT/smoke.log" | tr '\n' ' ')"$'\n'
      if [ $rc -eq 124 ]; then echo "$summary"; echo "SMOKE TIMED OUT (hang?)"; tail -20 "$OUT/smoke.log"; exit 1; fi
      timeout 180 "$BIN" --gtest_filter="${TEST_FILTER:-PrefillGpu.*}" > "$OUT/tests.log" 2>&1
      summary+="tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"$'\n'
      summary+="$(grep -E '^\[prefill\]|FAILED  \]' "$OUT/tests.log" | head -60)"$'\n' ;;
    sanitize|racecheck)
      tools="memcheck racecheck"; [ "$s" = racecheck ] && tools=racecheck
      for tool in $tools; do
        timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 "$BIN" \
          --gtest_filter=PrefillGpu.Varlen > "$OUT/sanitize_$tool.log" 2>&1
        summary+="sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | head -2 | tr '\n' ' ')"$'\n'
      done ;;
    bench)
      FASTKDA_BENCH_FILTER=${BENCH_FILTER:-} FASTKDA_BENCH_VSPLITS=${VSPLITS:-1,2,4} timeout 150 "$BIN" \
        --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > "$OUT/fastkda_bench.txt" 2>&1
      summary+="bench rc=$?"$'\n'"$(grep -E '^(BENCH|HOST)' "$OUT/fastkda_bench.txt")"$'\n' ;;
    fla)
      if [ -d .whl ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
        export PYTHONPATH=/tmp/site
      fi
      FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 timeout ${FLA_TIMEOUT:-420} python3 bench/bench_prefill.py \
        --fastkda "$OUT/fastkda_bench.txt" --filter "${FLA_FILTER:-}" --out "$OUT/table.md" \
        > "$OUT/fla_bench.log" 2>&1
      summary+="fla rc=$?"$'\n'"$(grep '^|' "$OUT/fla_bench.log" | sort -u)"$'\n' ;;
  esac
done
cat "$OUT/env.txt"
echo "$summary"
