#!/usr/bin/env bash
# Everything the GPU machine checks, in one call: the GPU tests (prefill and decode, against the
# fp64 CPU oracle), the main job, and the benchmarks against fla (prefill: chunk_kda, decode:
# fused_recurrent_kda). Per-kernel scripts with more options: gpu_check_prefill.sh,
# gpu_check_decode.sh.
#
#   scripts/gpu_check.sh build            here (nvcc, no GPU): CMake build into build-gpu
#   scripts/gpu_check.sh run [steps]      on the GPU machine; steps: tests python demo bench
#                                         (default: tests demo bench)
#
# Device call: run(command="scripts/gpu_check.sh run", carry=["build-gpu/fastkda_gpu_tests",
#   "build-gpu/fastkda_demo", "build-gpu/libfastkda_decode_bench.so", ".whl"])
# Full logs go to $OUT (or build-gpu/logs); a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-gpu
OUT=${OUT:-$B/logs}
mkdir -p "$OUT"

build() {
  local cutlass=()
  [ -d .deps/cutlass_include ] && cutlass=(-DFASTKDA_CUTLASS_INCLUDE=.deps/cutlass_include)
  cmake -S . -B $B -G Ninja -DFASTKDA_TESTS=ON "${cutlass[@]}" >"$OUT/cmake.log" &&
    ninja -C $B fastkda_gpu_tests fastkda_demo fastkda_decode_bench >"$OUT/build.log" ||
    { tail -30 "$OUT/build.log"; exit 1; }
  ls -la $B/fastkda_gpu_tests $B/fastkda_demo $B/libfastkda_decode_bench.so
}

run() {
  local steps=${*:-tests demo bench} summary=""
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/env.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
    >>"$OUT/env.txt" 2>&1
  for s in $steps; do
    case $s in
      tests)
        timeout 300 $B/fastkda_gpu_tests >"$OUT/gpu_tests.log" 2>&1
        summary+="gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests.log" | tr '\n' ' ')"$'\n'
        summary+="$(grep -E '^\[  FAILED  \]' "$OUT/gpu_tests.log")"$'\n' ;;
      python)
        # The Python package built there with the machine's default compiler (no network: carry
        # .deps/cutlass_include) and its CUDA tests (tests/python/test_cuda.py: fwd / chunk_kda /
        # prefill / decode vs the CPU oracle). Session 5: that toolchain links libstdc++ statically
        # and formatting a number through std::ostringstream in an error message segfaulted there;
        # messages are now built with std::to_chars (common.h).
        summary+="$(scripts/build_python_gpu.sh "$OUT/python_build.log")"$'\n'
        PYTHONPATH=/tmp/fastkda_py:${PYTHONPATH:-} timeout 300 python3 -m pytest -q -s -p no:cacheprovider \
          tests/python/test_cuda.py >"$OUT/pytest_cuda.log" 2>&1
        summary+="pytest cuda rc=$? $(tail -1 "$OUT/pytest_cuda.log")"$'\n' ;;
      demo)
        $B/fastkda_demo >"$OUT/demo.log" 2>&1
        summary+="demo rc=$?"$'\n'"$(cat "$OUT/demo.log")"$'\n' ;;
      bench)
        if ls .whl/*.whl >/dev/null 2>&1; then
          python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
          export PYTHONPATH=/tmp/site
        fi
        FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 timeout 400 python3 bench/bench_decode.py \
          --lib $B/libfastkda_decode_bench.so --json "$OUT/decode.json" >"$OUT/decode_bench.log" 2>&1
        summary+="decode bench rc=$?"$'\n'"$(grep '^|' "$OUT/decode_bench.log")"$'\n'
        timeout 150 $B/fastkda_gpu_tests --gtest_also_run_disabled_tests \
          --gtest_filter='PrefillBench.*' >"$OUT/prefill_bench.txt" 2>&1
        FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 timeout 400 python3 bench/bench_prefill.py \
          --fastkda "$OUT/prefill_bench.txt" --out "$OUT/prefill_table.md" >"$OUT/prefill_fla.log" 2>&1
        summary+="prefill bench rc=$?"$'\n'"$(grep '^|' "$OUT/prefill_fla.log" | sort -u)"$'\n'
        summary+="$(grep '^HOST' "$OUT/prefill_bench.txt")"$'\n' ;;
    esac
  done
  cat "$OUT/env.txt"
  echo "$summary"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 build | run [tests] [demo] [bench]" >&2; exit 2 ;;
esac
