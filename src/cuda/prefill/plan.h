// The prefill's launch plan (host code only): the value split, split T and its segments, the
// streamed intra kernel and its retire tile, the CTA order. A function of the params, the device's
// SM count and the FASTKDA_PREFILL_* tuning knobs only, so that the workspace size query and the
// call agree; plan.cu holds the cost model and the measurements behind it.
#pragma once

#include <cstdint>

#include "fastkda/fastkda.h"

namespace fastkda::cuda {

// The launch plan: value split and split T (segments of seg_chunks chunks; 0: none).
struct Plan {
  int vsplit = 1;
  int seg_chunks = 0;
  int seg0_chunks = 0;     // split T: segment 0 (>= seg_chunks; PrefillArgs::seg0_chunks)
  bool first_out = false;  // split T: segment 0's outputs in pass 1 (PrefillArgs::first_out)
  bool pairs = false;      // split T's pass 1 as Pass::kPairs (vsplit 1, first_out)
  bool longest_first = false;  // order_kernel before the scan (varlen, more CTAs than SMs)
  bool persistent = false;     // unsplit scan on min(jobs, SMs) CTAs, each walking its jobs
  int sms = 0;
  // Streamed intra kernel beside a one-wave unsplit scan or split T's segment 0 (choose_split,
  // intra_warp_streamed_kernel): its tiles, the tile from which CTAs on SMs >= keep_sms stop
  // claiming, keep_sms.
  bool streamed = false;
  int64_t intra_tiles = 0, retire_tile = 0;
  int keep_sms = 0;
  bool slot_map = false;  // varlen intra grid: slot_map_kernel before it (order.cuh)
  bool f16 = false;       // the kVs = 128 scan on f16 operands (f16_scan)
  int combine_rows = 16;  // split T: rows of S^T per combine CTA (16 or 32; use_combine_rows)
  // The 64-token WY pipeline (wy64.cuh: a producer kernel of chunk images and a scan behind it),
  // instead of everything above (use_wy64).
  bool wy64 = false;
};

// Why the 64-token WY pipeline cannot run p (num_seq sequences, `sms` SMs), or null when it can.
const char* wy64_unsupported(const ForwardParams& p, int64_t num_seq, int sms);

// Whether the kVs = 128 scan (vsplit 1: unsplit and every split-T pass) takes f16 operands for
// P^T and O^T with a scaled state (scan.cuh WarpScale): only where the state rows have a bound,
// i.e. l2norm'd keys, beta <= 2 (sigmoid or 2 sigmoid) and a gate <= 0 (bounded or softplus;
// pre-gated decays are the caller's). Elsewhere, and at vsplit 2 / 4, it takes tf32.
bool f16_scan(const ForwardParams& p);

// The plan for p (num_seq sequences) on a device of `sms` SMs. A tuning knob set to a bad value
// raises fastkda::Error naming it. The last plan of each host thread is kept for a repeated key.
Plan choose_plan(const ForwardParams& p, int64_t num_seq, int sms);

// Chunks of the longest sequence as far as the host knows (a fixed-length batch: T; one varlen
// sequence: at most all tokens): the streamed kernel's chunk indices and its ready blocks.
int64_t longest_chunks(const ForwardParams& p);

}  // namespace fastkda::cuda
