#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
timeout 250 build-gpu/wy/tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.*' 2>&1 | tee $OUT/wy64_all.txt | grep -v "^\[ \|^\[-\|^\[=" | cut -c1-200; true
