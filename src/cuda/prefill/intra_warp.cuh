// The intra work of one chunk by one warp (intra.cuh): the anchored A' and A_qk, Tb and the row
// norms, with every MMA operand formed in the registers of the lane that feeds it to the tensor
// core. (Until session 34 the softplus and pre-gated gates ran a CTA of 4 warps per chunk with
// operands staged in shared memory, clamped column factors and exact pairwise recomputation
// where they overflowed; intra_warp_hier replaced it.)
//
// Why this layout works: in mma.m16n8k8 (tf32) lane (g, t) = (lane / 4, lane % 4) feeds A rows g
// and g + 8 at k slots t and t + 4, and B columns (tokens) g at the same k slots. For A' = kt kd^T
// and A_qk = qt kd^T (ko instead of kd below the diagonal) the B tokens of n-tile 0 (tokens 0..7)
// and of n-tile 1 (8..15) are the lane's own A rows g and g + 8, and the k slots may stand for any
// key columns as long as every lane agrees: k step 4 i + 2 hh + m gives slot t the key column
// 32 i + 8 t + 4 hh + 2 m and slot t + 4 the next one. So lane (g, t) owns rows g, g + 8 and the
// 32 key columns 32 i + 8 t + j (i < 4, j < 8) of q and k for the whole chunk (four 16-byte loads
// per row and tensor) and forms kt, qt, kd, ko of exactly the fragments it feeds. Only the
// cumulative gate crosses lanes (a column sum over the chunk's rows): lane l activates and sums
// key columns 4 l .. 4 l + 3 of all 16 rows (gate_rows' arithmetic) and hands the sums over
// through 8 KiB of shared memory. No CTA barrier: the warps of a CTA are independent chunks.
#pragma once

#include <type_traits>

#include "cuda/prefill/intra_kernel.cuh"

namespace fastkda::prefill_cuda {

// Shared memory of one warp.
struct IntraWarpSmem {
  // L = G - anchor per row and key column (the anchors of intra.cuh: rows 0..7 the chunk start,
  // rows 8..15 row 7), 16-byte chunk c of row r at c ^ (r & 1): the column-owner stores (lane l:
  // chunk l) and the fragment loads (rows 2 q, 2 q + 1 and t = 0..3 per quarter warp: chunks
  // 8 i + 2 t + h) are conflict-free.
  float L[kC][kK];
  float p7[kK];          // 2^G_7 per key column (the first anchor block's ko = kd 2^G_7)
  float nmat[kC][kLdN];  // N = strictly_lower(diag(beta) A')
  float aqk[kC][kC];     // A_qk (tf32-rounded), copied to the record
  float beta[kC];        // activated beta (0 past the sequence end)
};
// Warps (independent chunks) per CTA, and CTAs per SM: one-warp CTAs, 12 per SM (168 registers:
// 12 warps per SM as before). A warp's slot is refilled as soon as its chunk is done, not when the
// slowest of its CTA's warps is. Session 23, against 3 CTAs of 4 warps (7 interleaved rounds in
// two A/B calls, bench/results/2026-11-30_s23): H64 fixed -1.1 %, the varlen rows -0.3 to -0.6 %.
constexpr int kIntraWarps = 1;
struct IntraWarpPlan {
  IntraWarpSmem w[kIntraWarps];
};
constexpr int kIntraWarpCtasPerSm = 12;
static_assert(sizeof(IntraWarpSmem) % 16 == 0, "16-byte aligned per-warp buffers");
static_assert((sizeof(IntraWarpPlan) + 1024) * kIntraWarpCtasPerSm <= 228 * 1024,
              "warp intra kernels: CTAs per SM");

__device__ __forceinline__ float* intra_warp_l(IntraWarpSmem& sm, int row, int chunk) {
  return &sm.L[row][4 * (chunk ^ (row & 1))];
}
__device__ __forceinline__ float bf16_of(const uint4& u, int j) {  // element j of 8 packed bf16
  const uint32_t w = j < 2 ? u.x : j < 4 ? u.y : j < 6 ? u.z : u.w;
  return j % 2 ? bf16_hi(w) : bf16_lo(w);
}

// The products of the unbounded gates (softplus, pre-gated): a token's decay may reach 2^-128, so
// an 8-row block's column factor 2^(anchor - G) can overflow and the two-anchor split of the
// bounded gate does not hold. Instead every pair (r, s), s < r, splits at an anchor a between
// them, s <= a < r: 2^(G_r - G_s) = 2^(G_r - G_a) 2^(G_a - G_s), both factors <= 1, so no
// operand overflows, clamps or needs an exact recomputation, and row r reads no later token.
// The anchors are those of a binary split of the chunk: level 1 splits rows 0..15 at row 7
// (the bounded gate's off-diagonal block), level 2 each 8-row block at its row 3, level 3 each
// 4-row block at its row 1, level 4 each row pair at its first row, so each pair has one level
// whose block holds both tokens, r in its lower half, s in its upper half. Lane (g, t) forms
// the operands of its own tokens g and g + 8 (as the bounded products): at each level a token
// is either lower (row factor 2^(G - G_a)) or upper (column factor 2^(G_a - G)), so one factor
// f per token and level, and kn f is both its A row of A' and its B column: the tile's entries
// that do not pair a lower row with an upper column of one block are discarded. Per k step: one
// MMA for level 1 (A rows: k^ and q^ of tokens 8..15, B columns tokens 0..7) and two per level
// 2..4 (tokens 0..7, then 8..15; A rows 0..7 k^, 8..15 q^ of the same tokens): 7 MMAs against
// the bounded gate's 6. A_qk's diagonal is q^ . k^ (sqk, exact bf16 products). L: G - anchor
// as the gate scan stored it (rows 0..7 from the chunk start, rows 8..15 from row 7), so every
// difference below is within one 8-row block.
// kRoll: the k steps as a loop over the four 32-column pieces, the lane's q and k pieces (rows
// g, g + 8, columns 32 i + 8 t .. + 7) loaded again per piece (L1 hits: the row norms read them
// just before). Fully unrolled (the streamed kernel, from qv / kv), the chunk's straight-line code
// is ~3300 instructions, and 25 % of the grid kernel's stall samples were "no instruction"
// (Nsight Compute): rolled, the grid kernel takes 321 us instead of 341 at H96 T8192 softplus.
// The streamed kernel measured slower rolled (its plans' retire tiles fitted to it unrolled).
template <bool kRoll>
__device__ __forceinline__ void intra_warp_hier(const PrefillArgs& a, IntraWarpSmem& sm,
                                                int64_t tok0, int h, int nvalid,
                                                const uint4 (&qv_all)[2][4],
                                                const uint4 (&kv_all)[2][4], const float (&kb)[2],
                                                const float (&qb)[2], const float (&rq)[2],
                                                const float (&rk)[2], const float (&sqk)[2]) {
  using device::ex2_approx;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // The lane's role per level (the same for its two tokens at levels 2..4): +1 lower, -1 upper,
  // and the anchors (rows of block 0; block 1 adds 8).
  const float s2 = g & 4 ? 1.0f : -1.0f, s3 = g & 2 ? 1.0f : -1.0f;
  const int a3 = (g & 4) | 1, a4 = g & 6;
  float d1[4] = {}, d2[2][4] = {}, d3[2][4] = {}, d4[2][4] = {};  // [token block][fragment]
  // The four k steps of piece i (columns 32 i .. 32 i + 31; the lane's q and k of them).
  auto piece = [&](int i, const uint4 (&qv)[2], const uint4 (&kv)[2]) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {  // columns 32 i + 8 t + 4 hh .. + 3: k steps 4 i + 2 hh, + 1
      const int chunk = 8 * i + 2 * t + hh;
      auto row = [&](int r, float(&o)[4]) {
        const float4 v = *reinterpret_cast<const float4*>(intra_warp_l(sm, r, chunk));
        o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
      };
      float own[2][4], l7[4], l2[2][4], l3[2][4], l4[2][4];  // L of the rows the factors need
      row(kHalf - 1, l7);
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        row(g + kHalf * rr, own[rr]);
        row(3 + kHalf * rr, l2[rr]);
        row(a3 + kHalf * rr, l3[rr]);
        row(a4 + kHalf * rr, l4[rr]);
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        uint32_t a1[4], b1[2], x[3][2][4];  // level 1; levels 2..4 per token block (A; B = k^)
#pragma unroll
        for (int p = 0; p < 2; ++p) {  // k slot t + 4 p: column 32 i + 8 t + 4 hh + 2 m + p
          const int jj = 2 * m + p, j = 4 * hh + jj;
          float kn[2], qn[2];
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            kn[rr] = bf16_of(kv[rr], j) * kb[rr];
            qn[rr] = bf16_of(qv[rr], j) * qb[rr];
          }
          const float f0 = ex2_approx(l7[jj] - own[0][jj]);  // 2^(G_7 - G_g): column, level 1
          const float f1 = ex2_approx(own[1][jj]);            // 2^(G_(g+8) - G_7): row
          a1[2 * p] = __float_as_uint(kn[1] * f1);
          a1[2 * p + 1] = __float_as_uint(qn[1] * f1);
          b1[p] = __float_as_uint(kn[0] * f0);
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const float d = own[rr][jj];
            // Level 4 of an upper (even) token: its own row, 2^0 = 1.
            const float f[3] = {ex2_approx(s2 * (d - l2[rr][jj])),
                                ex2_approx(s3 * (d - l3[rr][jj])), ex2_approx(d - l4[rr][jj])};
#pragma unroll
            for (int lv = 0; lv < 3; ++lv) {
              x[lv][rr][2 * p] = __float_as_uint(kn[rr] * f[lv]);
              x[lv][rr][2 * p + 1] = __float_as_uint(qn[rr] * f[lv]);
            }
          }
        }
        device::mma_m16n8k8_tf32(d1, a1, b1[0], b1[1]);
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          device::mma_m16n8k8_tf32(d2[rr], x[0][rr], x[0][rr][0], x[0][rr][2]);
          device::mma_m16n8k8_tf32(d3[rr], x[1][rr], x[1][rr][0], x[1][rr][2]);
          device::mma_m16n8k8_tf32(d4[rr], x[2][rr], x[2][rr][0], x[2][rr][2]);
        }
      }
    }
  };
  if constexpr (kRoll) {
    const uint16_t* qp[2];
    const uint16_t* kp[2];
    bool valid[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = g + kHalf * rr;
      valid[rr] = row < nvalid;
      qp[rr] = a.q + (tok0 + row) * a.q_stride + int64_t(h) * kK + 8 * t;
      kp[rr] = a.k + (tok0 + row) * a.k_stride + int64_t(h) * kK + 8 * t;
    }
#pragma unroll 1
    for (int i = 0; i < 4; ++i) {
      uint4 qv[2], kv[2];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        qv[rr] = valid[rr] ? *reinterpret_cast<const uint4*>(qp[rr] + 32 * i) : zero;
        kv[rr] = valid[rr] ? *reinterpret_cast<const uint4*>(kp[rr] + 32 * i) : zero;
      }
      piece(i, qv, kv);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 qv[2] = {qv_all[0][i], qv_all[1][i]}, kv[2] = {kv_all[0][i], kv_all[1][i]};
      piece(i, qv, kv);
    }
  }
  // Lane (g, t): fragments e = 0, 1 are A'[8 h + g][8 h + 2 t + e] of token block h, 2 + e the
  // A_qk entries; a pair's level is the highest bit in which its local rows differ.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g + kHalf * h;
    const float b = sm.beta[row];
    const float diag = tf32_operand(rq[h] * rk[h] * sqk[h]);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 2 * t + e, x = g ^ c;
      const float ak = x & 4 ? d2[h][e] : x & 2 ? d3[h][e] : d4[h][e];
      const float aq = x & 4 ? d2[h][2 + e] : x & 2 ? d3[h][2 + e] : d4[h][2 + e];
      sm.nmat[row][kHalf * h + c] = c < g ? b * ak : 0.0f;
      sm.aqk[row][kHalf * h + c] = c < g ? tf32_operand(aq) : c == g ? diag : 0.0f;
      // The row's other block: above the diagonal (h = 0), or level 1's (h = 1).
      sm.nmat[row][kHalf * (1 - h) + c] = h ? b * d1[e] : 0.0f;
      sm.aqk[row][kHalf * (1 - h) + c] = h ? tf32_operand(d1[2 + e]) : 0.0f;
    }
  }
}

// One chunk (tok0 .. tok0 + nvalid - 1 of value head hv) by this warp: the record (Tb, A_qk, rq,
// rk) to ws. kBounded: a.gate == Gate::kBounded (two anchors, see above); otherwise the softplus
// or pre-gated gate, whose decays may span far more than kMaxAnchorSpan inside an 8-row block:
// the products then split each pair at an anchor between its two tokens (intra_warp_hier above;
// kRoll: its k steps as a loop, the grid kernel's form).
template <bool kBounded, bool kRoll>
__device__ __forceinline__ void intra_warp_chunk(const PrefillArgs& a, IntraWarpSmem& sm,
                                                 float* ws, int hv, int64_t tok0, int nvalid) {
  using device::ex2_approx;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int h = hv / a.group;
  // Loads: q and k by fragments (lane: rows g, g + 8, columns 32 i + 8 t .. + 7), then the gate by
  // columns (lane: 4 columns x 16 rows, raw); rows past the end are zeros.
  uint4 qv[2][4], kv[2][4];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = g + kHalf * rr;
    const bool valid = row < nvalid;
    const uint16_t* qp = a.q + (tok0 + row) * a.q_stride + int64_t(h) * kK + 8 * t;
    const uint16_t* kp = a.k + (tok0 + row) * a.k_stride + int64_t(h) * kK + 8 * t;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      qv[rr][i] = valid ? *reinterpret_cast<const uint4*>(qp + 32 * i) : make_uint4(0u, 0u, 0u, 0u);
      kv[rr][i] = valid ? *reinterpret_cast<const uint4*>(kp + 32 * i) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  // bf16 gate: the 4 columns of each row in a uint2, loaded here; f32: loaded in the row loop.
  const int64_t gofs = tok0 * a.g_stride + int64_t(hv) * kK + 4 * lane;
  uint2 g16[kC];
  if (!a.g_f32) {
    const uint16_t* gp = static_cast<const uint16_t*>(a.g) + gofs;
#pragma unroll
    for (int r = 0; r < kC; ++r, gp += a.g_stride)  // a pointer step per row: 2 adds
      g16[r] = r < nvalid ? *reinterpret_cast<const uint2*>(gp) : make_uint2(0u, 0u);
  }
  const float beta_raw = lane < kC ? load_beta_raw(a, tok0, lane, nvalid, hv) : 0.0f;
  float bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (a.dt_bias) {  // scalar loads: dt_bias has no alignment requirement beyond its f32 type
#pragma unroll
    for (int c = 0; c < 4; ++c) bias[c] = a.dt_bias[int64_t(hv) * kK + 4 * lane + c];
  }
  const float A = gate_A(a, hv);

  // The gate's cumulative log2 decays per anchor block (gate_rows' activation per element, a
  // running sum per column restarted at each block), row by row to shared memory.
  __syncwarp();  // the previous chunk's reads of sm are done
  float G[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // set by each anchor block's first row
  auto store_row = [&](int r) {
    *reinterpret_cast<float4*>(intra_warp_l(sm, r, lane)) = make_float4(G[0], G[1], G[2], G[3]);
    if (kBounded && r == kHalf - 1)
      *reinterpret_cast<float4*>(&sm.p7[4 * lane]) =
          make_float4(ex2_approx(G[0]), ex2_approx(G[1]), ex2_approx(G[2]), ex2_approx(G[3]));
  };
  // The row's 4 raw gate values of the lane (the bf16 ones loaded above).
  auto gate_row = [&](int r, float (&xs)[4]) {
    if (a.g_f32) {
      const float4 v = r < nvalid ? *reinterpret_cast<const float4*>(
                                        static_cast<const float*>(a.g) + gofs + r * a.g_stride)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      xs[0] = v.x, xs[1] = v.y, xs[2] = v.z, xs[3] = v.w;
    } else {
      xs[0] = bf16_lo(g16[r].x), xs[1] = bf16_hi(g16[r].x);
      xs[2] = bf16_lo(g16[r].y), xs[3] = bf16_hi(g16[r].y);
    }
  };
  if constexpr (!kBounded) {
    // gate_rows' per-element decays (the same bits), one loop per gate.
    auto scan = [&](auto&& decay) {
      auto rows = [&](auto whole) {  // whole: a full chunk (no row past the end)
#pragma unroll
        for (int r = 0; r < kC; ++r) {
          float xs[4];
          gate_row(r, xs);
#pragma unroll
          for (int cc = 0; cc < 4; ++cc)
            G[cc] = (r % kHalf == 0 ? 0.0f : G[cc]) +
                    (whole || r < nvalid ? decay(xs[cc], cc) : 0.0f);
          store_row(r);
        }
      };
      if (nvalid == kC)
        rows(std::true_type{});
      else
        rows(std::false_type{});
    };
    if (a.gate == Gate::kSoftplus) {
      float bl[4];
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) bl[cc] = bias[cc] * kLog2e;
      scan([&](float x, int cc) { return softplus_log2_decay(x, bl[cc], A); });
    } else {
      scan([](float x, int) { return pregated_log2_decay(x); });
    }
  } else if (!a.g_f32 && nvalid == kC) {
    // A whole chunk of a bf16 gate (the common case): gate_rows' bounded arithmetic without its
    // row selects and the f32 loads.
    const float c = -A * kLog2e, f = a.lower_bound_log2;
    float bc[4];
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) bc[cc] = bias[cc] * c;
#pragma unroll
    for (int r = 0; r < kC; ++r) {
      const float xs[4] = {bf16_lo(g16[r].x), bf16_hi(g16[r].x), bf16_lo(g16[r].y),
                           bf16_hi(g16[r].y)};
#pragma unroll
      for (int cc = 0; cc < 4; ++cc)
        G[cc] = fmaf(bounded_log2_decay(xs[cc], c, bc[cc]), f, r % kHalf == 0 ? 0.0f : G[cc]);
      store_row(r);
    }
  } else {
#pragma unroll
    for (int r = 0; r < kC; ++r) {
      float xs[4];
      gate_row(r, xs);
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        const float x1[1] = {xs[cc]};
        float al2[1];
        const float f = gate_rows<true, 1>(a, x1, bias[cc], A, nvalid - r, al2);
        G[cc] = fmaf(al2[0], f, r % kHalf == 0 ? 0.0f : G[cc]);
      }
      store_row(r);
    }
  }
  if (lane < kC) sm.beta[lane] = lane < nvalid ? beta_activation(a, beta_raw) : 0.0f;

  // Row norms of rows g, g + 8 on the tensor cores, exactly (bf16 products, f32 sums): in
  // mma.m16n8k8 the A rows g, g + 8 are two column pairs (registers) of a 16-byte piece of row g
  // (or g + 8) of q (or k) as loaded, B token g the first of them (D[g][g] sums its squares) or
  // the second (D[g + 8][g], another accumulator: each product's other row holds cross terms).
  // Both are in lane (g, g / 2). (m16n8k16 would need its B pairs in consecutive registers: a
  // move per register.)
  // The unbounded gates add q . k of each row (A_qk's diagonal, intra_warp_hier): A from q, B
  // from k.
  constexpr int kGrams = kBounded ? 2 : 3;
  float gram[2][kGrams][2][4] = {};  // [rows g / g + 8][q q / k k / q k][first / second pairs]
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
#pragma unroll
      for (int x = 0; x < kGrams; ++x) {
        const uint4& u = x == 1 ? kv[rr][i] : qv[rr][i];  // A
        const uint4& w = x == 0 ? qv[rr][i] : kv[rr][i];  // B
        device::mma_m16n8k8_bf16(gram[rr][x][0], u.x, u.y, w.x);
        device::mma_m16n8k8_bf16(gram[rr][x][0], u.z, u.w, w.z);
        device::mma_m16n8k8_bf16(gram[rr][x][1], u.x, u.y, w.y);
        device::mma_m16n8k8_bf16(gram[rr][x][1], u.z, u.w, w.w);
      }
    }
  float ssq[2], ssk[2], sqk[2] = {0.0f, 0.0f};
  const int src = 4 * g + (g >> 1);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float d[kGrams];
#pragma unroll
    for (int x = 0; x < kGrams; ++x)
      d[x] = g & 1 ? gram[rr][x][0][1] + gram[rr][x][1][3] : gram[rr][x][0][0] + gram[rr][x][1][2];
    ssq[rr] = __shfl_sync(0xffffffffu, d[0], src);
    ssk[rr] = __shfl_sync(0xffffffffu, d[1], src);
    if constexpr (!kBounded) sqk[rr] = __shfl_sync(0xffffffffu, d[2], src);
  }
  float rq[2], rk[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    rq[rr] = inv_row_norm(a, ssq[rr]) * a.scale;
    rk[rr] = inv_row_norm(a, ssk[rr]);
  }
  __syncwarp();  // L and beta stored

  // The products: per k step, the lane's two key columns of rows g, g + 8 as truncated tf32
  // operands carrying 1 + kTruncBias through the row norms (anchored_block's arithmetic). (Not
  // the raw bf16 q, k with the norms and the compensation on the results: a bf16 value times 2^L
  // near 1 is exact in tf32 or lies just below a short-mantissa value, so its truncation error is
  // not what the compensation assumes; bench/precision_intra_operands.py, and on the GPU session
  // 19's seeds: the collinear case's final state 9.7e-5 -> 2.0e-4.)
  float kb[2], qb[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    kb[rr] = rk[rr] * (1.0f + kTruncBias);
    qb[rr] = rq[rr] * (1.0f + kTruncBias);
  }
  if constexpr (kBounded) {
    float kd0[4] = {}, ko0[4] = {}, kd1[4] = {};  // A' tiles: n-tile 0 diagonal / off-diagonal, 1
    float qd0[4] = {}, qo0[4] = {}, qd1[4] = {};  // A_qk tiles
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {  // columns 32 i + 8 t + 4 hh .. + 3: k steps 4 i + 2 hh, + 1
        const int chunk = 8 * i + 2 * t + hh;
        const float4 l0 = *reinterpret_cast<const float4*>(intra_warp_l(sm, g, chunk));
        const float4 l1 = *reinterpret_cast<const float4*>(intra_warp_l(sm, g + kHalf, chunk));
        const float4 q7 = *reinterpret_cast<const float4*>(&sm.p7[4 * chunk]);
        const float Lr[2][4] = {{l0.x, l0.y, l0.z, l0.w}, {l1.x, l1.y, l1.z, l1.w}};
        const float P7[4] = {q7.x, q7.y, q7.z, q7.w};
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          uint32_t akt[4], aqt[4], bkd[2][2], bko[2];
#pragma unroll
          for (int p = 0; p < 2; ++p) {  // k slot t + 4 p: column 32 i + 8 t + 4 hh + 2 m + p
            const int jj = 2 * m + p, j = 4 * hh + jj;
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
              const float kn = bf16_of(kv[rr][i], j) * kb[rr], qn = bf16_of(qv[rr][i], j) * qb[rr];
              const float e = ex2_approx(Lr[rr][jj]);  // <= 1
              akt[2 * p + rr] = __float_as_uint(kn * e);
              aqt[2 * p + rr] = __float_as_uint(qn * e);
              const float d = kn * ex2_approx(-Lr[rr][jj]);  // <= 2^58 k^ (bounded_spans_fit)
              bkd[rr][p] = __float_as_uint(d);
              if (rr == 0) bko[p] = __float_as_uint(d * P7[jj]);  // k^ 2^(G_7 - G)
            }
          }
          device::mma_m16n8k8_tf32(kd0, akt, bkd[0][0], bkd[0][1]);
          device::mma_m16n8k8_tf32(ko0, akt, bko[0], bko[1]);
          device::mma_m16n8k8_tf32(kd1, akt, bkd[1][0], bkd[1][1]);
          device::mma_m16n8k8_tf32(qd0, aqt, bkd[0][0], bkd[0][1]);
          device::mma_m16n8k8_tf32(qo0, aqt, bko[0], bko[1]);
          device::mma_m16n8k8_tf32(qd1, aqt, bkd[1][0], bkd[1][1]);
        }
      }
    // Rows g (f < 2) and g + 8 (f >= 2), columns 2 t + f % 2 (n-tile 0) and 8 + 2 t + f % 2
    // (n-tile 1); the block below the diagonal (rows 8..15, columns 0..7) from the off-diagonal
    // tiles.
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int row = g + (f >= 2 ? kHalf : 0), col = 2 * t + (f & 1);
      const float a0 = f >= 2 ? ko0[f] : kd0[f], q0 = f >= 2 ? qo0[f] : qd0[f];
      const float b = sm.beta[row];
      sm.nmat[row][col] = col < row ? b * a0 : 0.0f;
      sm.aqk[row][col] = col <= row ? tf32_operand(q0) : 0.0f;
      sm.nmat[row][kHalf + col] = kHalf + col < row ? b * kd1[f] : 0.0f;
      sm.aqk[row][kHalf + col] = kHalf + col <= row ? tf32_operand(qd1[f]) : 0.0f;
    }
  } else {
    intra_warp_hier<kRoll>(a, sm, tok0, h, nvalid, qv, kv, kb, qb, rq, rk, sqk);
  }
  __syncwarp();
  // The record: [Tb kC x kC][A_qk kC x kC][rq kC][rk kC].
#pragma unroll
  for (int j = 0; j < kC * kC / 4 / 32; ++j) {
    const int e = 4 * (lane + 32 * j);
    *reinterpret_cast<float4*>(ws + kC * kC + e) =
        *reinterpret_cast<const float4*>(&sm.aqk[e / kC][e % kC]);
  }
  if (t == 0) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      ws[2 * kC * kC + g + kHalf * rr] = rq[rr];
      ws[2 * kC * kC + kC + g + kHalf * rr] = rk[rr];
    }
  }
  if (lane < kC) invert_unit_lower(sm.nmat, sm.beta, lane, ws);
}

// Grid: (ceil(chunk slots / kIntraWarps), HV); warp w of CTA x takes chunk slot kIntraWarps x + w
// (slot_chunk). kBounded: a.gate == Gate::kBounded (intra_warp_chunk).
template <bool kBounded>
__global__ void __launch_bounds__(32 * kIntraWarps, kIntraWarpCtasPerSm)
    intra_warp_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<IntraWarpPlan*>(smem_bytes);
  // The scan kernel may start on SMs this grid no longer fills (its CTAs set up, then wait for
  // this grid's completion before reading the workspace: griddep_wait in prefill_kernel).
  device::griddep_launch_dependents();
  const int warp = threadIdx.x >> 5;
  const int64_t slot = int64_t(blockIdx.x) * kIntraWarps + warp;
  const int hv = blockIdx.y;
  if (slot >= a.chunk_slots) return;
  int64_t tok0;
  int nvalid;
  slot_chunk(a, slot, tok0, nvalid);
  if (nvalid == 0) return;
  intra_warp_chunk<kBounded, true>(a, sm.w[warp], chunk_ws(a, slot, hv), hv, tok0, nvalid);
}

// One chunk of the streamed kernel, then its count: a __syncwarp orders the whole warp's record
// stores before lane 0's release (its fence stalls this warp alone). Inlined since session 31:
// out of line (sessions 18-30, when inlined it had spilled ~270 bytes per thread in the tile loop;
// now 0 at the same 168 registers) the chunk read PrefillArgs and q, k, g through generic
// pointers and the kernel kept a 72-byte stack frame.
template <bool kBounded>
__device__ __forceinline__ void intra_warp_streamed_chunk(const PrefillArgs& a, IntraWarpSmem& sm,
                                                       const IntraTile& x) {
  intra_warp_chunk<kBounded, false>(a, sm, chunk_ws(a, x.slot, x.hv), x.hv, x.tok0, x.nvalid);
  __syncwarp();
  if ((threadIdx.x & 31) == 0) device::red_release_add(&a.ready[x.counter], 1u);
}

// The streamed intra kernel (plan.h Plan::streamed): a persistent grid of kIntraWarpCtasPerSm
// one-warp CTAs per SM, started before the scan, whose warps take tiles in time order
// (intra_tile) from a counter in the workspace and count each chunk in its ready counter after
// its record (the scan's prepare waits on the counters instead of on this grid: wait_ready). Lane
// 0 claims the warp's next tile while it works on the current one. The scan grid (one wave, fewer
// CTAs than SMs) starts once every CTA here has started, i.e. on the SMs whose intra CTAs have
// stopped: CTAs on SMs numbered >= a.keep_sms stop claiming once tile a.retire_tile has been
// claimed, the others ("keepers") run until the last tile. A CTA stops only while some keeper is
// running (the keepers count themselves before they claim), so every tile is claimed and
// completed without waiting on the scan: no deadlock whatever the placement.
template <bool kBounded>
__global__ void __launch_bounds__(32 * kIntraWarps, kIntraWarpCtasPerSm)
    intra_warp_streamed_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<IntraWarpPlan*>(smem_bytes);
  device::griddep_launch_dependents();  // the scan grid starts once every CTA here has started
  StreamQueue& queue = *a.queue;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool keeper = device::sm_id() < uint32_t(a.keep_sms);
  auto claim = [&] { return claim_tile(a, queue, keeper); };  // lane 0
  int64_t tile = -1;
  if (lane == 0) {
    if (keeper) keeper_started(queue);
    tile = claim();
  }
  tile = __shfl_sync(0xffffffffu, tile, 0);
#pragma unroll 1
  while (tile >= 0) {
    const int64_t next = lane == 0 ? claim() : 0;  // its latency overlaps the chunk
    const IntraTile x = intra_tile(a, tile);
    if (x.nvalid > 0) intra_warp_streamed_chunk<kBounded>(a, sm.w[warp], x);
    tile = __shfl_sync(0xffffffffu, next, 0);
  }
}

}  // namespace fastkda::prefill_cuda
