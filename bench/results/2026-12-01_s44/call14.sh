#!/bin/bash
# session 44 call 14: t26 (61a4457's kernels; 6c8e219 SASS-identical): the Wy64 GPU tests over 8 pinned seeds (FASTKDA_TEST_SEED), worst errors per seed
mkdir -p $OUT
for seed in 1 2 3 4 5 6 7 8; do
  FASTKDA_TEST_SEED=$seed timeout 60 build-gpu/wy/t26 --gtest_filter='PrefillGpu.Wy64*' > $OUT/seed$seed.log 2>&1
  echo "seed $seed rc=$? $(grep -E '^\[  PASSED|FAILED  \]' $OUT/seed$seed.log | tr '\n' ' ') worst out $(grep '^\[prefill\]' $OUT/seed$seed.log | sed 's/.*out \([0-9.e-]*\) .*/\1/' | sort -g | tail -1) worst f32 state $(grep '^\[prefill\]' $OUT/seed$seed.log | grep -v bf16 | sed 's/.*state \([0-9.e-]*\).*/\1/' | sort -g | tail -1)"
done
