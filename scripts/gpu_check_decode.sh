#!/usr/bin/env bash
# Build, test and benchmark the CUDA decode step (src/cuda/decode).
#
#   scripts/gpu_check_decode.sh build   compile (no GPU needed) into build-decode/bin:
#                                       fastkda_gpu_decode_tests, libfastkda_decode_bench.so
#   scripts/gpu_check_decode.sh run     on the GPU machine: GPU decode tests, then
#                                       bench/bench_decode.py (fla from .whl), logs under $OUT
#   scripts/gpu_check_decode.sh all     build, then run
#
# The build is the CMake one (targets fastkda_gpu_tests, fastkda_decode_bench). Binaries built on
# this image (glibc 2.36) run on the device image; carry build-decode/bin and .whl:
#   run(command="scripts/gpu_check_decode.sh run", carry=["build-decode/bin", ".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-all}
BUILD=build-decode
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OUT=${OUT:-$BUILD/logs}
mkdir -p "$OUT"

build() {
  # CMake is the one build description: the GPU tests and the ctypes bench library are targets.
  local cutlass=()
  [ -d .deps/cutlass_include ] && cutlass=(-DFASTKDA_CUTLASS_INCLUDE=.deps/cutlass_include)
  cmake -S . -B $BUILD -G Ninja -DFASTKDA_TESTS=ON "${cutlass[@]}" >"$OUT/cmake.log"
  ninja -C $BUILD fastkda_gpu_tests fastkda_decode_bench >"$OUT/build.log"
  mkdir -p $BUILD/bin
  cp $BUILD/fastkda_gpu_tests $BUILD/bin/fastkda_gpu_decode_tests
  cp $BUILD/libfastkda_decode_bench.so $BUILD/bin/
  echo "built: $(ls $BUILD/bin)"
}

run() {
  local bin=$BUILD/bin
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
    | tee "$OUT/gpu.txt"
  local test_rc=skipped
  if [ -z "${SKIP_TESTS:-}" ]; then
    set +e
    "$bin/fastkda_gpu_decode_tests" --gtest_filter='DecodeGpu.*' >"$OUT/tests.log" 2>&1
    test_rc=$?
    set -e
  fi
  [ -f "$OUT/tests.log" ] && grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|expected|oracle|Which is" \
    "$OUT/tests.log" | head -60 || true
  echo "GPU decode tests rc=$test_rc"
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  local libs="$bin/libfastkda_decode_bench.so"
  FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 python3 bench/bench_decode.py --lib "$libs" \
    --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v '^{' || true
  echo "GPU decode tests rc=$test_rc"
}

case "$MODE" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 build|run|all" >&2; exit 2 ;;
esac
