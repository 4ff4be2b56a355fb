#!/usr/bin/env bash
# PrefillBench times of chosen shapes under chosen plan knobs (plan.cu), one line per
# (shape, knob set): "SWEEP <shape> <knobs> <ms>", interleaved ROUNDS times.
#
#   scripts/env_sweep.sh [BIN]     on the GPU machine (default BIN build-gpu/fastkda_gpu_tests)
#
# Env: SHAPES (bench shape names), CONFIGS (space-separated knob sets, each comma-separated
# NAME=value pairs without the FASTKDA_PREFILL_ prefix, "-" for none; e.g. "- STREAM=0
# STREAM=1,RETIRE=40"), ROUNDS (default 1); FASTKDA_BENCH_GATE=softplus times the softplus gate.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build-gpu/fastkda_gpu_tests}
for r in $(seq 1 "${ROUNDS:-1}"); do
  for shape in ${SHAPES:-H96_fixed_T8192}; do
    for cfg in ${CONFIGS:--}; do
      knobs=()
      [ "$cfg" != - ] && for kv in ${cfg//,/ }; do knobs+=("FASTKDA_PREFILL_$kv"); done
      ms=$(env "${knobs[@]}" FASTKDA_BENCH_FILTER="$shape" timeout 120 \
        "$bin" --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 |
        awk -v s="$shape" '$1 == "BENCH" && ($2 == s || $2 == s "+softplus") { print $3 }')
      echo "SWEEP $shape $cfg ${ms:-failed}"
    done
  done
done
