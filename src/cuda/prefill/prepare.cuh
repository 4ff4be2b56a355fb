// The prepare role of the scan kernel (groups of 4 warps, prefill_kernel.cuh): for one chunk of kC
// tokens, the light elementwise part of DESIGN §2's chunked form and the two products with the
// intra kernel's Tb = (I + N)^-1 diag(beta) (workspace):
//
//   raw q, k, v, g, Tb, A_qk (smem, cp.async)  ->  G, row norms          (common.cuh gate_scan)
//                                              ->  scan_operands: qs = scale q^ . 2^G,
//                                                  ke = (k^ . 2^(G_C - G))^T, decay = 2^G_C, A_qk,
//                                                  -W = -Tb (k^ . 2^G), U = Tb v  (f32 FMAs)
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// Issues the cp.async copies of chunk `chunk`'s inputs into r: q, k, g, this CTA's v columns and
// the 2 KiB of Tb and A_qk from the workspace.
template <int kVs>
__device__ __forceinline__ void load_stage(const PrefillArgs& a, RawStage<kVs>& r, int64_t tok0,
                                           int nvalid, int64_t slot, int h, int hv, int v0,
                                           int tid) {
  load_qkg(a, r, tok0, nvalid, h, hv, tid);
  for (int s = tid; s < kC * (kVs / 8); s += kPrepThreads) {
    const int row = s / (kVs / 8), col = (s % (kVs / 8)) * 8;
    const bool ok = row < nvalid;
    const int64_t tok = tok0 + (ok ? row : 0);
    device::cp_async_cg_16(&r.v[row][col], a.v + tok * a.v_stride + int64_t(hv) * kV + v0 + col,
                           ok ? 16 : 0);
  }
  static_assert(kWsFloats == 4 * kPrepThreads, "one 16-byte copy per thread");
  device::cp_async_cg_16(&r.tb[0][0] + 4 * tid, chunk_ws(a, slot, hv) + 4 * tid, 16);
}

// Thread i (key column i): qs, ke, decay and column i of -W; A_qk entries i, i + 128; U for
// column i % kVs, rows (i / kVs) + kRep m (the kRep = 128 / kVs threads of a column share it).
template <int kVs>
__device__ __forceinline__ void scan_operands(const PrefillArgs& a, const RowNorms& nrm,
                                              const RawStage<kVs>& r, ScanStage<kVs>& sb, int i,
                                              const float (&Gr)[kC]) {
  using device::ex2_approx;
  using device::round_tf32;
  const float g15 = Gr[kC - 1];
  float kw[kC], ke[kC];  // ke: f32, split into bf16 hi + lo below
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    const float kn = bf16_bits_to_f32(r.k[row][i]) * nrm.rk[row];
    const float qn = bf16_bits_to_f32(r.q[row][i]) * nrm.rq[row] * a.scale;
    const float e0 = ex2_approx(Gr[row]);  // 2^G <= 1
    kw[row] = kn * e0;
    sb.qs[row][i] = round_tf32(qn * e0);
    ke[row] = kn * ex2_approx(g15 - Gr[row]);
  }
  uint32_t ke_hi[kC / 2], ke_lo[kC / 2];
#pragma unroll
  for (int p = 0; p < kC / 2; ++p)
    device::split_bf16x2(ke[2 * p], ke[2 * p + 1], ke_hi[p], ke_lo[p]);
#pragma unroll
  for (int p = 0; p < kC / 2; p += 4) {
    *reinterpret_cast<uint4*>(&sb.ke_hi[i][p]) =
        make_uint4(ke_hi[p], ke_hi[p + 1], ke_hi[p + 2], ke_hi[p + 3]);
    *reinterpret_cast<uint4*>(&sb.ke_lo[i][p]) =
        make_uint4(ke_lo[p], ke_lo[p + 1], ke_lo[p + 2], ke_lo[p + 3]);
  }
  sb.decay[i] = ex2_approx(g15);
#pragma unroll
  for (int e = i; e < kC * kC; e += kPrepThreads) sb.aqk[e / kC][e % kC] = r.aqk[e / kC][e % kC];

  // -W = -Tb kw and (kRep = 1) U = Tb v, row by row over the lower triangle of Tb (float4 rows).
  constexpr int kRep = kPrepThreads / kVs;
  const int col = i % kVs, sub = i / kVs;
  float vcol[kC];
#pragma unroll
  for (int row = 0; row < kC; ++row) vcol[row] = bf16_bits_to_f32(r.v[row][col]);
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    float w0 = 0.0f, w1 = 0.0f, u0 = 0.0f, u1 = 0.0f;
#pragma unroll
    for (int s4 = 0; s4 <= row / 4; ++s4) {
      const float4 tb = *reinterpret_cast<const float4*>(&r.tb[row][4 * s4]);
      const float tv[4] = {tb.x, tb.y, tb.z, tb.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int s = 4 * s4 + e;
        if (s > row) continue;  // exact triangle: row r never reads a later row
        (e & 1 ? w1 : w0) += tv[e] * kw[s];
        if (kRep == 1) (e & 1 ? u1 : u0) += tv[e] * vcol[s];
      }
    }
    sb.w[row][i] = round_tf32(-(w0 + w1));
    if (kRep == 1) sb.u[row][col] = u0 + u1;
  }
  if constexpr (kRep > 1) {
    // U for column i % kVs, rows sub + kRep m: the kRep threads of a column share the rows. Entries
    // of Tb above the diagonal are exact zeros, so summing up to the largest row this thread owns
    // keeps row r independent of later rows bit for bit.
#pragma unroll
    for (int m = 0; m < kC / kRep; ++m) {
      const int row = kRep * m + sub;
      float u0 = 0.0f, u1 = 0.0f;
#pragma unroll
      for (int s = 0; s < kRep * (m + 1); s += 2) {
        const float2 tb = *reinterpret_cast<const float2*>(&r.tb[row][s]);
        u0 += tb.x * vcol[s];
        u1 += tb.y * vcol[s + 1];
      }
      sb.u[row][col] = u0 + u1;
    }
  }
}

}  // namespace fastkda::prefill_cuda
