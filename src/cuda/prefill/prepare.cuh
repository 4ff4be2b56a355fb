// The prepare role of the scan kernel (groups of 4 warps, prefill_kernel.cuh): for one chunk of kC
// tokens, the light elementwise part of DESIGN §2's chunked form and the two products with the
// intra kernel's Tb = (I + N)^-1 diag(beta) (workspace):
//
//   raw q, k, v, g, Tb, A_qk, row norms (smem, TMA)  ->  G                  (common.cuh gate_cumsum)
//                                              ->  scan_operands: qs = scale q^ . 2^G,
//                                                  ke = (k^ . 2^(G_C - G))^T, decay = 2^G_C, A_qk,
//                                                  -W = -Tb (k^ . 2^G), U = Tb v  (split-bf16 MMA)
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// Thread 0 of a prepare group: the TMA loads of chunk inputs into r, completing on `mbar`: boxes
// of the kC token rows from tok0 of q, k (head h), g (value head hv) and this CTA's v columns
// (v0..), and the workspace record (Tb, A_qk, row norms) as one bulk copy. Rows past the sequence
// end are loaded too (zeroed by zero_tail after the wait); rows past the tensor read as zeros.
template <int kVs>
__device__ __forceinline__ void load_stage(const PrefillArgs& a, RawStage<kVs>& r, uint64_t* mbar,
                                           int64_t tok0, int64_t slot, int h, int hv, int v0) {
  device::mbarrier_arrive_expect_tx(mbar, qkg_bytes(a) + kC * kVs * 2 + kWsFloats * 4);
  const int t = int(tok0);
  load_qkg(a, r, t, h, hv, mbar);
  device::tma_load_2d(&r.v[0][0], &a.tm_v, hv * kV + v0, t, mbar);
  static_assert(offsetof(RawStage<kVs>, tb) == 0 && (kWsFloats * 4) % 16 == 0,
                "the workspace record is the stage's first bytes: one bulk copy");
  device::bulk_load(&r.tb[0][0], chunk_ws(a, slot, hv), kWsFloats * 4, mbar);
}

// Thread i of the group, after the loads of a chunk with nvalid < kC rows landed: zeros in rows
// nvalid.. of q, k, g and v (the prepare's products rely on them), then a proxy fence (a later
// TMA load rewrites these bytes). The caller's group barrier makes the zeros visible.
template <int kVs>
__device__ __forceinline__ void zero_tail(const PrefillArgs& a, RawStage<kVs>& r, int nvalid,
                                          int i) {
  zero_tail_qkg(a, r, nvalid, i);
  if (i < kVs)
    for (int row = nvalid; row < kC; ++row) r.v[row][i] = 0;
  device::fence_proxy_async_shared();
}

// The f32 rows of kw = k^ . 2^G: their own buffer in the wgmma stage, the -W buffer (overwritten
// in place by tb_products) in the mma.sync stage.
template <int kVs>
__device__ __forceinline__ auto& kw_rows(ScanStageOf<kVs>& sb) {
  if constexpr (uses_wgmma<kVs>())
    return sb.kw;
  else
    return sb.w;
}

// -W = -Tb kw and U = Tb v for one warp of the group: its 32 key columns of W (kw in sb.w on entry,
// replaced in place) and its kVs / 4 value columns of U. Split-bf16 mma.sync (m16n8k16: the chunk's
// 16 tokens are one k step): Tb = hi + lo and kw = hi + lo to ~16 significant bits, v is exact in
// bf16. Tb is lower triangular with exact zeros above the diagonal, so row r of W and U takes
// nothing from later rows (0 x finite adds +0): causal bit for bit.
template <int kVs>
__device__ __forceinline__ void tb_products(const RawStage<kVs>& r, ScanStageOf<kVs>& sb, int warp,
                                            bool with_u) {
  constexpr bool kWg = uses_wgmma<kVs>();
  using device::mma_m16n8k16_bf16;
  using device::split_bf16x2;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t ah[4], al[4];  // A = Tb: rows g, g + 8; tokens 2t, 2t + 1 and 2t + 8, 2t + 9
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const float2 x = *reinterpret_cast<const float2*>(&r.tb[g + 8 * (f & 1)][2 * t + 8 * (f >> 1)]);
    split_bf16x2(x.x, x.y, ah[f], al[f]);
  }
  constexpr int kTilesW = 32 / 8;  // n-tiles of 8 key columns per warp
  float w[kTilesW][4];
#pragma unroll
  for (int nt = 0; nt < kTilesW; ++nt) {
    const int col = 32 * warp + 8 * nt + g;
    uint32_t bh[2], bl[2];  // B = kw: tokens 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), column g
    const auto& kw = kw_rows<kVs>(sb);
    split_bf16x2(kw[2 * t][col], kw[2 * t + 1][col], bh[0], bl[0]);
    split_bf16x2(kw[2 * t + 8][col], kw[2 * t + 9][col], bh[1], bl[1]);
#pragma unroll
    for (int f = 0; f < 4; ++f) w[nt][f] = 0.0f;
    mma_m16n8k16_bf16(w[nt], al, bh[0], bh[1]);
    mma_m16n8k16_bf16(w[nt], ah, bl[0], bl[1]);
    mma_m16n8k16_bf16(w[nt], ah, bh[0], bh[1]);
  }
  if constexpr (kWg) {  // wgmma layout (config.h): keys 2t, 2t + 1 go to slots t, t + 4
#pragma unroll
    for (int nt = 0; nt < kTilesW; ++nt) {
      const int key = 32 * warp + 8 * nt + 2 * t;
#pragma unroll
      for (int f = 0; f < 4; ++f)
        *reinterpret_cast<float*>(sb.w + wg_tf32_offset(g + 8 * (f >> 1), key + (f & 1),
                                                        kWgSboKeys)) = tf32_operand(-w[nt][f]);
    }
  } else {
    __syncwarp();  // every lane has read its kw fragments before -W overwrites them
#pragma unroll
    for (int nt = 0; nt < kTilesW; ++nt) {
      const int col = 32 * warp + 8 * nt + 2 * t;
      *reinterpret_cast<float2*>(&sb.w[g][col]) =
          make_float2(tf32_operand(-w[nt][0]), tf32_operand(-w[nt][1]));
      *reinterpret_cast<float2*>(&sb.w[g + 8][col]) =
          make_float2(tf32_operand(-w[nt][2]), tf32_operand(-w[nt][3]));
    }
  }
  if (!with_u) return;
  constexpr int kTilesU = kVs / 32;  // n-tiles of 8 value columns per warp (4 warps)
#pragma unroll
  for (int nt = 0; nt < kTilesU; ++nt) {
    const int col = warp * (kVs / 4) + 8 * nt;
    const uint32_t b0 = uint32_t(r.v[2 * t][col + g]) | (uint32_t(r.v[2 * t + 1][col + g]) << 16);
    const uint32_t b1 =
        uint32_t(r.v[2 * t + 8][col + g]) | (uint32_t(r.v[2 * t + 9][col + g]) << 16);
    float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_m16n8k16_bf16(u, al, b0, b1);
    mma_m16n8k16_bf16(u, ah, b0, b1);
    *reinterpret_cast<float2*>(&sb.u[g][col + 2 * t]) = make_float2(u[0], u[1]);
    *reinterpret_cast<float2*>(&sb.u[g + 8][col + 2 * t]) = make_float2(u[2], u[3]);
  }
}

// Thread i (key column i): qs, ke, decay, kw = k^ . 2^G (into sb.w) and A_qk entries i, i + 128;
// then its warp forms -W and U with tensor cores (tb_products). The split-T transition pass skips
// qs and A_qk (no outputs) and, for its identity rows, U.
template <int kVs>
__device__ __forceinline__ void scan_operands(const PrefillArgs& a, const RawStage<kVs>& r, ScanStageOf<kVs>& sb, int i,
                                              const float (&Gr)[kC], bool outputs, bool with_u) {
  using device::ex2_approx;
  constexpr bool kWg = uses_wgmma<kVs>();
  auto& kw = kw_rows<kVs>(sb);
  const float g15 = Gr[kC - 1];
  float ke[kC];  // f32, split into bf16 hi + lo below
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    const float kn = bf16_bits_to_f32(r.k[row][i]) * r.rk[row];
    const float qn = bf16_bits_to_f32(r.q[row][i]) * r.rq[row] * a.scale;
    const float e0 = ex2_approx(Gr[row]);  // 2^G <= 1
    kw[row][i] = kn * e0;                  // kw, f32; tb_products turns it into -W
    if (outputs) {
      if constexpr (kWg)
        *reinterpret_cast<float*>(sb.qs + wg_tf32_offset(row, i, kWgSboKeys)) =
            tf32_operand(qn * e0);
      else
        sb.qs[row][i] = tf32_operand(qn * e0);
    }
    ke[row] = kn * ex2_approx(g15 - Gr[row]);
  }
  uint32_t ke_hi[kC / 2], ke_lo[kC / 2];
#pragma unroll
  for (int p = 0; p < kC / 2; ++p)
    device::split_bf16x2(ke[2 * p], ke[2 * p + 1], ke_hi[p], ke_lo[p]);
#pragma unroll
  for (int p = 0; p < kC / 2; p += 4) {  // tokens 2p .. 2p + 7 of key i: 16 bytes
    const uint4 hi = make_uint4(ke_hi[p], ke_hi[p + 1], ke_hi[p + 2], ke_hi[p + 3]);
    const uint4 lo = make_uint4(ke_lo[p], ke_lo[p + 1], ke_lo[p + 2], ke_lo[p + 3]);
    if constexpr (kWg) {
      *reinterpret_cast<uint4*>(sb.ke_hi + wg_ke_offset(i, 2 * p)) = hi;
      *reinterpret_cast<uint4*>(sb.ke_lo + wg_ke_offset(i, 2 * p)) = lo;
    } else {
      *reinterpret_cast<uint4*>(&sb.ke_hi[i][ke_col(i, p)]) = hi;
      *reinterpret_cast<uint4*>(&sb.ke_lo[i][ke_col(i, p)]) = lo;
    }
  }
  sb.decay[i] = ex2_approx(g15);
  if (outputs) {
#pragma unroll
    for (int e = i; e < kC * kC; e += kPrepThreads) {
      if constexpr (kWg)  // A_qk^T as B: n = token e / kC, k = source token e % kC
        *reinterpret_cast<float*>(sb.aqk + wg_tf32_offset(e / kC, e % kC, kWgSboTok)) =
            r.aqk[e / kC][e % kC];
      else
        sb.aqk[e / kC][e % kC] = r.aqk[e / kC][e % kC];
    }
  }
  __syncwarp();  // kw columns of this warp written
  tb_products<kVs>(r, sb, i >> 5, with_u);
}

}  // namespace fastkda::prefill_cuda
