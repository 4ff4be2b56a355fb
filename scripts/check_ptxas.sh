#!/usr/bin/env bash
# ptxas check of the prefill kernels, no GPU needed (a ctest whenever the CUDA kernels are built):
# fails when ptxas reports that it serialised the wgmma scan (C7511 register resources, C7520
# divergent path: a silent ~10 % loss of the kVs = 128 rows, docs/prefill.md "wgmma scan").
#   scripts/check_ptxas.sh NVCC CUTLASS_INCLUDE_DIR
set -euo pipefail
nvcc=$1
cutlass=$2
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! "$nvcc" -std=c++20 -O3 -DNDEBUG --expt-relaxed-constexpr -DFASTKDA_WITH_CUDA=1 \
  "--generate-code=arch=compute_90a,code=[sm_90a]" -I"$root/include" -I"$root/src" \
  -isystem "$cutlass" -Xptxas -v -c "$root/src/cuda/prefill/launch.cu" -o "$out/launch.o" \
  >"$out/ptxas.log" 2>&1; then
  tail -30 "$out/ptxas.log"
  exit 1
fi
if grep -E "C7511|C7520" "$out/ptxas.log"; then
  echo "ptxas serialised wgmma instructions (above)"
  exit 1
fi
echo "ptxas: no wgmma serialisation in $(grep -c 'Compiling entry' "$out/ptxas.log") kernels"
