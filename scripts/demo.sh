#!/usr/bin/env bash
# The main job, from a fresh checkout: installs the build dependencies from PyPI, builds fastkda
# (with the Hopper kernels when nvcc is present) and runs one KDA forward on the default device
# (the GPU if there is one, else the CPU), printing time, tokens/s and the error vs the fp64 oracle.
# Extra arguments go to the demo: --T tokens --H heads --device auto|cpu|cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-build.txt
python3 -m pip install -q --no-deps nvidia-cutlass==4.2.0.0
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S . -B build-demo "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFASTKDA_TESTS=OFF >/dev/null
cmake --build build-demo -j "$(nproc 2>/dev/null || echo 2)" --target fastkda_demo >/dev/null
./build-demo/fastkda_demo "$@"
