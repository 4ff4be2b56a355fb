// The chunk-parallel heavy part of DESIGN §2's chunked form, for one chunk of kC tokens of one
// (sequence, value head), by one warp (intra_warp.cuh):
//
//   G, norms, beta (common.cuh)  ->  anchored products:  N = strictly_lower(diag(beta) A'), A_qk
//                                                          (tf32 MMA, every factor <= 2^100)
//                                ->  invert_unit_lower:   Tb = (I + N)^-1 diag(beta), f32
//
// Anchoring (never materialise 2^+G): pairwise factors 2^(G_r - G_s) (s <= r) are split as
// 2^(G_r - a) * 2^(a - G_s) with an anchor row a <= r, so row r never depends on a later row
// (causal bit for bit). The bounded gate uses two anchors: rows 0..7 at the chunk start, rows
// 8..15 at row 7; the block (rows 8..15, cols 0..7) has both factors <= 1, the diagonal blocks a
// column factor >= 1, at most 2^58 for a bounded gate (bounded_spans_fit). The softplus and
// pre-gated gates, whose decays reach 2^-128 per token, take an anchor between each pair's
// tokens (s <= a < r: both factors <= 1) from a binary split of the chunk (intra_warp_hier).
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// The bounded gate's log2 decay per token lies in [lower_bound log2(e), 0] with lower_bound >= -5
// (validate.cpp), so an 8-row block spans at most ~57.7 in log2: below kMaxAnchorSpan, so its
// column factors need no clamp, and ko = kd 2^G_7 (rows 0..7: kd = k^ . 2^-G) takes one multiply
// instead of an exponential.
constexpr bool bounded_spans_fit() { return kHalf * 5.0f * kLog2e * 1.001f < kMaxAnchorSpan; }
static_assert(bounded_spans_fit(), "bounded gate: an 8-row block stays inside the anchored range");

// Thread j < kC: column j of Tb = (I + N)^-1 diag(beta) by f32 forward substitution (no Neumann
// series: exact for near-collinear keys), stored row-major to tb_out [kC][kC]. Row r uses rows
// <= r of N only (causal); entries above the diagonal are exact zeros.
__device__ __forceinline__ void invert_unit_lower(const float (&nmat)[kC][kLdN],
                                                  const float (&beta)[kC], int j, float* tb_out) {
  float x[kC];
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    float acc = row == j ? 1.0f : 0.0f;
#pragma unroll
    for (int s = 0; s < row; ++s) acc -= nmat[row][s] * x[s];
    x[row] = acc;
  }
  const float b = beta[j];
#pragma unroll
  for (int row = 0; row < kC; ++row) tb_out[row * kC + j] = x[row] * b;
}

}  // namespace fastkda::prefill_cuda
