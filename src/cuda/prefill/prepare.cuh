// The prepare role of the scan kernel (groups of 4 warps, prefill_kernel.cuh): for one chunk of kC
// tokens, the light elementwise part of DESIGN §2's chunked form and the two products with the
// intra kernel's Tb = (I + N)^-1 diag(beta) (workspace):
//
//   raw q, k, v, g, Tb, A_qk, row norms (smem, TMA)  ->  G             (common.cuh gate_cumsum)
//                                              ->  scan_operands: qs = scale q^ . 2^G,
//                                                  ke = (k^ . 2^(G_C - G))^T, decay = 2^G_C, A_qk,
//                                                  kVs = 32: -W = -Tb (k^ . 2^G), U = Tb v
//                                                  (split-bf16 MMA); kVs = 128 / 64: kw = k^ . 2^G,
//                                                  copies of Tb, v^T
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// Whether the group's four warps share the issue of a chunk's loads (load_stage) or thread 0
// issues them all. Shared at kVs = 128: -0.4 to -1.2 % on its varlen rows (two prepare groups;
// thread 0 alone reached the group's next barrier ~60 instructions behind the other warps), but
// +1.6 to +3.7 % at kVs = 64 / 32 (three groups beside a chain-bound scan; A/B session 16). The
// kVs = 128 kernel (it spills ~50 B) is sensitive to the form: the same shares written as
// independent ifs with the record copied last measured +1.2 to +2.4 % instead.
template <int kVs>
constexpr bool kSharedIssue = kVs == 128;

// The TMA loads of chunk inputs into r, completing on `mbar`: boxes of the kC token rows from
// tok0 of q, k (head h), g (value head hv) and this CTA's v columns (v0..), and the workspace
// record (Tb, A_qk, row norms) as one bulk copy. By lane 0 of warp `warp` of a prepare group
// (kSharedIssue: warp 0 arrives with the transaction count and copies the record, warps 1, 2, 3
// load q, k, and g and v; a complete-tx before the expect-tx leaves the phase open, as it cannot
// complete before warp 0's arrival), else by thread 0 alone (warp 0: all of them). Rows past the
// sequence end are loaded too (zeroed by zero_tail after the wait); rows past the tensor read as
// zeros.
template <int kVs>
__device__ __forceinline__ void load_stage(const PrefillArgs& a, RawStage<kVs>& r, uint64_t* mbar,
                                           int warp, int64_t tok0, int64_t slot, int h, int hv,
                                           int v0) {
  static_assert(kPrepWarps == 4, "four shares");
  static_assert(offsetof(RawStage<kVs>, tb) == 0 && (kWsFloats * 4) % 16 == 0,
                "the workspace record is the stage's first bytes: one bulk copy");
  const int t = int(tok0);
  const uint32_t bytes = qkg_bytes(a) + kC * kVs * 2 + kWsFloats * 4;
  auto load_v = [&] {
    if constexpr (v_in_blocks<kVs>())
      device::tma_load_3d(&r.v[0], &a.tm_v, 0, t, (hv * kV + v0) / 8, mbar);
    else
      device::tma_load_2d(&r.v[0], &a.tm_v, hv * kV + v0, t, mbar);
  };
  auto load_record = [&] {
    device::bulk_load(&r.tb[0][0], chunk_ws(a, slot, hv), kWsFloats * 4, mbar);
  };
  if constexpr (kSharedIssue<kVs>) {
    if (warp == 0) {
      device::mbarrier_arrive_expect_tx(mbar, bytes);
      load_record();
    } else if (warp == 1) {
      device::tma_load_2d(&r.q[0][0], &a.tm_q, h * kK, t, mbar);
    } else if (warp == 2) {
      device::tma_load_2d(&r.k[0][0], &a.tm_k, h * kK, t, mbar);
    } else {
      device::tma_load_2d(&r.g[0][0], &a.tm_g, hv * kK, t, mbar);
      load_v();
    }
  } else {
    device::mbarrier_arrive_expect_tx(mbar, bytes);
    load_qkg(a, r, t, h, hv, mbar);
    load_v();
    load_record();
  }
}

// Streamed intra kernel (a.ready set): thread 0 of a prepare group waits until the records of
// block `block` of sequence n, value head hv (kReadyChunks chunks, fewer in the last block of
// nchunks) are in the workspace (intra_warp_streamed_kernel's release), before load_stage copies
// the first of them. Once per block: an acquire load per chunk on the issue path cost ~8 % of the
// scan at H96 T8192 (and an early relaxed load with a fence when set ~13 %).
__device__ __forceinline__ void wait_ready(const PrefillArgs& a, int64_t n, int hv, int block,
                                           int nchunks) {
  const uint32_t* counter = &a.ready[(n * a.HV + hv) * a.ready_blocks + block];
  const int left = nchunks - block * kReadyChunks;
  const uint32_t want = uint32_t(left < kReadyChunks ? left : kReadyChunks);
  while (device::ld_acquire(counter) < want) __nanosleep(100);
  device::fence_proxy_async_global();  // the bulk copies read the records through the async proxy
}

// Thread i of the group, after the loads of a chunk with nvalid < kC rows landed: zeros in rows
// nvalid.. of q, k, g and v (the prepare's products rely on them), then a proxy fence (a later
// TMA load rewrites these bytes). The caller's group barrier makes the zeros visible.
template <int kVs>
__device__ __forceinline__ void zero_tail(const PrefillArgs& a, RawStage<kVs>& r, int nvalid,
                                          int i) {
  zero_tail_qkg(a, r, nvalid, i);
  if (i < kVs)
    for (int row = nvalid; row < kC; ++row) r.v[v_index<kVs>(row, i)] = 0;
  device::fence_proxy_async_shared();
}

// Tokens row and row + 1 of value column col as one bf16 pair (the lower token in the low half).
template <int kVs>
__device__ __forceinline__ uint32_t v_pair(const RawStage<kVs>& r, int row, int col) {
  return uint32_t(r.v[v_index<kVs>(row, col)]) | (uint32_t(r.v[v_index<kVs>(row + 1, col)]) << 16);
}

// U = Tb v for one warp of the group (mma.sync stages): its kVs / 4 value columns.
template <int kVs>
__device__ __forceinline__ void tb_u_products(const RawStage<kVs>& r, ScanStage<kVs>& sb, int warp,
                                              const uint32_t (&ah)[4], const uint32_t (&al)[4]) {
  using device::mma_m16n8k16_bf16;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  constexpr int kTilesU = kVs / 32;  // n-tiles of 8 value columns per warp (4 warps)
#pragma unroll
  for (int nt = 0; nt < kTilesU; ++nt) {
    const int col = warp * (kVs / 4) + 8 * nt;
    // B = v: tokens 2t, 2t + 1 and 2t + 8, 2t + 9 of column col + g (banks 8t + g / 2 (+ 4))
    const uint32_t b0 = v_pair(r, 2 * t, col + g), b1 = v_pair(r, 2 * t + 8, col + g);
    float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_m16n8k16_bf16(u, al, b0, b1);
    mma_m16n8k16_bf16(u, ah, b0, b1);
    *reinterpret_cast<float2*>(&sb.u[g][col + 2 * t]) = make_float2(u[0], u[1]);
    *reinterpret_cast<float2*>(&sb.u[g + 8][col + 2 * t]) = make_float2(u[2], u[3]);
  }
}

// The wgmma stage (kVs = 128 / 64): Tb (split bf16) and v^T (bf16 token pairs) for the scan
// warps, which form V_new^T = (v^T - S^T kw^T) Tb^T themselves (scan_chunk_wg): the prepare forms
// neither W nor U there. Thread i splits token pair i % 8 of Tb row i / 8 (two_scan_warpgroups,
// tb_col; else Tb is copied), and copies 16-byte halves (token pairs 0-3 or 4-7) of value column
// i % kVs; transition rows (no U) take Tb only.
template <int kVs>
__device__ __forceinline__ void copy_tb_vt(const RawStage<kVs>& r, WgScanStage<kVs>& sb, int i,
                                           bool with_u) {
  constexpr int kParts = kPrepThreads / kVs;  // threads per value column
  static_assert(kParts * kVs == kPrepThreads && (kParts == 1 || kParts == 2),
                "every prepare thread copies whole halves of one value column");
  if constexpr (two_scan_warpgroups<kVs>()) {
    static_assert(kC * kC / 2 == kPrepThreads, "one token pair of Tb per prepare thread");
    const int row = i / 8, q = i % 8;
    const float2 x = *reinterpret_cast<const float2*>(&r.tb[row][2 * q]);
    uint32_t hi, lo;
    device::split_bf16x2(x.x, x.y, hi, lo);
    sb.tb[row][tb_col(q, 0)] = hi;
    sb.tb[row][tb_col(q, 1)] = lo;
  } else {
#pragma unroll
    for (int e = i; e < kC * kC; e += kPrepThreads) sb.tb[e / kC][e % kC] = r.tb[e / kC][e % kC];
  }
  if (!with_u) return;
  if constexpr (kParts == 1) {
    // Thread i: value columns 2c, 2c + 1 (c = i % 64) of tokens 8h .. 8h + 7 (h = i / 64), from
    // 4-byte loads of column pairs (8 loads and 8 byte permutes instead of 16 loads of 2 bytes).
    static_assert(!v_in_blocks<kVs>() && 2 * kPrepThreads == kC * kVs / 8, "pairs x halves");
    const int c = 2 * (i % (kVs / 2)), h = i / (kVs / 2);
    uint32_t lo[4], hi[4];  // columns c, c + 1: token pairs 4h .. 4h + 3
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int t = 8 * h + 2 * q;
      const uint32_t a = *reinterpret_cast<const uint32_t*>(&r.v[v_index<kVs>(t, c)]);
      const uint32_t b = *reinterpret_cast<const uint32_t*>(&r.v[v_index<kVs>(t + 1, c)]);
      lo[q] = __byte_perm(a, b, 0x5410);
      hi[q] = __byte_perm(a, b, 0x7632);
    }
    *reinterpret_cast<uint4*>(&sb.vt[c][4 * h]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    *reinterpret_cast<uint4*>(&sb.vt[c + 1][4 * h]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  } else {
    const int col = i % kVs;  // tokens 8h .. 8h + 7, h = i / kVs
    uint32_t p[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) p[q] = v_pair(r, 2 * (4 * (i / kVs) + q), col);
    *reinterpret_cast<uint4*>(&sb.vt[col][4 * (i / kVs)]) = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

// -W = -Tb kw and U = Tb v for one warp of the group (mma.sync stages): its 32 key columns of W
// (kw in sb.w on entry, replaced in place) and its kVs / 4 value columns of U. Split-bf16 mma.sync
// (m16n8k16: the chunk's 16 tokens are one k step): Tb = hi + lo and kw = hi + lo to ~16
// significant bits, v is exact in bf16. Tb is lower triangular with exact zeros above the
// diagonal, so row r of W and U takes nothing from later rows (0 x finite adds +0): causal bit for
// bit.
template <int kVs>
__device__ __forceinline__ void tb_products(const RawStage<kVs>& r, ScanStage<kVs>& sb, int warp,
                                            bool with_u) {
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
    split_bf16x2(sb.w[2 * t][col], sb.w[2 * t + 1][col], bh[0], bl[0]);
    split_bf16x2(sb.w[2 * t + 8][col], sb.w[2 * t + 9][col], bh[1], bl[1]);
#pragma unroll
    for (int f = 0; f < 4; ++f) w[nt][f] = 0.0f;
    mma_m16n8k16_bf16(w[nt], al, bh[0], bh[1]);
    mma_m16n8k16_bf16(w[nt], ah, bl[0], bl[1]);
    mma_m16n8k16_bf16(w[nt], ah, bh[0], bh[1]);
  }
  __syncwarp();  // every lane has read its kw fragments before -W overwrites them
#pragma unroll
  for (int nt = 0; nt < kTilesW; ++nt) {
    const int col = 32 * warp + 8 * nt + 2 * t;
    // -W carries kw's factor 1 + kTruncBias: a truncated tf32 operand (common.cuh)
    *reinterpret_cast<float2*>(&sb.w[g][col]) = make_float2(-w[nt][0], -w[nt][1]);
    *reinterpret_cast<float2*>(&sb.w[g + 8][col]) = make_float2(-w[nt][2], -w[nt][3]);
  }
  if (with_u) tb_u_products(r, sb, warp, ah, al);
}

// Where the prepare's cumulative decay G starts (gate_cumsum): kw and qs (and so W = Tb kw) are
// truncated tf32 operands that carry 1 + kTruncBias (common.cuh); as f16 operands (kF16: the
// kVs = 128 scan, scan.cuh WarpScale) they are rounded to nearest and carry nothing.
template <bool kF16>
constexpr float kG0 = kF16 ? 0.0f : kTruncBiasLog2;

// Thread i (key column i): qs, ke, decay, kw = k^ . 2^G (into sb.w) and A_qk entries i, i + 128;
// then its warp forms -W and U with tensor cores (tb_products; the wgmma stage: copies of Tb and
// v^T instead, copy_tb_vt). The split-T transition pass skips
// qs and A_qk (no outputs) and, for its identity rows, U.
template <int kVs, bool kF16 = false>
__device__ __forceinline__ void scan_operands(const PrefillArgs& a, const RawStage<kVs>& r,
                                              ScanStageOf<kVs>& sb, int i, const float (&Gr)[kC],
                                              bool outputs, bool with_u) {
  using device::ex2_approx;
  constexpr bool kWg = uses_wgmma<kVs>();
  static_assert(!kF16 || kWg, "f16 operands on the wgmma scan only");
  const float g15 = Gr[kC - 1];
  float ke[kC];  // f32, split into bf16 hi + lo below
  RowNorms rk{r.rk}, rq{r.rq};
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    const float kn = bf16_bits_to_f32(r.k[row][i]) * rk(row);
    const float qn = bf16_bits_to_f32(r.q[row][i]) * rq(row);  // rq includes the scale
    const float e0 = ex2_approx(Gr[row]);  // 2^G <= 1 + kTruncBias
    if constexpr (kF16) {  // kw and qs as f16 operands, rounded to nearest (wg_f16_offset)
      *reinterpret_cast<uint16_t*>(sb.w + wg_f16_offset(row, i)) = device::f16_rn(kn * e0);
      if (outputs)
        *reinterpret_cast<uint16_t*>(sb.w + wg_f16_offset(kC + row, i)) = device::f16_rn(qn * e0);
    } else if constexpr (kWg) {  // kw as the scan's tf32 operand (it forms S^T kw^T), truncated
      *reinterpret_cast<float*>(sb.w + wg_tf32_offset(row, i, kWgSboKeys, kWgLboKeys)) = kn * e0;
      if (outputs)  // truncated, as kw
        *reinterpret_cast<float*>(sb.qs + wg_tf32_offset(row, i, kWgSboKeys, kWgLboKeys)) =
            qn * e0;
    } else {
      sb.w[row][i] = kn * e0;  // kw, f32; tb_products turns it into -W
      if (outputs) sb.qs[row][i] = qn * e0;
    }
    ke[row] = kn * ex2_approx(g15 - Gr[row]);
  }
  uint32_t ke_hi[kC / 2], ke_lo[kC / 2];
#pragma unroll
  for (int p = 0; p < kC / 2; ++p)
    device::split_bf16x2(ke[2 * p], ke[2 * p + 1], ke_hi[p], ke_lo[p]);
#pragma unroll
  for (int p = 0; p < kC / 2; p += 4) {
    if constexpr (kWg) {  // tokens 2p .. 2p + 7 of key i: 16 bytes
      *reinterpret_cast<uint4*>(sb.ke_hi + wg_ke_offset(i, 2 * p)) =
          make_uint4(ke_hi[p], ke_hi[p + 1], ke_hi[p + 2], ke_hi[p + 3]);
      *reinterpret_cast<uint4*>(sb.ke_lo + wg_ke_offset(i, 2 * p)) =
          make_uint4(ke_lo[p], ke_lo[p + 1], ke_lo[p + 2], ke_lo[p + 3]);
    } else {  // pairs q, q + 4, q + 1, q + 5 (q = p / 2) at columns ke_col(i, q) ..: 16 bytes
      const int q = p / 2;
      static_assert(ke_col(0, 0) + 1 == ke_col(0, 4) && ke_col(0, 1) == ke_col(0, 0) + 2,
                    "pairs q, q + 4, q + 1, q + 5 are one 16-byte run");
      *reinterpret_cast<uint4*>(&sb.ke_hi[i][ke_col(i, q)]) =
          make_uint4(ke_hi[q], ke_hi[q + 4], ke_hi[q + 1], ke_hi[q + 5]);
      *reinterpret_cast<uint4*>(&sb.ke_lo[i][ke_col(i, q)]) =
          make_uint4(ke_lo[q], ke_lo[q + 4], ke_lo[q + 1], ke_lo[q + 5]);
    }
  }
  sb.decay[i] = ex2_approx(g15 - kG0<kF16>);  // 2^G_C without the operands' factor
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
  if constexpr (kWg) {
    copy_tb_vt(r, sb, i, with_u);
  } else {
    __syncwarp();  // kw columns of this warp written
    tb_products<kVs>(r, sb, i >> 5, with_u);
  }
}

}  // namespace fastkda::prefill_cuda
