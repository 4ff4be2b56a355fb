#!/usr/bin/env bash
# The Python package built on the GPU machine into /tmp/fastkda_py (no network: carry
# .deps/cutlass_include; ~20-35 s with 16 jobs), for gpu_check.sh's python step and
# gpu_check_prefill.sh's FASTKDA_PY=1. Prints "python build rc=<rc> (<s> s)"; log to $1.
#   scripts/build_python_gpu.sh LOG && export PYTHONPATH=/tmp/fastkda_py:$PYTHONPATH
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 400 python3 -m pip install -q --no-build-isolation \
  --no-deps --target /tmp/fastkda_py -Cbuild-dir=/tmp/fastkda_pybuild \
  -Ccmake.define.FASTKDA_CUTLASS_INCLUDE="$PWD/.deps/cutlass_include" . > "$1" 2>&1
rc=$?
echo "python build rc=$rc ($((SECONDS - t0)) s)"
exit $rc
