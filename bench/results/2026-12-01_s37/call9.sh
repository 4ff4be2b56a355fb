#!/usr/bin/env bash
# Session 37 call 9: main 8a66e8a's C++ bench, then fla's chunk_kda on the two H96 varlen rows in
# the same process (the unsplit kVs = 128 scan's staged final state, 9d517d6).
set -uo pipefail
SECONDS=0
BIN=build-gpu/ab/base_tests VSPLITS= FLA_FILTER=H96_varlen FLA_TIMEOUT=190 OUT=$OUT/o scripts/gpu_check_prefill.sh bench fla 2>&1 | tail -8
echo "total ${SECONDS}s"
