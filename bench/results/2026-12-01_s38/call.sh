#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  timeout 120 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.*' 2>&1 | tee -a $OUT/wy64_r$r.txt | grep -v "^\[" ; true
done
