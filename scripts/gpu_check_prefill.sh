#!/usr/bin/env bash
# One device-machine call for the prefill kernel: build (or use the carried binary), GPU tests,
# compute-sanitizer on a small case, the C++ benchmark and fla's chunk_kda in one process.
# Usage (repo root, on the GPU machine):
#   scripts/gpu_check_prefill.sh [tests] [seeds] [sanitize|racecheck] [scanchain] [bench] [fla]
#   env: BENCH_FILTER (shape substring), FLA_FILTER, TEST_FILTER (gtest filter), BIN (test binary),
#        SEEDS (seeds step: how many pinned seeds, default 10), FASTKDA_PY=1 (fla step: also
#        fastkda.chunk_kda in fla's process, package built there), FLA_CACHE_OUT=1 (return fla's
#        Triton cache in parts; copy them into .triton-cache here and carry it in later calls
#        to skip fla's autotuning), SANITIZE_CFGS (sanitize step: subset of "vs1 vs2 vs4
#        seg64 stream persist wy64"), FASTKDA_BENCH_GATE=softplus (bench and fla steps: the softplus
#        gate in both)
#   scripts/gpu_check_prefill.sh unpack-triton DIR   here: .triton-cache unpacked from a call's
#        parts (too large to carry once unpacked at ~190 MB; for inspection)
# Full logs go to $OUT (or ./gpu_out); a short summary is printed last.
set -uo pipefail
if [ "${1:-}" = unpack-triton ]; then  # here: .triton-cache from the parts a device call returned
  if [ -z "${2:-}" ] || ! ls "$2"/triton_cache.tgz.part-* > /dev/null; then
    echo "usage: $0 unpack-triton DIR (DIR holding triton_cache.tgz.part-*)" >&2
    exit 2
  fi
  rm -rf .triton-cache && mkdir -p .triton-cache
  cat "$2"/triton_cache.tgz.part-* | tar xzf - -C .triton-cache
  du -sh .triton-cache; exit
fi
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
steps=${*:-tests sanitize bench}
BIN=${BIN:-build-prefill/dist/fastkda_gpu_tests}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} > "$OUT/env.txt" 2>&1
if ! "$BIN" --gtest_list_tests > /dev/null 2>&1; then
  echo "carried binary unusable; building here" | tee -a "$OUT/env.txt"
  t0=$(date +%s)
  cmake -S . -B build-dev -G Ninja -DFASTKDA_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DFASTKDA_CUTLASS_INCLUDE=.deps/cutlass_include > "$OUT/build.log" 2>&1 &&
  ninja -C build-dev -j16 fastkda_gpu_tests >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/env.txt"
  BIN=build-dev/fastkda_gpu_tests
fi
summary=""
for s in $steps; do
  case $s in
    tests)
      timeout 60 "$BIN" --gtest_filter=PrefillGpu.WorkspaceSizeAndDimsChecked:PrefillGpu.CollinearKeysBetaNearOne > "$OUT/smoke.log" 2>&1
      rc=$?; summary+="smoke rc=$rc $(grep -E '^\[prefill\]|FAILED  \]' "$OUT/smoke.log" | tr '\n' ' ')"$'\n'
      if [ $rc -eq 124 ]; then echo "$summary"; echo "SMOKE TIMED OUT (hang?)"; tail -20 "$OUT/smoke.log"; exit 1; fi
      timeout 180 "$BIN" --gtest_filter="${TEST_FILTER:-PrefillGpu.*}" > "$OUT/tests.log" 2>&1
      summary+="tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"$'\n'
      summary+="$(grep -E '^\[prefill\]|FAILED  \]' "$OUT/tests.log" | head -60)"$'\n' ;;
    seeds)
      # The precision tail: the adversarial cases over SEEDS pinned seeds (one draw per test run
      # otherwise), worst final-state error per case.
      : > "$OUT/seeds.log"
      for seed in $(seq 1 "${SEEDS:-10}"); do
        FASTKDA_TEST_SEED=$seed timeout 120 "$BIN" \
          --gtest_filter='PrefillGpu.GateModes:PrefillGpu.CollinearKeysBetaNearOne:PrefillGpu.SplitT' \
          >> "$OUT/seeds.log" 2>&1
      done
      summary+="seeds ${SEEDS:-10}: $(grep -c 'FAILED  \]' "$OUT/seeds.log") failed test runs; worst state per case:"$'\n'
      summary+="$(grep '^\[prefill\]' "$OUT/seeds.log" | grep -v -E 'bf16|boundary' |
        sed 's/ *out [0-9.e-]* | state / /' |
        awk '{v=$NF; $NF=""; if (!(($0) in m) || v+0 > m[$0]) m[$0]=v+0} END {for (k in m) print m[k], k}' |
        sort -g | tail -8)"$'\n' ;;
    sanitize|racecheck)
      # PrefillGpu.Varlen with the value split forced to 1, 2 and 4 (kVs = 128, 64: the wgmma
      # scan; kVs = 32: the key-split mma.sync scan; its small cases take vsplit 2 by default) and
      # with split T forced (FASTKDA_PREFILL_SEG=64: transition pass, combine, output pass on every
      # case); "stream": PrefillGpu.StreamedIntra (the streamed intra kernel at every value split
      # and retire point; the sanitizer runs its two grids one after the other); "wy64":
      # PrefillGpu.Wy64Invariants (the 64-token WY pipeline: producer and scan, PDL, ready flags).
      tools="memcheck racecheck"; [ "$s" = racecheck ] && tools=racecheck
      for tool in $tools; do
        for cfg in ${SANITIZE_CFGS:-vs1 vs2 vs4 seg64 stream wy64}; do
          vs=""; seg=""; filter=PrefillGpu.Varlen
          case $cfg in vs1) vs=1 ;; vs2) vs=2 ;; vs4) vs=4 ;; seg64) seg=64 ;;
            stream) filter=PrefillGpu.StreamedIntra ;; persist) filter=PrefillGpu.PersistentGrid ;;
            wy64) filter=PrefillGpu.Wy64Invariants ;; esac
          log="$OUT/sanitize_${tool}_$cfg.log"
          FASTKDA_PREFILL_VSPLIT=$vs FASTKDA_PREFILL_SEG=$seg timeout 150 compute-sanitizer \
            --tool $tool --error-exitcode 9 "$BIN" --gtest_filter=$filter > "$log" 2>&1
          summary+="sanitizer $tool $cfg rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | head -2 | tr '\n' ' ')"$'\n'
        done
      done ;;
    scanchain)
      # The sequential part of the scan alone at C = 16 / 32 / 64 (tests/gpu/test_scan_chain_bench.cu).
      timeout 120 "$BIN" --gtest_also_run_disabled_tests --gtest_filter='ScanChainBench.*' \
        > "$OUT/scanchain.txt" 2>&1
      summary+="scanchain rc=$?"$'\n'"$(grep -E '^SCANCHAIN|FAILED  \]' "$OUT/scanchain.txt")"$'\n' ;;
    bench)
      vsplits=${VSPLITS-1,2,4}  # forced value splits for extra rows (unset: 1,2,4; empty: none)
      env FASTKDA_BENCH_FILTER="${BENCH_FILTER:-}" ${vsplits:+FASTKDA_BENCH_VSPLITS=$vsplits} \
        timeout 150 "$BIN" \
        --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*' > "$OUT/fastkda_bench.txt" 2>&1
      summary+="bench rc=$?"$'\n'"$(grep -E '^(BENCH|HOST)' "$OUT/fastkda_bench.txt")"$'\n' ;;
    fla)
      if [ -d .whl ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
        export PYTHONPATH=/tmp/site
      fi
      # fla's Triton kernels autotune per shape class (1-2 min each on a fresh machine). Their
      # compiled kernels and autotuning results (fla caches them: FLA_CACHE_RESULTS) live in
      # TRITON_CACHE_DIR: seeded from a carried .triton-cache, and with FLA_CACHE_OUT=1 packed
      # into $OUT as triton_cache.tgz.part-* (15 MB each: a device call returns files up to 16 MB).
      export TRITON_CACHE_DIR=/tmp/triton_cache
      # .triton-cache holds the parts as they came back (~30 MB; unpacked it is ~190 MB, over the
      # 64 MiB carry) or, after unpack-triton, the cache itself.
      mkdir -p "$TRITON_CACHE_DIR"
      if ls .triton-cache/triton_cache.tgz.part-* > /dev/null 2>&1; then
        cat .triton-cache/triton_cache.tgz.part-* | tar xzf - -C "$TRITON_CACHE_DIR"
      elif [ -d .triton-cache ]; then
        cp -r .triton-cache/. "$TRITON_CACHE_DIR"/
      fi
      # FASTKDA_PY=1: the Python package built here first (build_python_gpu.sh) and
      # fastkda.chunk_kda timed in the same process on fla's very inputs.
      py=()
      if [ -n "${FASTKDA_PY:-}" ]; then
        summary+="$(scripts/build_python_gpu.sh "$OUT/python_build.log")"$'\n'
        export PYTHONPATH=/tmp/fastkda_py:${PYTHONPATH:-}
        py=(--py)
      fi
      FLA_FLASH_KDA=0 PYTHONUNBUFFERED=1 timeout ${FLA_TIMEOUT:-420} python3 bench/bench_prefill.py \
        --fastkda "$OUT/fastkda_bench.txt" --filter "${FLA_FILTER:-}" --out "$OUT/table.md" \
        --gate "${FASTKDA_BENCH_GATE:-bounded}" \
        ${py[@]+"${py[@]}"} > "$OUT/fla_bench.log" 2>&1
      summary+="fla rc=$?"$'\n'"$(grep '^|' "$OUT/fla_bench.log" | sort -u)"$'\n'
      if [ -n "${FLA_CACHE_OUT:-}" ] && [ -d "$TRITON_CACHE_DIR" ]; then
        tar czf - -C "$TRITON_CACHE_DIR" . | split -b 15m - "$OUT/triton_cache.tgz.part-"
        summary+="triton cache: $(du -sh "$TRITON_CACHE_DIR" | cut -f1) in $(ls "$OUT"/triton_cache.tgz.part-* | wc -l) parts"$'\n'
      fi ;;

  esac
done
cat "$OUT/env.txt"
echo "$summary"
