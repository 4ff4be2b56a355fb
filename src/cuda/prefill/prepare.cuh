// The prepare role of the prefill kernel (a group of 4 warps): for one chunk of kC tokens of one
// (sequence, value head), everything of DESIGN §2's chunked form that is parallel in T.
//
//   raw inputs (smem, cp.async)  ->  gate_scan:        G (cumulative log2 decay), 1/||q||, 1/||k||,
//                                                      beta, per-row anchor spans
//                                ->  make_operands:    tf32 operands of A' and A_qk, qs, ke, decay
//                                ->  intra_products:   N = strictly_lower(diag(beta) A'), A_qk
//                                                      (tf32 MMA, anchored, see below)
//                                ->  exact_rows:       rows whose anchored form would overflow
//                                ->  solve_w_u:        W, U by fp32 forward substitution
//
// Anchoring (never materialise 2^+G): rows 0..7 of a chunk are anchored at the chunk start,
// rows 8..15 at row 7. Pairwise factors 2^(G_r - G_s) (s <= r) are split as
// 2^(G_r - anchor) * 2^(anchor - G_s); the anchor is a row <= r, so row r never depends on a later
// row (causal bit for bit). The off-diagonal block (r >= 8, s < 8) has both factors <= 1. In the
// diagonal blocks the column factor is >= 1; it is clamped at 2^kMaxAnchorSpan, and rows whose own
// span exceeds that (strong gates, e.g. softplus at -1000) are recomputed exactly pair by pair.
#pragma once

#include <cuda_bf16.h>

#include "cuda/device/ptx.cuh"
#include "cuda/prefill/args.h"
#include "cuda/prefill/config.h"

namespace fastkda::prefill_cuda {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(uint32_t(h) << 16);
}
__device__ __forceinline__ float load_f32_or_bf16(const void* p, bool is_f32, int64_t i) {
  return is_f32 ? static_cast<const float*>(p)[i]
                : bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
}

// Log2-decay of one gate entry (a * log2 e, <= 0). A = exp(A_log[h]) or 1.
__device__ __forceinline__ float gate_log2(const PrefillArgs& a, float x, float bias, float A) {
  using device::ex2_approx;
  switch (a.gate) {
    case Gate::kBounded: {
      const float z = A * (x + bias);
      return a.lower_bound_log2 * device::rcp_approx(1.0f + ex2_approx(-z * kLog2e));
    }
    case Gate::kSoftplus: {
      const float z = x + bias;
      const float sp_log2 =
          z > 20.0f ? z * kLog2e : device::lg2_approx(1.0f + ex2_approx(z * kLog2e));
      return -A * sp_log2;
    }
    default:
      return x * kLog2e;
  }
}

__device__ __forceinline__ float beta_activation(const PrefillArgs& a, float b) {
  if (a.beta_act == BetaAct::kGiven) return b;
  const float s = device::rcp_approx(1.0f + device::ex2_approx(-b * kLog2e));
  return a.beta_act == BetaAct::kTwoSigmoid ? 2.0f * s : s;
}

// Issues the cp.async copies of chunk `chunk` (rows past the sequence end zero-filled).
template <int kVs>
__device__ __forceinline__ void load_raw(const PrefillArgs& a, RawStage<kVs>& r, int64_t tok0,
                                         int nvalid, int h, int hv, int v0, int tid) {
  for (int s = tid; s < kC * (kK / 8); s += kPrepThreads) {
    const int row = s / (kK / 8), col = (s % (kK / 8)) * 8;
    const bool ok = row < nvalid;
    const int64_t tok = tok0 + (ok ? row : 0);
    device::cp_async_cg_16(&r.q[row][col], a.q + tok * a.q_stride + int64_t(h) * kK + col,
                           ok ? 16 : 0);
    device::cp_async_cg_16(&r.k[row][col], a.k + tok * a.k_stride + int64_t(h) * kK + col,
                           ok ? 16 : 0);
  }
  for (int s = tid; s < kC * (kVs / 8); s += kPrepThreads) {
    const int row = s / (kVs / 8), col = (s % (kVs / 8)) * 8;
    const bool ok = row < nvalid;
    const int64_t tok = tok0 + (ok ? row : 0);
    device::cp_async_cg_16(&r.v[row][col], a.v + tok * a.v_stride + int64_t(hv) * kV + v0 + col,
                           ok ? 16 : 0);
  }
  const int per_row = a.g_f32 ? kK / 4 : kK / 8;  // 16-byte segments per gate row
  for (int s = tid; s < kC * per_row; s += kPrepThreads) {
    const int row = s / per_row, seg = s % per_row;
    const bool ok = row < nvalid;
    const int64_t tok = tok0 + (ok ? row : 0);
    const char* src = static_cast<const char*>(a.g) +
                      (tok * a.g_stride + int64_t(hv) * kK) * (a.g_f32 ? 4 : 2) + seg * 16;
    char* dst = reinterpret_cast<char*>(&r.g[0][0]) + row * kK * (a.g_f32 ? 4 : 2) + seg * 16;
    device::cp_async_cg_16(dst, src, ok ? 16 : 0);
  }
}

// Raw beta of row `row` of the chunk starting at tok0 (0 past the end).
__device__ __forceinline__ float load_beta_raw(const PrefillArgs& a, int64_t tok0, int row,
                                               int nvalid, int hv) {
  if (row >= nvalid) return 0.0f;
  return load_f32_or_bf16(a.beta, a.beta_f32, (tok0 + row) * a.beta_stride + hv);
}

// Log2-decays of one key column for the kC rows of a chunk (rows >= nvalid: 0). The mode switch
// sits outside the row loop so the rows are independent straight-line code (ILP).
__device__ __forceinline__ void gate_rows(const PrefillArgs& a, const float (&x)[kC], float bias,
                                          float A, int nvalid, float (&al2)[kC]) {
  using device::ex2_approx;
  switch (a.gate) {
    case Gate::kBounded:
#pragma unroll
      for (int row = 0; row < kC; ++row)
        al2[row] = a.lower_bound_log2 *
                   device::rcp_approx(1.0f + ex2_approx(-A * kLog2e * (x[row] + bias)));
      break;
    case Gate::kSoftplus:
#pragma unroll
      for (int row = 0; row < kC; ++row) {
        const float z = (x[row] + bias) * kLog2e;
        al2[row] = -A * (z > 20.0f * kLog2e ? z : device::lg2_approx(1.0f + ex2_approx(z)));
      }
      break;
    default:
#pragma unroll
      for (int row = 0; row < kC; ++row) al2[row] = x[row] * kLog2e;
  }
#pragma unroll
  for (int row = 0; row < kC; ++row) al2[row] = row < nvalid ? al2[row] : 0.0f;
}

// Thread i (key column i): the gate of its column for all kC rows and the cumulative sum G (log2),
// kept in registers (Gr) and in pp.G; per-row anchor spans reduced over the warp's 32 columns.
// Warps also compute the row norms of q and k; threads 0..kC-1 the activated beta.
template <int kVs>
__device__ __forceinline__ void gate_scan(const PrefillArgs& a, PrepPrivate& pp,
                                          const RawStage<kVs>& r, int nvalid, float bias, float A,
                                          float beta_raw, int i, float (&Gr)[kC]) {
  const int lane = i & 31, warp = i >> 5;
  const uint16_t* g16 = reinterpret_cast<const uint16_t*>(&r.g[0][0]);
  float x[kC];
#pragma unroll
  for (int row = 0; row < kC; ++row)
    x[row] = a.g_f32 ? r.g[row][i] : bf16_bits_to_f32(g16[row * kK + i]);
  float al2[kC];
  gate_rows(a, x, bias, A, nvalid, al2);
  float G = 0.0f;
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    G += al2[row];
    Gr[row] = G;
    pp.G[row][i] = G;
  }
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    const float span = (row < kHalf ? 0.0f : Gr[kHalf - 1]) - Gr[row];  // >= 0 for valid gates
    const uint32_t m = device::redux_max_u32(__float_as_uint(span));
    if (lane == 0) pp.span[warp][row] = m;
  }
  // Row norms: 2 * kC rows (q then k) over the 4 warps; lane reads 4 columns.
  constexpr int kRows = 2 * kC / kPrepWarps;
  float ss[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int idx = warp * kRows + j;
    const uint16_t* row = idx < kC ? r.q[idx] : r.k[idx - kC];
    const uint2 u = *reinterpret_cast<const uint2*>(row + 4 * lane);
    const float x0 = bf16_bits_to_f32(u.x & 0xffff), x1 = bf16_bits_to_f32(u.x >> 16);
    const float x2 = bf16_bits_to_f32(u.y & 0xffff), x3 = bf16_bits_to_f32(u.y >> 16);
    ss[j] = x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int j = 0; j < kRows; ++j) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int idx = warp * kRows + j;
      const float rn = a.l2norm ? device::rsqrt_approx(ss[j] + 1e-6f) : 1.0f;
      if (idx < kC)
        pp.rq[idx] = rn;
      else
        pp.rk[idx - kC] = rn;
    }
  }
  if (i < kC) pp.beta[i] = i < nvalid ? beta_activation(a, beta_raw) : 0.0f;
}

// Thread i (key column i): the anchored tf32 operands of A' / A_qk (kt, qt, kd, ko), the scan
// operands qs, ke and decay, kw = k^ . 2^G (f32, right-hand side of the W solve) and, for i < kVs,
// its column of v (right-hand side of the U solve), so the raw stage is free after this.
template <int kVs>
__device__ __forceinline__ void make_operands(const PrefillArgs& a, PrepPrivate& pp,
                                              const RawStage<kVs>& r, ScanStage<kVs>& sb, int i,
                                              const float (&Gr)[kC], float (&kw)[kC],
                                              float (&vcol)[kC]) {
  using device::ex2_approx;
  using device::round_tf32;
  const float g7 = Gr[kHalf - 1], g15 = Gr[kC - 1];
  const float d7 = ex2_approx(g7), d15_7 = ex2_approx(g15 - g7);
  float kn[kC], qn[kC];
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    kn[row] = bf16_bits_to_f32(r.k[row][i]) * pp.rk[row];
    qn[row] = bf16_bits_to_f32(r.q[row][i]) * pp.rq[row] * a.scale;
    vcol[row] = i < kVs ? bf16_bits_to_f32(r.v[row][i < kVs ? i : 0]) : 0.0f;
  }
  float ke[kC];
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    const float anchor = row < kHalf ? 0.0f : g7;
    const float e = ex2_approx(Gr[row] - anchor);  // <= 1
    const float e0 = row < kHalf ? e : e * d7;     // 2^G_row, a product of factors <= 1
    pp.kt[row][i] = round_tf32(kn[row] * e);
    pp.qt[row][i] = round_tf32(qn[row] * e);
    kw[row] = kn[row] * e0;
    sb.qs[row][i] = round_tf32(qn[row] * e0);
    pp.kd[row][i] = round_tf32(kn[row] * ex2_approx(fminf(anchor - Gr[row], kMaxAnchorSpan)));
    if (row < kHalf) {
      const float o = kn[row] * ex2_approx(g7 - Gr[row]);  // k^ . 2^(G_7 - G), factor <= 1
      pp.ko[row][i] = round_tf32(o);
      ke[row] = round_tf32(o * d15_7);
    } else {
      ke[row] = round_tf32(kn[row] * ex2_approx(g15 - Gr[row]));
    }
  }
#pragma unroll
  for (int row = 0; row < kC; row += 4)
    *reinterpret_cast<float4*>(&sb.ke[i][row]) =
        make_float4(ke[row], ke[row + 1], ke[row + 2], ke[row + 3]);
  sb.decay[i] = ex2_approx(g15);
}

// Warp w: one 16 x 8 block of A' (w = 0, 1) or A_qk (w = 2, 3), column tile w % 2, by tf32 MMA over
// the 128 key columns. Column tile 0 needs two column operands: kd (diagonal block, rows 0..7) and
// ko (off-diagonal block, rows 8..15).
template <int kVs>
__device__ __forceinline__ void intra_products(PrepPrivate& sm, ScanStage<kVs>& sb, int i) {
  const int lane = i & 31, warp = i >> 5;
  const int g = lane >> 2, t = lane & 3;
  const bool is_qk = warp >= 2;
  const int nt = warp & 1;
  const float(*X)[kLdPrep] = is_qk ? sm.qt : sm.kt;
  float acc0[2][4] = {}, acc1[2][4] = {};  // [even/odd k-step][fragment]: diag, off-diag
#pragma unroll
  for (int ks = 0; ks < kK / 8; ++ks) {
    const int c = 8 * ks + t;
    const uint32_t af[4] = {__float_as_uint(X[g][c]), __float_as_uint(X[g + 8][c]),
                            __float_as_uint(X[g][c + 4]), __float_as_uint(X[g + 8][c + 4])};
    const float* bd = sm.kd[8 * nt + g];
    device::mma_m16n8k8_tf32(acc0[ks & 1], af, __float_as_uint(bd[c]), __float_as_uint(bd[c + 4]));
    if (nt == 0) {
      const float* bo = sm.ko[g];
      device::mma_m16n8k8_tf32(acc1[ks & 1], af, __float_as_uint(bo[c]),
                               __float_as_uint(bo[c + 4]));
    }
  }
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
      sb.aqk[row][col] = col <= row ? device::round_tf32(val[f]) : 0.0f;
    else
      sm.nmat[row][col] = col < row ? sm.beta[row] * val[f] : 0.0f;
  }
}

// True when row `row` of the chunk needs the exact pairwise form (span > kMaxAnchorSpan).
__device__ __forceinline__ bool row_needs_exact(const PrepPrivate& sm, int row) {
  uint32_t m = 0;
#pragma unroll
  for (int w = 0; w < kPrepWarps; ++w) m = max(m, sm.span[w][row]);
  return m > __float_as_uint(kMaxAnchorSpan);
}

// Exact diagonal-block entries of A' and A_qk for rows flagged by row_needs_exact: pairs (row, s),
// s in the row's 8-row block and s <= row, dealt round-robin to the 4 warps; lanes split the key
// columns; fixed-order warp reduction (bitwise reproducible).
template <int kVs>
__device__ __forceinline__ void exact_rows(const PrefillArgs& a, PrepPrivate& sm,
                                           const RawStage<kVs>& r, ScanStage<kVs>& sb, int i) {
  const int lane = i & 31, warp = i >> 5;
  int pair = 0;
  for (int row = 0; row < kC; ++row) {
    if (!row_needs_exact(sm, row)) continue;
    for (int s = row < kHalf ? 0 : kHalf; s <= row; ++s, ++pair) {
      if (pair % kPrepWarps != warp) continue;
      float sk = 0.0f, sq = 0.0f;
#pragma unroll
      for (int j = 0; j < kK / 32; ++j) {
        const int col = lane + 32 * j;
        const float f = device::ex2_approx(sm.G[row][col] - sm.G[s][col]);
        const float ks = bf16_bits_to_f32(r.k[s][col]) * sm.rk[s] * f;
        sk += bf16_bits_to_f32(r.k[row][col]) * sm.rk[row] * ks;
        sq += bf16_bits_to_f32(r.q[row][col]) * sm.rq[row] * ks;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        sk += __shfl_xor_sync(0xffffffffu, sk, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
      }
      if (lane == 0) {
        if (s < row) sm.nmat[row][s] = sm.beta[row] * sk;
        sb.aqk[row][s] = device::round_tf32(a.scale * sq);
      }
    }
  }
}

// Forward substitution inside one 8-row block: x[r] += -sum_{s in [kR0, r)} N[r][s] x[s].
template <int kR0>
__device__ __forceinline__ void solve_block(const PrepPrivate& pp, float (&w)[kC], float (&u)[kC]) {
#pragma unroll
  for (int row = kR0; row < kR0 + kHalf; ++row) {
    float aw = 0.0f, au = 0.0f;
#pragma unroll
    for (int s = kR0; s < row; ++s) {
      const float n = pp.nmat[row][s];
      aw -= n * w[s];
      au -= n * u[s];
    }
    w[row] += aw;
    u[row] += au;
  }
}

// Thread i: column i of W = (I + N)^-1 diag(beta) kw and (i < kVs) of U = (I + N)^-1 diag(beta) v,
// by forward substitution in f32 (no inverse is formed; exact for near-collinear keys). Blocked:
// rows 0..7, then the update of rows 8..15 by rows 0..7 (independent FMAs), then rows 8..15.
template <int kVs>
__device__ __forceinline__ void solve_w_u(const PrepPrivate& pp, ScanStage<kVs>& sb, int i,
                                          const float (&kw)[kC], const float (&vcol)[kC]) {
  float w[kC], u[kC];
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    const float b = pp.beta[row];
    w[row] = b * kw[row];
    u[row] = b * vcol[row];
  }
  solve_block<0>(pp, w, u);
#pragma unroll
  for (int row = kHalf; row < kC; ++row) {
    float aw = 0.0f, au = 0.0f, aw2 = 0.0f, au2 = 0.0f;
#pragma unroll
    for (int s = 0; s < kHalf; s += 2) {
      const float2 n = *reinterpret_cast<const float2*>(&pp.nmat[row][s]);
      aw -= n.x * w[s];
      au -= n.x * u[s];
      aw2 -= n.y * w[s + 1];
      au2 -= n.y * u[s + 1];
    }
    w[row] += aw + aw2;
    u[row] += au + au2;
  }
  solve_block<kHalf>(pp, w, u);
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    sb.w[row][i] = device::round_tf32(-w[row]);
    if (i < kVs) sb.u[row][i] = u[row];
  }
}

}  // namespace fastkda::prefill_cuda
