#!/bin/bash
# session 44 call 15: tF = the final HEAD's library (SASS-identical kernels to 61a4457) + the new WgmmaGpu.Bf16M64N64K16LeadingColumns test: WgmmaGpu.*, and the H32 rows once more
mkdir -p $OUT
timeout 60 build-gpu/wy/tF --gtest_filter='WgmmaGpu.*' > $OUT/wgmma.log 2>&1; echo "WgmmaGpu rc=$?"; grep -E '^\[wgmma\]|^\[  (PASSED|FAILED)|FAILED  \]' $OUT/wgmma.log
FASTKDA_BENCH_FILTER=H32_T timeout 60 build-gpu/wy/tF --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' 2>&1 | grep -E '^BENCH'
