// The scan role of the prefill kernel (the warps after the prepare groups): the only part of the
// chunked form that is sequential in T. Formulated on S^T (V x K) so that the state is an MMA
// accumulator that never leaves registers (f32, chunk to chunk). Warp w owns 16 value rows of S^T:
// 16 x 128 floats, 64 per lane, in the m16n8 accumulator layout (tile j = key columns 8j..8j+7).
//
// Per chunk (operands from ScanStage; tf32 except the state update):
//   V_new^T = U^T + S^T (-W)^T                 16 x kC,  k-dim K
//   O^T     = S^T qs^T + V_new^T A_qk^T        16 x kC,  k-dims K and kC  (-> bf16 out)
//   S^T     = S^T diag(2^G_C) + V_new^T ke     16 x K,   k-dim kC  (split bf16, see below)
// An accumulator is reused as the A operand of the next MMA by permuting the k index: the lane that
// holds columns (2t, 2t+1) of a tile feeds k slots (t, t+4), and B is loaded with the same
// permutation (rows 2t, 2t+1 of the k range: one float2 per fragment).
#pragma once

#include <cuda_bf16.h>

#include "cuda/device/ptx.cuh"
#include "cuda/device/wgmma.cuh"
#include "cuda/prefill/args.h"
#include "cuda/prefill/common.cuh"
#include "cuda/prefill/config.h"

namespace fastkda::prefill_cuda {

// A operand (16 x 8, tf32) from one m16n8 accumulator tile, k slots permuted as described above
// (one cvt.rn per value: 72 per chunk and lane; NaN stays NaN).
__device__ __forceinline__ void acc_to_a(const float (&c)[4], uint32_t (&a)[4]) {
  a[0] = device::tf32_rn(c[0]);
  a[1] = device::tf32_rn(c[2]);
  a[2] = device::tf32_rn(c[1]);
  a[3] = device::tf32_rn(c[3]);
}
__device__ __forceinline__ void mma_f2(float (&d)[4], const uint32_t (&a)[4], float2 b) {
  device::mma_m16n8k8_tf32(d, a, __float_as_uint(b.x), __float_as_uint(b.y));
}

// Element offset of S^T[v][key] in one state matrix.
__device__ __forceinline__ int64_t state_elem(bool k_first, int v, int key) {
  return k_first ? int64_t(key) * kV + v : int64_t(v) * kK + key;
}

// Where a state matrix comes from or goes to: f32 or bf16, V-first or K-first.
struct StateRef {
  const void* ptr;  // null when loading: zeros, or the identity for transition rows
  bool f32, k_first;
};

// The caller's start and final states of sequence n, value head hv: the pool slot by index (an
// invalid index: neither), null pointers where the caller passes none.
struct UserStates {
  StateRef init, final;
};
__device__ __forceinline__ UserStates user_states(const PrefillArgs& a, int64_t n, int hv) {
  int64_t slot = n;
  bool use_state = true;
  if (a.state_indices) {
    slot = a.state_indices[n];
    use_state = slot >= 0 && slot < a.num_state_slots;
  }
  const int64_t matrix = int64_t(kK) * kV;
  UserStates u{{nullptr, a.init_f32, a.k_first}, {nullptr, a.final_f32, a.k_first}};
  if (use_state && a.initial_state)
    u.init.ptr = static_cast<const char*>(a.initial_state) +
                 (slot * a.HV + hv) * matrix * (a.init_f32 ? 4 : 2);
  if (use_state && a.final_state)
    u.final.ptr = static_cast<const char*>(a.final_state) +
                  (slot * a.HV + hv) * matrix * (a.final_f32 ? 4 : 2);
  return u;
}

// Loads this warp's 16 rows of S^T starting at row `row` (a value row; a key row of the identity
// for the transition rows of the split-T scan), keys k0 .. k0 + 8 kTilesK - 1.
template <int kTilesK>
__device__ __forceinline__ void load_state(StateRef src, bool identity, int row, int k0,
                                           float (&S)[kTilesK][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kTilesK; ++j)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int v = row + g + (f >= 2 ? 8 : 0), key = k0 + 8 * j + 2 * t + (f & 1);
      S[j][f] = src.ptr ? load_f32_or_bf16(src.ptr, src.f32, state_elem(src.k_first, v, key))
                        : (identity && v == key ? 1.0f : 0.0f);
    }
}

// L2 prefetch, by the kPrepThreads threads of a prepare group (thread i), of the rows
// row0 .. row0 + kVs - 1 of a start state that the scan warps will load (load_state). A hint:
// nothing for a null state.
template <int kVs>
__device__ __forceinline__ void prefetch_state_slice(StateRef src, int row0, int i) {
  if (!src.ptr) return;
  const int esz = src.f32 ? 4 : 2;
  const char* base = static_cast<const char*>(src.ptr);
  if (!src.k_first) {  // kVs value rows of kK keys: one contiguous block
    const char* block = base + state_elem(false, row0, 0) * esz;
    for (int off = 128 * i; off < kVs * kK * esz; off += 128 * kPrepThreads)
      device::prefetch_l2(block + off);
  } else {  // kK key rows of kVs contiguous values (64 .. 512 bytes)
    const int lines = (kVs * esz + 127) / 128;
    for (int l = i; l < kK * lines; l += kPrepThreads)
      device::prefetch_l2(base + state_elem(true, row0, l / lines) * esz + 128 * (l % lines));
  }
}

// kCombineLayout: f32 V-first rows in combine_kernel's stage layout (combine_m_offset, split T's
// transitions M_j, which the combine then copies to shared memory as they are).
template <bool kCombineLayout = false, int kTilesK>
__device__ __forceinline__ void store_state(StateRef dst, int row, int k0,
                                            const float (&S)[kTilesK][4], float scale = 1.0f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  void* base = const_cast<void*>(dst.ptr);
#pragma unroll
  for (int j = 0; j < kTilesK; ++j)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int v = row + g + (f >= 2 ? 8 : 0), key = k0 + 8 * j + 2 * t + (f & 1);
      const int64_t off =
          kCombineLayout ? combine_m_offset(v, key) : state_elem(dst.k_first, v, key);
      const float x = S[j][f] * scale;  // S^T 2^-sigma for a scaled state (WarpScale), else exact
      if (dst.f32)
        static_cast<float*>(base)[off] = x;
      else
        static_cast<uint16_t*>(base)[off] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    }
}

// A CTA's end state(s) through shared memory (stage_state_rows, then copy_state_rows), where its
// last job is done and its stages are free: each scan thread writes its elements as store_state
// would (scaled, V-first or in the combine's layout within each row) into rows of kStateLd floats
// (padded: at most 2-way bank conflicts), the scan warps meet, and each warp then stores whole
// rows, 16 bytes per lane (4 cache lines per store). Session 37 (per-CTA clock64 probe, H32
// T4096): store_state's 64 scattered 4-byte stores per thread (8 lines each) took ~6 us for one
// state at the end of a kFirst job and ~11 us for the pair job's two, on the path to the
// combine. Measured (session 37, call 4: six alternating rounds): H32 T4096 -2.2 %, T16384
// -0.6 % (softplus -1.1 %), every other row within +-0.5 %. Bulk copies (TMA) instead of the row
// stores: one per padded row cost more than they saved (also at the end of the unsplit scan:
// H96 fixed +2.5 %), and in the pairs kernel any bulk copy changed ptxas's chunk loop (+36
// instructions; H8 +2.4 %).
constexpr int kStateLd = kK + 8;
template <bool kCombineLayout = false, int kTilesK>
__device__ __forceinline__ void stage_state_rows(float* rows, int row0, int row, int k0,
                                                 const float (&S)[kTilesK][4],
                                                 float scale = 1.0f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kTilesK; ++j)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int v = row + g + (f >= 2 ? 8 : 0), key = k0 + 8 * j + 2 * t + (f & 1);
      const int in_row = kCombineLayout ? combine_m_offset(v, key) - v * kK : key;
      rows[(v - row0) * kStateLd + in_row] = S[j][f] * scale;
    }
}
// After stage_state_rows by every scan thread (index i of `threads`): the nrows rows at `rows`
// to dst0 and, with dst1, the next nrows rows to dst1 (f32 rows of kK floats, the CTA's first
// row first); the scan threads meet on `barrier` before and after (a CTA whose last jobs are
// empty sequences stages once per job: compute-sanitizer racecheck, session 37).
__device__ __forceinline__ void copy_state_rows(const float* rows, float* dst0, float* dst1,
                                                int nrows, int barrier, int threads, int i) {
  device::bar_sync(barrier, threads);
  constexpr int kPerRow = kK / 4;  // 16-byte pieces
  const int n = (dst1 ? 2 * nrows : nrows) * kPerRow;
  for (int x = i; x < n; x += threads) {
    const int r = x / kPerRow, c = x % kPerRow;
    float* dst = r < nrows ? dst0 + int64_t(r) * kK : dst1 + int64_t(r - nrows) * kK;
    *reinterpret_cast<float4*>(dst + 4 * c) =
        *reinterpret_cast<const float4*>(rows + r * kStateLd + 4 * c);
  }
  device::bar_sync(barrier, threads);
}

// V_new^T's two token tiles (m16n8 accumulators) as the split-bf16 A fragment of the state update:
// one m16n8k16 / m64n128k16 step over the chunk's 16 tokens (row g / g + 8, tokens 2t, 2t + 1 and
// 8 + 2t, 8 + 2t + 1), hi + lo.
__device__ __forceinline__ void split_vnew(const float (&vn)[kC / 8][4], uint32_t (&vh)[4],
                                           uint32_t (&vl)[4]) {
  static_assert(kC == 16, "one k16 step over the chunk's tokens");
  device::split_bf16x2(vn[0][0], vn[0][1], vh[0], vl[0]);
  device::split_bf16x2(vn[0][2], vn[0][3], vh[1], vl[1]);
  device::split_bf16x2(vn[1][0], vn[1][1], vh[2], vl[2]);
  device::split_bf16x2(vn[1][2], vn[1][3], vh[3], vl[3]);
}

// A key tile of this warp's S^T rows times diag(2^G_C): d = the decays of the thread's keys
// 8j + 2t, 8j + 2t + 1.
__device__ __forceinline__ void decay_tile(float (&s)[4], float2 d) {
  s[0] *= d.x;
  s[1] *= d.y;
  s[2] *= d.x;
  s[3] *= d.y;
}

// The wgmma scan's state update S^T += V_new^T ke as three m64n128k16 in split bf16 (lo.hi,
// hi.lo, hi.hi; ke_hi / ke_lo of the stage as B), issued and committed: the caller waits
// (wgmma_wait_group) when it needs S again.
template <class Stage>
__device__ __forceinline__ void issue_state_update(float (&S64)[64], const uint32_t (&vh)[4],
                                                   const uint32_t (&vl)[4], const Stage& sb) {
  using namespace device;
  const SmemDesc desc_kh = smem_desc_noswizzle(sb.ke_hi, kWgLbo, kWgSboKe);
  const SmemDesc desc_kl = smem_desc_noswizzle(sb.ke_lo, kWgLbo, kWgSboKe);
  wgmma_fence_operands(S64);
  wgmma_fence();
  wgmma_m64n128k16_bf16_rs(S64, vl, desc_kh, true);
  wgmma_m64n128k16_bf16_rs(S64, vh, desc_kl, true);
  wgmma_m64n128k16_bf16_rs(S64, vh, desc_kh, true);
  wgmma_commit_group();
}

// O^T (this warp's 16 value rows x 16 tokens, m16n8 accumulators) -> bf16 staging [token][value]
// -> 16-byte stores of the valid token rows (with the key split: of token tile `only` alone, the
// partner warp stores the other). kStmatrix: the staging is one transposing stmatrix (the
// accumulator pair (value g, tokens 2t, 2t + 1) of token tile m and value half vh is b16 matrix
// 2 m + vh in the fragment layout, stored as rows 8 m .. 8 m + 7 (tokens), columns 8 vh .. 8 vh + 7
// (values)) instead of 8 two-byte stores: -0.4 % on the kVs = 128 rows (two scan warpgroups share
// the issue slots), +0.9 % at kVs = 64 (one warpgroup, where the store is on its chain; session
// 14, bench/results/2026-11-30_s14_ab4).
template <bool kStmatrix>
__device__ __forceinline__ void store_out_tile(const PrefillArgs& a, uint16_t (&ostage)[kC][kLdOut],
                                               const float (&o)[kC / 8][4], uint16_t* out_rows,
                                               int nvalid, int only = -1) {
  static_assert(kC == 16 && kLdOut % 8 == 0, "4 matrices of 8 x 8, 16-byte staging rows");
  const int lane = threadIdx.x & 31;
  __syncwarp();
  if constexpr (kStmatrix) {
    const int m = lane / 16, vh = (lane / 8) % 2, j = lane % 8;  // lane 8 (2 m + vh) + j
    device::stmatrix_x4_trans(&ostage[8 * m + j][8 * vh], device::pack_bf16x2(o[0][0], o[0][1]),
                              device::pack_bf16x2(o[0][2], o[0][3]),
                              device::pack_bf16x2(o[1][0], o[1][1]),
                              device::pack_bf16x2(o[1][2], o[1][3]));
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int m = 0; m < kC / 8; ++m)
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const int tok = 8 * m + 2 * t + (f & 1), v = g + (f >= 2 ? 8 : 0);
        ostage[tok][v] = __bfloat16_as_ushort(__float2bfloat16_rn(o[m][f]));
      }
  }
  __syncwarp();
  const int tok = lane >> 1, half = lane & 1;
  if (tok < nvalid && (only < 0 || tok / 8 == only))
    *reinterpret_cast<uint4*>(out_rows + tok * a.out_stride + 8 * half) =
        *reinterpret_cast<const uint4*>(&ostage[tok][8 * half]);
}

// One chunk of the mma.sync scan (kVs = 32; kVs = 64 / 128 run scan_chunk_wg) for this warp's
// 16 rows of S^T (column `vc` of the CTA's slice). With kOut, O^T goes to `ostage` (bf16) and from
// there to out with 16-byte stores (valid rows only); without (the split-T transition pass) only
// V_new and the state update run. Without with_u, U = 0 (the identity rows of a transition).
// Key split (key_split<kVs>() == 2, config.h): the warp holds keys 64 kh .. 64 kh + 63 of its rows
// (S: 8 tiles); the V_new^T and O^T partials over them are exchanged with the partner warp (the
// other key half) through `xch` (parity = chunk parity) and summed in key-half order, so both
// warps hold the same V_new^T (each updates its own keys) and O^T (each stores one token tile).
template <int kVs, bool kOut>
__device__ __forceinline__ void scan_chunk(const PrefillArgs& a, const ScanStage<kVs>& sb,
                                           uint16_t (&ostage)[kC][kLdOut],
                                           float (&S)[kK / 8 / key_split<kVs>()][4], int vc,
                                           uint16_t* out_rows, int nvalid, bool with_u, int kh,
                                           float4 (*xch)[2][4][32], int parity) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  constexpr int kSplit = key_split<kVs>();
  static_assert(kSplit == 2, "the mma.sync scan runs with the key split only (kVs = 32)");
  constexpr int kTilesK = kK / 8 / kSplit;  // key tiles of this warp
  const int j0 = kh * kTilesK;              // its first key tile
  constexpr int kTiles = kC / 8;            // token tiles per chunk
  float vn[2][kTiles][4], o[2][kTiles][4];  // [even/odd k-step partial][token tile][fragment]
  float u[kTiles][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
    u[m][0] = with_u ? sb.u[8 * m + 2 * t][vc + g] : 0.0f;
    u[m][1] = with_u ? sb.u[8 * m + 2 * t + 1][vc + g] : 0.0f;
    u[m][2] = with_u ? sb.u[8 * m + 2 * t][vc + g + 8] : 0.0f;
    u[m][3] = with_u ? sb.u[8 * m + 2 * t + 1][vc + g + 8] : 0.0f;
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      vn[0][m][f] = vn[1][m][f] = o[0][m][f] = o[1][m][f] = 0.0f;  // U after the exchange
    }
  }
  // V_new^T = U^T - S^T W^T and the inter-chunk part of O^T, sharing the S^T fragments.
#pragma unroll
  for (int j = 0; j < kTilesK; ++j) {
    uint32_t af[4];
    acc_to_a(S[j], af);
    const int key = 8 * (j0 + j) + 2 * t;
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      mma_f2(vn[j & 1][m], af, *reinterpret_cast<const float2*>(&sb.w[8 * m + g][key]));
      if constexpr (kOut)
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
  // Every stage operand still to be read (A_qk, the decays and ke of the warp's keys) is loaded
  // before the pair barrier. Read after it, compute-sanitizer racecheck reports them as
  // racing with the prepare's writes of the stage's next chunk (ordered by the scan's Empty arrive
  // after these reads and the prepare's Empty wait before its writes), as it did for session 2's
  // key split; with the loads before the barrier it reports none.
  float2 aq[kTiles * (kTiles + 1) / 2], dec[kTilesK];
  uint32_t keh[kTilesK][2], kel[kTilesK][2];
  {
    const int p0 = ke_col(g, t);  // pairs t and t + 4 of rows 8j + g, side by side (config.h)
#pragma unroll
    for (int j = 0; j < kTilesK; ++j) {
      dec[j] = *reinterpret_cast<const float2*>(&sb.decay[8 * (j0 + j) + 2 * t]);
      const uint2 h = *reinterpret_cast<const uint2*>(&sb.ke_hi[8 * (j0 + j) + g][p0]);
      const uint2 l = *reinterpret_cast<const uint2*>(&sb.ke_lo[8 * (j0 + j) + g][p0]);
      keh[j][0] = h.x, keh[j][1] = h.y;
      kel[j][0] = l.x, kel[j][1] = l.y;
    }
    if constexpr (kOut)
#pragma unroll
      for (int m = 0, e = 0; m < kTiles; ++m)
#pragma unroll
        for (int mk = 0; mk <= m; ++mk, ++e)
          aq[e] = *reinterpret_cast<const float2*>(&sb.aqk[8 * m + g][8 * mk + 2 * t]);
  }
  {
    // This warp's partials out, the partner's in (one pair barrier), summed in key-half order.
    float4* mine = xch[parity][kh][0] + lane;
    const float4* other = xch[parity][kh ^ 1][0] + lane;
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      mine[32 * m] = make_float4(vn[0][m][0], vn[0][m][1], vn[0][m][2], vn[0][m][3]);
      mine[32 * (kTiles + m)] = make_float4(o[0][m][0], o[0][m][1], o[0][m][2], o[0][m][3]);
    }
    device::bar_sync(BarrierIds<kVs>::kPair0 + vc / 16, 64);
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      const float4 pv = other[32 * m], po = other[32 * (kTiles + m)];
      const float ov[4] = {pv.x, pv.y, pv.z, pv.w}, oo[4] = {po.x, po.y, po.z, po.w};
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const float v0 = kh == 0 ? vn[0][m][f] : ov[f], v1 = kh == 0 ? ov[f] : vn[0][m][f];
        const float o0 = kh == 0 ? o[0][m][f] : oo[f], o1 = kh == 0 ? oo[f] : o[0][m][f];
        vn[0][m][f] = (u[m][f] + v0) + v1;
        o[0][m][f] = o0 + o1;
      }
    }
  }
  uint32_t av[kTiles][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m) acc_to_a(vn[0][m], av[m]);
  if constexpr (kOut) {
    // Intra-chunk part of O^T: V_new^T A_qk^T (A_qk lower triangular: skip tiles above it).
#pragma unroll
    for (int m = 0, e = 0; m < kTiles; ++m)
#pragma unroll
      for (int mk = 0; mk <= m; ++mk, ++e)
        mma_f2(o[0][m], av[mk], aq[e]);

    store_out_tile<false>(a, ostage, o[0], out_rows, nvalid, kh);
  }

  // S^T = S^T diag(decay) + V_new^T ke with split-bf16 operands (hi.hi + hi.lo + lo.hi, ~16
  // significant bits per product instead of tf32's 11): the state path's operand rounding is what
  // the final state's error is made of when it is built from few tokens (gates of -1000).
  // One m16n8k16 per key tile: the V_new^T accumulators of the two token tiles are the A fragment
  // as they are (row g / g + 8, tokens 2t, 2t + 1 and 8 + 2t, 8 + 2t + 1).
  uint32_t vh[4], vl[4];
  split_vnew(vn[0], vh, vl);
#pragma unroll
  for (int j = 0; j < kTilesK; ++j) {
    decay_tile(S[j], dec[j]);
    device::mma_m16n8k16_bf16(S[j], vl, keh[j][0], keh[j][1]);
    device::mma_m16n8k16_bf16(S[j], vh, kel[j][0], kel[j][1]);
    device::mma_m16n8k16_bf16(S[j], vh, keh[j][0], keh[j][1]);
  }
}

// The kVs = 128 scan with f16 operands for P^T and O^T (kF16: the launcher's choice with
// l2norm'd keys, beta <= 2 and a gate <= 0; session 35, BENCHMARKS.md: half the wgmmas and A
// conversions of tf32's k8 steps, the H96 rows -0.7 to -3.4 %). f16 keeps
// tf32's 11 significant bits but overflows at 65504, so each warp holds its 16 rows of S^T as
// S' = S^T 2^sigma with sigma from a bound on their norms: the delta rule's step
// (I - beta k k^T) diag(decay) is then non-expansive, so a chunk adds at most 2 sum_t |v_t[j]|
// <= 32 max|v| to ||s_j||. Before a chunk's conversion the bound times 2^sigma is <= 2^14; sigma
// stays 0 while the bound is within [2^-4, 2^14] (nothing scaled), else 13 - floor(log2 bound),
// within [-120, 60]. A power of two scales f16 and f32 values exactly (barring subnormals), v
// enters as v 2^sigma and O, the boundary and final states leave as O' 2^-sigma, S' 2^-sigma; sigma
// for a chunk depends on earlier chunks only, so row r of a chunk still reads no later token.
struct WarpScale {
  float bound;     // >= ||s_j||, unscaled, for this warp's value rows j (NaN: left as it is)
  float up, down;  // 2^sigma, 2^-sigma
  int sigma;
  bool move;  // bound 2^sigma has left [2^-4, 2^14]: rescale before the next conversion
  // After each change of bound (in the state update's shadow, off the chain).
  __device__ __forceinline__ void check() {
    const float m = bound * up;  // NaN: no move
    move = m > 0x1p14f || (m > 0.0f && m < 0x1p-4f);
  }
};
__device__ __forceinline__ float exp2i(int e) {  // 2^e, -126 <= e <= 127
  return __uint_as_float(uint32_t(e + 127) << 23);
}
// The bound from S' itself: sqrt(128) max |S'| 2^-sigma >= ||s_j||, warp-uniform.
template <int kTilesK>
__device__ __forceinline__ float state_bound(const float (&S)[kTilesK][4], float down) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < kTilesK; ++j)
#pragma unroll
    for (int f = 0; f < 4; ++f) m = fmaxf(m, fabsf(S[j][f]));
  return __uint_as_float(device::redux_max_u32(__float_as_uint(m))) * down * 11.3137093f;
}
// Before a chunk's conversion: sigma moved (S' rescaled) when bound 2^sigma left [2^-4, 2^14].
template <int kTilesK>
__device__ __forceinline__ void rescale_state(float (&S)[kTilesK][4], WarpScale& sc) {
  if (__any_sync(0xffffffffu, sc.move)) {  // warp-uniform (sc is)
    int sigma = 0;
    if (!(sc.bound >= 0x1p-4f && sc.bound <= 0x1p14f)) {
      const int e = int((__float_as_uint(sc.bound) >> 23) & 0xffu) - 127;  // floor(log2)
      sigma = min(60, max(-120, 13 - e));
    }
    const int d = sigma - sc.sigma;  // |d| <= 180: two factors of 2^(|d| / 2) at most
    const float f1 = exp2i(d / 2), f2 = exp2i(d - d / 2);
#pragma unroll
    for (int j = 0; j < kTilesK; ++j)
#pragma unroll
      for (int f = 0; f < 4; ++f) S[j][f] = S[j][f] * f1 * f2;
    sc.sigma = sigma, sc.up = exp2i(sigma), sc.down = exp2i(-sigma);
    sc.move = false;
  }
}
// max |v| over this lane's 8 values of the chunk (those wg_v_new reads), from the bf16 bits.
template <int kVs>
__device__ __forceinline__ float vt_absmax(const WgScanStage<kVs>& sb, int vc) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t m = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c) m = __vmaxu2(m, sb.vt[vc + g + 8 * r][4 * c + t] & 0x7fff7fffu);
  return __uint_as_float(max(m << 16, m & 0xffff0000u));
}
// After a chunk's state update is issued (in its shadow): the chunk's growth of ||s_j||, at most
// 2 x 16 tokens x max |v| (rows without v, the transition rows of split T: none), then the check.
template <int kVs>
__device__ __forceinline__ void grow_bound(const WgScanStage<kVs>& sb, int vc, bool with_u,
                                           WarpScale& sc) {
  if (with_u)  // job-uniform
    sc.bound = fmaf(32.0f, __uint_as_float(device::redux_max_u32(__float_as_uint(
                               vt_absmax(sb, vc)))),
                    sc.bound);
  sc.check();
}

// The wgmma chunk's V_new^T = (v^T - P^T) Tb^T = U^T - S^T W^T without W or U (the prepare forms
// neither) for this warp's 16 rows (column vc of the stage's v^T; U = 0 without with_u), P^T in
// pk (m16n8 accumulators of the chunk's two token tiles): one k16 step over the chunk's source
// tokens, split bf16 on both sides (A = v^T - P^T from the accumulator layout as split_vnew takes
// it, v^T exact in bf16 from the stage's token pairs; B = Tb^T, token r = 8 mr + g), hi.hi + hi.lo
// + lo.hi: the kept precision (emulated, bench/precision_chunk.py). Tb is lower triangular with
// exact zeros: causal bit for bit.
// kF16 (WarpScale): v enters as v 2^sigma (vscale).
template <int kVs, bool kF16 = false>
__device__ __forceinline__ void wg_v_new(const WgScanStage<kVs>& sb, const float (&pk)[kC / 8][4],
                                         int vc, bool with_u, float (&vn)[kC / 8][4],
                                         float vscale = 1.0f) {
  using namespace device;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  constexpr int kTiles = kC / 8;
  float x[kTiles][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const uint32_t pair = with_u ? sb.vt[vc + g + (f >= 2 ? 8 : 0)][4 * m + t] : 0u;
      const float v = __uint_as_float((f & 1) ? (pair & 0xffff0000u) : (pair << 16));
      if constexpr (kF16)
        x[m][f] = fmaf(v, vscale, -pk[m][f]);
      else
        x[m][f] = v - pk[m][f];
    }
  uint32_t xh[4], xl[4];
  split_vnew(x, xh, xl);
#pragma unroll
  for (int mr = 0; mr < kTiles; ++mr) {
    // Tokens 2t, 2t + 1 (h0, l0) and 2t + 8, 2t + 9 (h1, l1) of Tb row 8 mr + g.
    uint32_t h0, l0, h1, l1;
    if constexpr (two_scan_warpgroups<kVs>()) {  // split by the prepare (tb_col)
      const uint4 b = *reinterpret_cast<const uint4*>(&sb.tb[8 * mr + g][tb_col(t, 0)]);
      h0 = b.x, h1 = b.y, l0 = b.z, l1 = b.w;
    } else {
      const float2 t0 = *reinterpret_cast<const float2*>(&sb.tb[8 * mr + g][2 * t]);
      const float2 t1 = *reinterpret_cast<const float2*>(&sb.tb[8 * mr + g][2 * t + 8]);
      split_bf16x2(t0.x, t0.y, h0, l0);
      split_bf16x2(t1.x, t1.y, h1, l1);
    }
#pragma unroll
    for (int f = 0; f < 4; ++f) vn[mr][f] = 0.0f;
    mma_m16n8k16_bf16(vn[mr], xl, h0, h1);
    mma_m16n8k16_bf16(vn[mr], xh, l0, l1);
    mma_m16n8k16_bf16(vn[mr], xh, h0, h1);
  }
}

// The A operand of one P^T / O^T k step from this warp's state rows, key tiles j (tf32: one k8
// step, acc_to_a) or j and j + 1 (f16: one k16 step, S' packed straight from two accumulator
// tiles: the k16 A layout is the accumulator's, wgmma.cuh).
template <bool kF16>
__device__ __forceinline__ void state_step_a(const float (&S)[kK / 8][4], int j,
                                             uint32_t (&af)[4]) {
  if constexpr (kF16) {
    af[0] = device::pack_f16x2(S[j][0], S[j][1]);
    af[1] = device::pack_f16x2(S[j][2], S[j][3]);
    af[2] = device::pack_f16x2(S[j + 1][0], S[j + 1][1]);
    af[3] = device::pack_f16x2(S[j + 1][2], S[j + 1][3]);
  } else {
    acc_to_a(S[j], af);
  }
}

// The same chunk on wgmma (kVs = 128 / 64): the 4 warps of a warpgroup own 64 value rows, each
// warp's registers exactly as in scan_chunk (the wgmma accumulator and A layouts are the mma.sync
// ones); B operands come from the WgScanStage layouts (config.h) through descriptors. The A
// registers of a wgmma must stay untouched until it completes, so V_new^T and O^T run in 2 batches
// of 8 key tiles (32 registers of A per batch: within the scan warpgroups' 144 / 176 registers, no
// spill; under the earlier flat 128-register cap it was 4 batches of 4). The state update's wgmma
// reads ke from the stage: it is waited for before returning, so the caller may release the stage.
template <int kVs, bool kOut, bool kF16 = false>
__device__ __forceinline__ void scan_chunk_wg(const PrefillArgs& a, const WgScanStage<kVs>& sb,
                                              uint16_t (&ostage)[kC][kLdOut], float (&S)[kK / 8][4],
                                              int vc, uint16_t* out_rows, int nvalid, bool with_u,
                                              WarpScale* sc = nullptr) {
  using namespace device;
  if constexpr (kF16) rescale_state(S, *sc);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  constexpr int kTiles = kC / 8;
  // [token tile][fragment]: tiles 0, 1 P^T = S^T kw^T, tiles 2, 3 O^T, the m64n32 accumulator of
  // one wgmma per k step (kw and qs are adjacent in the stage: N = 32 stacked, config.h).
  float acc[2 * kTiles][4];
  auto& pk = *reinterpret_cast<float(*)[kTiles][4]>(&acc[0]);
  auto& o = *reinterpret_cast<float(*)[kTiles][4]>(&acc[kTiles]);
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int f = 0; f < 4; ++f) pk[m][f] = o[m][f] = 0.0f;
  auto& pk8 = reinterpret_cast<float(&)[8]>(pk);
  auto& acc16 = reinterpret_cast<float(&)[16]>(acc);
  auto& S64 = reinterpret_cast<float(&)[64]>(S);
  // One k step is 2 core matrices along K (8 tf32 or 16 f16 keys): 2 kWgLboKeys bytes, in the
  // descriptor's address field (16-byte units) kStepW.
  const device::SmemDesc desc_w =
      smem_desc_noswizzle(sb.w, kWgLboKeys, kF16 ? kWgSboKeysH : kWgSboKeys);
  constexpr uint32_t kStepW = 2 * kWgLboKeys / 16;
  wgmma_fence_operands(acc16);
  // Batches of 8 key tiles (32 registers of A): 8 tf32 k8 steps, or 4 f16 k16 steps whose A is
  // S' packed straight from two accumulator tiles (the k16 A layout is the accumulator's,
  // wgmma.cuh; B = kw | qs as f16, wg_f16_offset).
  constexpr int kBatch = 8, kTilesPerStep = kF16 ? 2 : 1, kSteps = kBatch / kTilesPerStep;
  constexpr bool kDecayEarly = two_scan_warpgroups<kVs>();
#pragma unroll
  for (int b = 0; b < kK / 8; b += kBatch) {
    uint32_t af[kSteps][4];
#pragma unroll
    for (int ii = 0; ii < kSteps; ++ii) {
      state_step_a<kF16>(S, b + kTilesPerStep * ii, af[ii]);
    }
    wgmma_fence();
#pragma unroll
    for (int ii = 0; ii < kSteps; ++ii) {
      const SmemDesc desc = desc_w + kStepW * (b / kTilesPerStep + ii);
      if constexpr (kF16 && kOut)
        wgmma_m64n32k16_f16_rs(acc16, af[ii], desc, true);
      else if constexpr (kF16)
        wgmma_m64n16k16_f16_rs(pk8, af[ii], desc, true);
      else if constexpr (kOut)
        wgmma_m64n32k8_tf32_rs(acc16, af[ii], desc, true);
      else
        wgmma_m64n16k8_tf32_rs(pk8, af[ii], desc, true);
    }
    wgmma_commit_group();
    // Two warpgroups: S^T diag(2^G_C) for the state update while the batch runs (its A operands
    // are copies; ptxas still waits for the batch first, C7517, yet the rows gain 1-2 %).
    if constexpr (kDecayEarly) {
#pragma unroll
      for (int jj = 0; jj < kBatch; ++jj)
        decay_tile(S[b + jj], *reinterpret_cast<const float2*>(&sb.decay[8 * (b + jj) + 2 * t]));
    }
    wgmma_wait_group<0>();
  }
  wgmma_fence_operands(acc16);
  float vn[kTiles][4];
  wg_v_new<kVs, kF16>(sb, pk, vc, with_u, vn, kF16 ? sc->up : 1.0f);
  // The output (A_qk part, staging, store): with one warpgroup in the state update's shadow (it
  // reads none of the update's registers; session 20: -2.5 to -3.5 % on the kVs = 64 rows), with
  // two before it (in the shadow it measured +3 to +4 % on the kVs = 128 rows).
  auto output = [&] {
    if constexpr (kOut) {
      // Intra-chunk part of O^T: V_new^T A_qk^T by mma.sync (A_qk lower triangular: 3 tiles),
      // B from A_qk^T's core-matrix layout (slot t <- key 2t, slot t + 4 <- 2t + 1: wg_slot). As a
      // wgmma on a slice of the m64n32 accumulator it made ptxas serialise every wgmma of the
      // chunk (C7511).
      const unsigned char* aq = sb.aqk;
#pragma unroll
      for (int m = 0; m < kTiles; ++m) {
        uint32_t av[4];
        acc_to_a(vn[m], av);
#pragma unroll
        for (int mr = m; mr < kTiles; ++mr)  // token tile mr of O^T reads source tile m
          device::mma_m16n8k8_tf32(
              o[mr], av,
              *reinterpret_cast<const uint32_t*>(
                  aq + wg_tf32_offset(8 * mr + g, 8 * m + 2 * t, kWgSboTok)),
              *reinterpret_cast<const uint32_t*>(
                  aq + wg_tf32_offset(8 * mr + g, 8 * m + 2 * t + 1, kWgSboTok)));
      }
      if constexpr (kF16) {  // O' 2^-sigma
        if (__any_sync(0xffffffffu, sc->sigma != 0))
#pragma unroll
          for (int m = 0; m < kTiles; ++m)
#pragma unroll
            for (int f = 0; f < 4; ++f) o[m][f] *= sc->down;
      }
      store_out_tile<two_scan_warpgroups<kVs>()>(a, ostage, o, out_rows, nvalid);
    }
  };
  constexpr bool kOutLate = !two_scan_warpgroups<kVs>();
  if constexpr (!kOutLate) output();

  // S^T = S^T diag(decay) + V_new^T ke, split bf16 as in scan_chunk: one m64n128k16 per product.
  uint32_t vh[4], vl[4];
  split_vnew(vn, vh, vl);
  if constexpr (!kDecayEarly) {
#pragma unroll
    for (int j = 0; j < kK / 8; ++j)
      decay_tile(S[j], *reinterpret_cast<const float2*>(&sb.decay[8 * j + 2 * t]));
  }
  issue_state_update(S64, vh, vl, sb);
  if constexpr (kF16) grow_bound(sb, vc, with_u, *sc);  // in the update's shadow
  if constexpr (kOutLate) output();

  wgmma_wait_group<0>();
  wgmma_fence_operands(S64);
}

// One P^T k step of a pair block (m64n16: 16 tokens of kw), tf32 k8 or f16 k16.
template <bool kF16>
__device__ __forceinline__ void pair_step(float (&p8)[8], const uint32_t (&af)[4],
                                          device::SmemDesc desc) {
  if constexpr (kF16)
    device::wgmma_m64n16k16_f16_rs(p8, af, desc, true);
  else
    device::wgmma_m64n16k8_tf32_rs(p8, af, desc, true);
}

// Split T's pass-1 chunk for a segment's value and transition rows in one CTA (Pass::kPairs):
// this warp's 16 rows of the value block (SA: V_new^T = (v^T - P^T) Tb^T) and the same 16 rows of
// the transition block (SB: U = 0), both against the chunk's one stage, so that one prepare serves
// 256 rows. Per block exactly scan_chunk_wg<128, false>'s arithmetic in the same order (P^T over
// the 16 key tiles into one accumulator, the decay after each batch's tf32 copies, V_new^T by
// split-bf16 mma.sync, three m64n128k16): E_j and M_j bit for bit those of separate value and
// transition CTAs. P^T runs in batches of 2 key tiles per block (16 registers of tf32 copies for
// both): 128 registers of state leave no room for the unsplit chunk's batches of 8 (ptxas
// serialises the chain under 208 registers per thread; chain bench, PairBlocks).
// kF16: each block's rows scaled as in scan_chunk_wg<128, false, true> (WarpScale scA, scB), the
// P^T steps as k16 f16 steps in the same order, so E_j and M_j stay those of separate CTAs.
template <bool kF16 = false>
__device__ __forceinline__ void scan_chunk_pair(const WgScanStage<128>& sb, float (&SA)[kK / 8][4],
                                                float (&SB)[kK / 8][4], int vc,
                                                WarpScale* scA = nullptr,
                                                WarpScale* scB = nullptr) {
  using namespace device;
  const int t = threadIdx.x & 3;
  constexpr int kTiles = kC / 8, kBatch = 2;
  if constexpr (kF16) rescale_state(SA, *scA), rescale_state(SB, *scB);
  float pa[kTiles][4], pb[kTiles][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int f = 0; f < 4; ++f) pa[m][f] = pb[m][f] = 0.0f;
  auto& pa8 = reinterpret_cast<float(&)[8]>(pa);
  auto& pb8 = reinterpret_cast<float(&)[8]>(pb);
  const SmemDesc desc_w = smem_desc_noswizzle(sb.w, kWgLboKeys, kF16 ? kWgSboKeysH : kWgSboKeys);
  constexpr uint32_t kStepW = 2 * kWgLboKeys / 16;
  wgmma_fence_operands(pa8);
  wgmma_fence_operands(pb8);
  // Batches of 2 key tiles: 2 tf32 k8 steps or 1 f16 k16 step per block (state_step_a).
  constexpr int kTilesPerStep = kF16 ? 2 : 1, kSteps = kBatch / kTilesPerStep;
#pragma unroll
  for (int b = 0; b < kK / 8; b += kBatch) {
    uint32_t afa[kSteps][4], afb[kSteps][4];
#pragma unroll
    for (int ii = 0; ii < kSteps; ++ii) {
      state_step_a<kF16>(SA, b + kTilesPerStep * ii, afa[ii]);
      state_step_a<kF16>(SB, b + kTilesPerStep * ii, afb[ii]);
    }
    wgmma_fence();
#pragma unroll
    for (int ii = 0; ii < kSteps; ++ii)
      pair_step<kF16>(pa8, afa[ii], desc_w + kStepW * (b / kTilesPerStep + ii));
#pragma unroll
    for (int ii = 0; ii < kSteps; ++ii)
      pair_step<kF16>(pb8, afb[ii], desc_w + kStepW * (b / kTilesPerStep + ii));
    wgmma_commit_group();
#pragma unroll
    for (int jj = 0; jj < kBatch; ++jj) {
      const float2 d = *reinterpret_cast<const float2*>(&sb.decay[8 * (b + jj) + 2 * t]);
      decay_tile(SA[b + jj], d);
      decay_tile(SB[b + jj], d);
    }
    wgmma_wait_group<0>();
  }
  wgmma_fence_operands(pa8);
  wgmma_fence_operands(pb8);
  float vna[kTiles][4], vnb[kTiles][4];
  uint32_t vha[4], vla[4], vhb[4], vlb[4];
  wg_v_new<128, kF16>(sb, pa, vc, true, vna, kF16 ? scA->up : 1.0f);
  split_vnew(vna, vha, vla);
  wg_v_new<128, kF16>(sb, pb, vc, false, vnb, kF16 ? scB->up : 1.0f);
  split_vnew(vnb, vhb, vlb);
  auto& SA64 = reinterpret_cast<float(&)[64]>(SA);
  auto& SB64 = reinterpret_cast<float(&)[64]>(SB);
  issue_state_update(SA64, vha, vla, sb);
  issue_state_update(SB64, vhb, vlb, sb);
  if constexpr (kF16) grow_bound(sb, vc, true, *scA), grow_bound(sb, vc, false, *scB);
  wgmma_wait_group<0>();
  wgmma_fence_operands(SA64);
  wgmma_fence_operands(SB64);
}

}  // namespace fastkda::prefill_cuda
