#!/bin/bash
# session 43 call 4: the source page (SASS, stall samples) of call 1's Nsight Compute report of the WY scan (H32 T4096)
mkdir -p $OUT
ncu -i build-gpu/wy/ncu_T4096.ncu-rep --page source --csv --print-source sass -k regex:scan_kernel > $OUT/scan_src.csv 2> $OUT/err.txt; echo rc=$?; head -c 600 $OUT/scan_src.csv; wc -l $OUT/scan_src.csv; head -5 $OUT/err.txt
