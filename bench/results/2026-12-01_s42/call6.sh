#!/bin/bash
B=build-gpu/wy/t5
for i in 1 2 3; do timeout 60 $B --gtest_filter='PrefillGpu.Wy64Invariants' 2>&1 | grep -E 'first:|FAILED  \]|OK \]' | cut -c1-200; done
for i in 1 2; do FASTKDA_PREFILL_WY64=0 timeout 60 $B --gtest_filter='PrefillGpu.CausalBitForBit' 2>&1 | grep -E 'first:|FAILED  \]|OK \]' | cut -c1-200; done
