// The scan role of the prefill kernel (the warps after the prepare groups): the only part of the
// chunked form that is sequential in T. Formulated on S^T (V x K) so that the state is an MMA
// accumulator that never leaves registers (f32, chunk to chunk). A warp owns 16 value rows of S^T
// in the m16n8 accumulator layout (tile j = key columns 8j..8j+7): all 128 keys (64 floats per
// lane), or with k-split (slices of <= 64 value rows, config.h) one half of them, the pair
// exchanging its partial V_new^T / O^T through shared memory (halves the serial MMA chain).
//
// Per chunk (operands from ScanStage, tf32):
//   V_new^T = U^T + S^T (-W)^T                 16 x kC,  k-dim K
//   O^T     = S^T qs^T + V_new^T A_qk^T        16 x kC,  k-dims K and kC  (-> bf16 out)
//   S^T     = S^T diag(2^G_C) + V_new^T ke     16 x K,   k-dim kC
// An accumulator is reused as the A operand of the next MMA by permuting the k index: the lane that
// holds columns (2t, 2t+1) of a tile feeds k slots (t, t+4), and B is loaded with the same
// permutation (rows 2t, 2t+1 of the k range: one float2 per fragment).
#pragma once

#include <cuda_bf16.h>

#include "cuda/device/ptx.cuh"
#include "cuda/prefill/args.h"
#include "cuda/prefill/config.h"
#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// A operand (16 x 8, tf32) from one m16n8 accumulator tile, k slots permuted as described above.
__device__ __forceinline__ void acc_to_a(const float (&c)[4], uint32_t (&a)[4]) {
  a[0] = device::cvt_rna_tf32(c[0]);
  a[1] = device::cvt_rna_tf32(c[2]);
  a[2] = device::cvt_rna_tf32(c[1]);
  a[3] = device::cvt_rna_tf32(c[3]);
}
__device__ __forceinline__ void mma_f2(float (&d)[4], const uint32_t (&a)[4], float2 b) {
  device::mma_m16n8k8_tf32(d, a, __float_as_uint(b.x), __float_as_uint(b.y));
}

// Element offset of S^T[v][key] in one state matrix.
__device__ __forceinline__ int64_t state_elem(bool k_first, int v, int key) {
  return k_first ? int64_t(key) * kV + v : int64_t(v) * kK + key;
}

// Loads (or zeroes) this warp's 16 rows of S^T starting at value row v_row, key tiles from key0.
template <int kJ>
__device__ __forceinline__ void load_state(const PrefillArgs& a, const void* base, bool f32,
                                           int v_row, int key0, float (&S)[kJ][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kJ; ++j)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int v = v_row + g + (f >= 2 ? 8 : 0), key = key0 + 8 * j + 2 * t + (f & 1);
      S[j][f] = base ? load_f32_or_bf16(base, f32, state_elem(a.k_first, v, key)) : 0.0f;
    }
}

template <int kJ>
__device__ __forceinline__ void store_state(const PrefillArgs& a, void* base, bool f32, int v_row,
                                            int key0, const float (&S)[kJ][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kJ; ++j)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int v = v_row + g + (f >= 2 ? 8 : 0), key = key0 + 8 * j + 2 * t + (f & 1);
      const int64_t off = state_elem(a.k_first, v, key);
      if (f32)
        static_cast<float*>(base)[off] = S[j][f];
      else
        static_cast<uint16_t*>(base)[off] = __bfloat16_as_ushort(__float2bfloat16_rn(S[j][f]));
    }
}

// k-split: adds the partner warp's partial sums (fixed order part(keys 0..63) + part(64..127), so
// both warps hold identical V_new^T). Warp khalf = 1 needs no O^T. Two pair barriers: the partner
// has read the previous chunk's exchange before it is overwritten, and this chunk's is complete.
__device__ __forceinline__ void exchange_partials(PairExchange& x, int khalf, int bar_pair,
                                                  float (&vn)[2][4], float (&o)[2][4]) {
  const int lane = threadIdx.x & 31;
  device::bar_sync(bar_pair, 64);
  float* mine = khalf == 0 ? x.vn0[lane] : x.vn1[lane];
  *reinterpret_cast<float4*>(mine) = make_float4(vn[0][0], vn[0][1], vn[0][2], vn[0][3]);
  *reinterpret_cast<float4*>(mine + 4) = make_float4(vn[1][0], vn[1][1], vn[1][2], vn[1][3]);
  if (khalf == 1) {
    *reinterpret_cast<float4*>(x.o1[lane]) = make_float4(o[0][0], o[0][1], o[0][2], o[0][3]);
    *reinterpret_cast<float4*>(x.o1[lane] + 4) = make_float4(o[1][0], o[1][1], o[1][2], o[1][3]);
  }
  device::bar_sync(bar_pair, 64);
  if (khalf == 0) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      vn[e / 4][e % 4] = vn[e / 4][e % 4] + x.vn1[lane][e];
      o[e / 4][e % 4] = o[e / 4][e % 4] + x.o1[lane][e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) vn[e / 4][e % 4] = x.vn0[lane][e] + vn[e / 4][e % 4];
  }
}

// One chunk of the scan for this warp's 16 value rows (column `vc` of the CTA's value slice) and
// key tiles [j0, j0 + kJ). O^T goes to `ostage` (bf16) and from there to out with 16-byte stores
// (valid rows only; with k-split by the khalf = 0 warp).
template <int kVs>
__device__ __forceinline__ void scan_chunk(const PrefillArgs& a, const ScanStage<kVs>& sb,
                                           uint16_t (&ostage)[kC][kLdOut], PairExchange& xchg,
                                           float (&S)[key_tiles<kVs>()][4], int vc, int khalf,
                                           int bar_pair, uint16_t* out_rows, int nvalid) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  constexpr int kJ = key_tiles<kVs>();
  constexpr int kTiles = kC / 8;            // token tiles per chunk
  const int j0 = kJ * khalf;                // first key tile (khalf = 0 without k-split)
  float vn[2][kTiles][4], o[2][kTiles][4];  // [even/odd k-step partial][token tile][fragment]
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
    const bool u = khalf == 0;  // U enters once per pair
    vn[0][m][0] = u ? sb.u[8 * m + 2 * t][vc + g] : 0.0f;
    vn[0][m][1] = u ? sb.u[8 * m + 2 * t + 1][vc + g] : 0.0f;
    vn[0][m][2] = u ? sb.u[8 * m + 2 * t][vc + g + 8] : 0.0f;
    vn[0][m][3] = u ? sb.u[8 * m + 2 * t + 1][vc + g + 8] : 0.0f;
#pragma unroll
    for (int f = 0; f < 4; ++f) vn[1][m][f] = o[0][m][f] = o[1][m][f] = 0.0f;
  }
  // V_new^T = U^T - S^T W^T and the inter-chunk part of O^T, sharing the S^T fragments.
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int key = 8 * (j0 + j) + 2 * t;
    uint32_t af[4];
    acc_to_a(S[j], af);
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      mma_f2(vn[j & 1][m], af, *reinterpret_cast<const float2*>(&sb.w[8 * m + g][key]));
      mma_f2(o[j & 1][m], af, *reinterpret_cast<const float2*>(&sb.qs[8 * m + g][key]));
    }
  }
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      vn[0][m][f] += vn[1][m][f];
      o[0][m][f] += o[1][m][f];
    }
  if constexpr (k_split<kVs>()) exchange_partials(xchg, khalf, bar_pair, vn[0], o[0]);
  uint32_t av[kTiles][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m) acc_to_a(vn[0][m], av[m]);

  if (khalf == 0) {
    // Intra-chunk part of O^T: V_new^T A_qk^T (A_qk lower triangular: skip tiles above it).
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int mk = 0; mk <= m; ++mk)
        mma_f2(o[0][m], av[mk],
               *reinterpret_cast<const float2*>(&sb.aqk[8 * m + g][8 * mk + 2 * t]));

    // O^T -> bf16 staging [token][value] -> 16-byte stores of valid rows.
    __syncwarp();
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const int tok = 8 * m + 2 * t + (f & 1), v = g + (f >= 2 ? 8 : 0);
        ostage[tok][v] = __bfloat16_as_ushort(__float2bfloat16_rn(o[0][m][f]));
      }
    __syncwarp();
    const int tok = lane >> 1, half = lane & 1;
    if (tok < nvalid)
      *reinterpret_cast<uint4*>(out_rows + tok * a.out_stride + 8 * half) =
          *reinterpret_cast<const uint4*>(&ostage[tok][8 * half]);
  }

  // S^T = S^T diag(decay) + V_new^T ke.
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int key = 8 * (j0 + j);
    const float2 d = *reinterpret_cast<const float2*>(&sb.decay[key + 2 * t]);
    S[j][0] *= d.x;
    S[j][1] *= d.y;
    S[j][2] *= d.x;
    S[j][3] *= d.y;
#pragma unroll
    for (int mk = 0; mk < kTiles; ++mk)
      mma_f2(S[j], av[mk], *reinterpret_cast<const float2*>(&sb.ke[key + g][8 * mk + 2 * t]));
  }
}

}  // namespace fastkda::prefill_cuda
