#!/usr/bin/env bash
# Runs every test that needs no GPU: the C++ tests (GoogleTest via ctest) and the Python tests
# (pytest, against the package built from this checkout). GPU tests: scripts/gpu_check.sh.
# Needs the packages of requirements-dev.txt and GoogleTest (Debian: googletest / libgtest-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFASTKDA_TESTS=ON
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

python3 -m pip install --no-build-isolation --no-deps -q . \
  -Cbuild-dir=build/python
python3 -m pytest tests/python -q
