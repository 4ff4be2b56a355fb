// The chunk-parallel heavy part of DESIGN §2's chunked form, for one chunk of kC tokens of one
// (sequence, value head) (a CTA of 4 warps in intra_kernel.cuh):
//
//   G, norms, beta (common.cuh)  ->  anchored_operands: tf32 operands of A' and A_qk
//                                ->  intra_products:    N = strictly_lower(diag(beta) A'), A_qk
//                                                       (tf32 MMA, anchored, see below)
//                                ->  exact_rows:        pairs whose anchored form would overflow
//                                ->  invert_unit_lower: Tb = (I + N)^-1 diag(beta), f32
//
// Anchoring (never materialise 2^+G): rows 0..7 of a chunk are anchored at the chunk start,
// rows 8..15 at row 7. Pairwise factors 2^(G_r - G_s) (s <= r) are split as
// 2^(G_r - anchor) * 2^(anchor - G_s); the anchor is a row <= r, so row r never depends on a later
// row (causal bit for bit). The off-diagonal block (r >= 8, s < 8) has both factors <= 1. In the
// diagonal blocks the column factor is >= 1; it is clamped at 2^kMaxAnchorSpan, and the pairs (r,
// s) whose column token s spans more than that (strong gates, e.g. softplus at -1000) are
// recomputed exactly. The others are right as the products leave them: their column factor is
// exact, and a row factor that flushes to zero (2^(G_r - anchor) < 2^-126) drops less than 2^-126 x
// 2^kMaxAnchorSpan = 2^-26 of |k_r,i k_s,i| per key column.
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// The bounded gate's log2 decay per token lies in [lower_bound log2(e), 0] with lower_bound >= -5
// (validate.cpp), so an 8-row block spans at most ~57.7 in log2: below kMaxAnchorSpan, no column
// factor is clamped and no row needs exact_rows. The intra kernel drops the spans, the clamps and
// the exact-rows check for it, and forms ko = kd 2^G_7 (rows 0..7: kd = k^ . 2^-G) with one
// multiply instead of an exponential. (A NaN gate still makes its rows NaN, as the exact rows
// did.)
constexpr bool bounded_spans_fit() { return kHalf * 5.0f * kLog2e * 1.001f < kMaxAnchorSpan; }
static_assert(bounded_spans_fit(), "bounded gate: an 8-row block stays inside the anchored range");

// Thread i (IntraCols: two columns, rows 8 kBlock .. 8 kBlock + 7): the anchored tf32 operands kt,
// qt (rows; the row factor 2^(G - anchor) = 2^L), kd (2^(anchor - G) = 2^-L, over the gate rows:
// every thread has read them, a barrier since) and, for the first block, ko (2^(G_7 - G) =
// 2^(L_7 - L)); pairs of columns per 8-byte store. kBounded: a.gate is Gate::kBounded.
template <bool kBounded, int kBlock>
__device__ __forceinline__ void anchored_block(PrepPrivate& pp, RawQKG& r, int col,
                                               const float (&L)[2][kHalf]) {
  using device::ex2_approx;
  constexpr bool kFirst = kBlock == 0;
  constexpr int kRow0 = kBlock * kHalf;
  float p7[2];  // bounded, first block: 2^G_7 (bounded_spans_fit: >= 2^-58)
#pragma unroll
  for (int c = 0; c < 2; ++c) p7[c] = kBounded && kFirst ? ex2_approx(L[c][kHalf - 1]) : 0.0f;
  RowNorms rk{pp.rk + kRow0}, rq{pp.rq + kRow0};
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const int row = kRow0 + j;
    const uint32_t ku = *reinterpret_cast<const uint32_t*>(&r.k[row][col]);
    const uint32_t qu = *reinterpret_cast<const uint32_t*>(&r.q[row][col]);
    // The four operands are truncated tf32 (raw f32 bits) carrying 1 + kTruncBias (common.cuh),
    // through the row norms here (rq includes the scale).
    const float rkj = rk(j) * (1.0f + kTruncBias), rqj = rq(j) * (1.0f + kTruncBias);
    const float kn[2] = {bf16_lo(ku) * rkj, bf16_hi(ku) * rkj};
    const float qn[2] = {bf16_lo(qu) * rqj, bf16_hi(qu) * rqj};
    float kt[2], qt[2], kd[2], ko[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float e = ex2_approx(L[c][j]);  // <= 1
      kt[c] = kn[c] * e;
      qt[c] = qn[c] * e;
      if constexpr (kBounded) {
        const float d = kn[c] * ex2_approx(-L[c][j]);  // <= 2^58 k^: no clamp
        kd[c] = d;
        if constexpr (kFirst) ko[c] = d * p7[c];
      } else {
        kd[c] = kn[c] * ex2_approx(fminf(-L[c][j], kMaxAnchorSpan));
        if constexpr (kFirst) ko[c] = kn[c] * ex2_approx(L[c][kHalf - 1] - L[c][j]);
      }
    }
    const int sc = IntraLayout::col(row, col);  // rows j and 8 + j: the same swizzle
    *reinterpret_cast<float2*>(&pp.kt[row][sc]) = make_float2(kt[0], kt[1]);
    *reinterpret_cast<float2*>(&pp.qt[row][sc]) = make_float2(qt[0], qt[1]);
    *reinterpret_cast<float2*>(&r.kd[row][sc]) = make_float2(kd[0], kd[1]);
    if constexpr (kFirst) *reinterpret_cast<float2*>(&pp.ko[j][sc]) = make_float2(ko[0], ko[1]);
  }
}
template <bool kBounded>
__device__ __forceinline__ void anchored_operands(PrepPrivate& pp, RawQKG& r, int i,
                                                  const float (&L)[2][kHalf]) {
  const IntraCols tc(i);
  if (tc.h == 0)  // warps 0-1
    anchored_block<kBounded, 0>(pp, r, tc.col, L);
  else
    anchored_block<kBounded, 1>(pp, r, tc.col, L);
}

// Warp w: one 16 x 8 block of A' (w = 0, 1) or A_qk (w = 2, 3), column tile w % 2, by tf32 MMA over
// the 128 key columns. Column tile 0 needs two column operands: kd (diagonal block, rows 0..7) and
// ko (off-diagonal block, rows 8..15). The column tile is a template parameter (intra_products
// below dispatches on it once): as a run-time condition around the second MMA, ptxas predicated
// it and put a WARPSYNC beside every MMA of the loop (~124 per CTA, Nsight Compute session 9).
template <int nt>
__device__ __forceinline__ void intra_products_tile(PrepPrivate& sm,
                                                    const float (&kd)[kC][IntraLayout::kLd],
                                                    int i) {
  const int lane = i & 31, warp = i >> 5;
  const int g = lane >> 2, t = lane & 3;
  const bool is_qk = warp >= 2;
  const float(*X)[IntraLayout::kLd] = is_qk ? sm.qt : sm.kt;
  float acc0[2][4] = {}, acc1[2][4] = {};  // [even/odd k-step][fragment]: diag, off-diag
  int cols[4], cols4[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    cols[q] = IntraLayout::col(g, 8 * q + t);
    cols4[q] = IntraLayout::col(g, 8 * q + t + 4);
  }
#pragma unroll
  for (int ks = 0; ks < kK / 8; ++ks) {
    // Rows g, g + 8 and 8 nt + g share the layout's swizzle (row % 8 == g), which moves bits 2-4
    // of the column only: k step ks is k step ks % 4 shifted by 32 (ks / 4) columns, so four
    // column pairs per thread are formed once and the loop's addresses are immediate offsets.
    const int c = cols[ks % 4] + 32 * (ks / 4), c4 = cols4[ks % 4] + 32 * (ks / 4);
    const uint32_t af[4] = {__float_as_uint(X[g][c]), __float_as_uint(X[g + 8][c]),
                            __float_as_uint(X[g][c4]), __float_as_uint(X[g + 8][c4])};
    const float* bd = kd[8 * nt + g];
    device::mma_m16n8k8_tf32(acc0[ks & 1], af, __float_as_uint(bd[c]), __float_as_uint(bd[c4]));
    if constexpr (nt == 0) {
      const float* bo = sm.ko[g];
      device::mma_m16n8k8_tf32(acc1[ks & 1], af, __float_as_uint(bo[c]), __float_as_uint(bo[c4]));
    }
  }
  __syncthreads();  // every warp is done with qt: the results go over it
  // Row g takes the diagonal-block result; row g + 8 the off-diagonal one in tile 0.
  float val[4];
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const float d = acc0[0][f] + acc0[1][f], o = acc1[0][f] + acc1[1][f];
    val[f] = (nt == 0 && f >= 2) ? o : d;
  }
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const int row = g + (f >= 2 ? 8 : 0), col = 8 * nt + 2 * t + (f & 1);
    if (is_qk)
      sm.res.aqk[row][col] = col <= row ? tf32_operand(val[f]) : 0.0f;
    else
      sm.res.nmat[row][col] = col < row ? sm.beta[row] * val[f] : 0.0f;
  }
}
__device__ __forceinline__ void intra_products(PrepPrivate& sm,
                                               const float (&kd)[kC][IntraLayout::kLd], int i) {
  if ((i >> 5) & 1)
    intra_products_tile<1>(sm, kd, i);
  else
    intra_products_tile<0>(sm, kd, i);
}

// True when row `row` of the chunk spans more than kMaxAnchorSpan from its anchor in some column:
// its column operand kd was clamped there. The two warps of row's block (IntraCols) hold its spans.
__device__ __forceinline__ bool row_needs_exact(const PrepPrivate& sm, int row) {
  const int w = 2 * (row / kHalf);
  return max(sm.span[w][row], sm.span[w + 1][row]) > __float_as_uint(kMaxAnchorSpan);
}

// Exact diagonal-block entries of A' and A_qk for the pairs (r, s), s <= r in one 8-row block,
// whose column token s is flagged by row_needs_exact (then so is r: the spans grow along a block);
// the products' entries of the other pairs stay. Warp w takes the rows w and 7 - w of each block
// (flagged rows are a suffix of their block, so the warps share the pairs about evenly); lane l
// sums the key columns 2 l, 2 l + 1, 64 + 2 l, 65 + 2 l of each pair, and the row's partial sums
// (up to 8 pairs of A' and of A_qk) are reduced across the warp together by a fixed butterfly:
// at most 16 shuffles per row instead of 10 per pair (bitwise reproducible). The row norms
// multiply the sums. G: the cumulative log2 decays of every column (the caller writes them over
// kt, dead after the products).
__device__ __forceinline__ void exact_rows(PrepPrivate& sm, const RawQKG& r,
                                           const float (&G)[kC][IntraLayout::kLd], int i) {
  const int lane = i & 31, warp = i >> 5;
  static_assert(kPrepWarps * 2 == kHalf && kK == 128, "exact_rows: 2 rows per block and warp");
  const uint32_t flagged = __ballot_sync(0xffffffffu, lane < kC && row_needs_exact(sm, lane));
#pragma unroll 1
  for (int e = 0; e < 4; ++e) {
    const int jr = e & 1 ? kHalf - 1 - warp : warp;  // the row within its block
    const int row0 = (e >> 1) * kHalf, row = row0 + jr;
    if (!((flagged >> row) & 1u)) continue;  // warp-uniform
    float kr[4], qr[4], gr[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = 2 * lane + 64 * h;
      const uint32_t ku = *reinterpret_cast<const uint32_t*>(&r.k[row][col]);
      const uint32_t qu = *reinterpret_cast<const uint32_t*>(&r.q[row][col]);
      const float2 g = *reinterpret_cast<const float2*>(&G[row][IntraLayout::col(row, col)]);
      kr[2 * h] = bf16_lo(ku), kr[2 * h + 1] = bf16_hi(ku);
      qr[2 * h] = bf16_lo(qu), qr[2 * h + 1] = bf16_hi(qu);
      gr[2 * h] = g.x, gr[2 * h + 1] = g.y;
    }
    // The pairs: flagged tokens s <= jr of the block, as bits of a mask (on `s <= jr` the compiler
    // split the unrolled loop at jr and put the partial sums on the stack).
    const uint32_t pairs = (flagged >> row0) & ((2u << jr) - 1u);
    // Reduce-scatter over the lanes: the step over lane bit b keeps the half of the values that
    // bit selects and adds the partner's copy of it (the halves picked by a bit mask: as `upper ?
    // x : y` of array elements the compiler indexed the array dynamically). The step over bit 4
    // runs as each pair is made (lanes 0..15 keep A', 16..31 A_qk), so that 8 sums stay live;
    // after bits 3..1 lane l holds pair (l >> 1) % 8 of A' (l < 16) or A_qk, and the last step
    // completes it on both lanes of a lane pair.
    const auto pick = [lane](int bit, float x, float y) {  // x where the lane's bit is 0
      const uint32_t m = lane & bit ? ~0u : 0u;
      return __uint_as_float((m & __float_as_uint(y)) | (~m & __float_as_uint(x)));
    };
    float v[kHalf];  // partial sums of A' or A_qk, s in the block; 0 for the pairs left as they are
#pragma unroll
    for (int s = 0; s < kHalf; ++s) {
      v[s] = 0.0f;
      if (pairs & (1u << s)) {
        const int srow = row0 + s;
        float sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = 2 * lane + 64 * h;
          const uint32_t ku = *reinterpret_cast<const uint32_t*>(&r.k[srow][col]);
          const float2 g = *reinterpret_cast<const float2*>(&G[srow][IntraLayout::col(srow, col)]);
          const float t0 = bf16_lo(ku) * device::ex2_approx(gr[2 * h] - g.x);
          const float t1 = bf16_hi(ku) * device::ex2_approx(gr[2 * h + 1] - g.y);
          sk = fmaf(kr[2 * h], t0, sk), sk = fmaf(kr[2 * h + 1], t1, sk);
          sq = fmaf(qr[2 * h], t0, sq), sq = fmaf(qr[2 * h + 1], t1, sq);
        }
        v[s] = pick(16, sk, sq) + __shfl_xor_sync(0xffffffffu, pick(16, sq, sk), 16);
      }
    }
#pragma unroll
    for (int b = 2; b >= 0; --b) {
      const int n = 1 << b;  // 4, 2, 1 values kept
#pragma unroll
      for (int j = 0; j < n; ++j)
        v[j] = pick(2 * n, v[j], v[n + j]) +
               __shfl_xor_sync(0xffffffffu, pick(2 * n, v[n + j], v[j]), 2 * n);
    }
    const float sum = v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
    const int idx = lane >> 1, s = idx % kHalf;
    if ((lane & 1) == 0 && ((pairs >> s) & 1u)) {
      if (idx < kHalf) {
        if (s < jr)
          sm.res.nmat[row][row0 + s] = sm.beta[row] * (sm.rk[row] * sm.rk[row0 + s] * sum);
      } else {
        sm.res.aqk[row][row0 + s] = tf32_operand(sm.rq[row] * sm.rk[row0 + s] * sum);
      }
    }
  }
}

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
