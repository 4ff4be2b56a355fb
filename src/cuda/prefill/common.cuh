// Per-chunk elementwise work shared by the intra kernel and the scan kernel's prepare warps:
// raw-input copies, gate activation and in-chunk cumulative log2 decay G, row norms, beta, and the
// chunk-slot index of the workspace (config.h).
#pragma once

#include <cuda_bf16.h>

#include "cuda/device/ptx.cuh"
#include "cuda/prefill/args.h"
#include "cuda/prefill/config.h"

namespace fastkda::prefill_cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMinLogDecay2 = 128.0f;  // per-token log2 decay floor (gate_rows)

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(uint32_t(h) << 16);
}
// A value that only tf32 MMAs read, stored rounded to tf32 (ptx.cuh tf32_rn): A_qk. The other
// operands formed outside the scan warps (kt, qt, kd, ko; kw, qs and -W) are truncated instead
// (kTruncBias below).
__device__ __forceinline__ float tf32_operand(float x) {
  return __uint_as_float(device::tf32_rn(x));
}

// Truncated tf32 operands. A tensor-core tf32 operand given as raw f32 bits is truncated (its low
// 13 bits ignored), which errs toward zero by 2^-11 E[1/m] = 2^-11 / (2 ln 2) of the value on
// average (mantissas m log-uniform on [1, 2)). An operand formed with a factor 1 + kTruncBias
// and left unrounded has the rounding's error size without the rounding's instruction
// (bench/precision_chunk.py, "kw / qs truncated, scaled": state 1.95e-4 / out 1.70e-3 against
// 1.89e-4 / 1.70e-3 rounded). Formed this way: the scan's kw and qs and so -W = -Tb kw (the
// prepare's cumulative decay starts at kTruncBiasLog2, gate_cumsum, so 2^G carries the factor,
// G_C - G does not) and the intra kernel's operands (through the row norms, intra_warp_chunk
// and intra_warp_hier). GPU tests check that the tensor cores truncate (PtxGpu, WgmmaGpu). (The scan's
// register operands S^T and V_new^T gain nothing from it: a wgmma / mma.sync A operand needs the
// accumulator's registers in another order, one move each instead of the rounding; checked on the
// SASS, session 15.)
constexpr float kTruncBias = 3.5222047e-4f;      // 2^-11 / (2 ln 2)
constexpr float kTruncBiasLog2 = 5.0805725e-4f;  // log2(1 + kTruncBias)
static_assert(kTruncBiasLog2 - kTruncBias * kLog2e * (1.0f - kTruncBias / 2) < 1e-9f &&
                  kTruncBias * kLog2e * (1.0f - kTruncBias / 2) - kTruncBiasLog2 < 1e-9f,
              "kTruncBiasLog2 = log2(1 + kTruncBias)");

// Element j of a row-norm array (rq / rk: 16-byte aligned in shared memory) for j = 0, 1, ... in
// an unrolled loop: one 16-byte load per 4 rows instead of one load per row (the loop's stores
// to other shared arrays would keep the compiler from merging the scalar loads itself).
struct RowNorms {
  const float* p;
  float4 v;
  __device__ __forceinline__ float operator()(int j) {
    if (j % 4 == 0) v = *reinterpret_cast<const float4*>(p + j);
    return j % 4 == 0 ? v.x : j % 4 == 1 ? v.y : j % 4 == 2 ? v.z : v.w;
  }
};

__device__ __forceinline__ float load_f32_or_bf16(const void* p, bool is_f32, int64_t i) {
  return is_f32 ? static_cast<const float*>(p)[i]
                : bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
}

__device__ __forceinline__ int64_t load_cu(const PrefillArgs& a, int64_t n) {
  return a.cu_i64 ? static_cast<const int64_t*>(a.cu_seqlens)[n]
                  : int64_t(static_cast<const int32_t*>(a.cu_seqlens)[n]);
}
__device__ __forceinline__ int64_t seq_begin(const PrefillArgs& a, int64_t n) {
  return a.cu_seqlens ? load_cu(a, n) : n * a.T;
}
// First workspace slot of sequence n when a slot holds slot_tokens tokens (kC: chunk slots;
// seg_chunks * kC: split-T segment slots). Strictly increasing in n, see config.h.
__device__ __forceinline__ int64_t slot_base(int64_t bos, int64_t n, int64_t slot_tokens = kC) {
  return bos / slot_tokens + n;
}
__device__ __forceinline__ float* chunk_ws(const PrefillArgs& a, int64_t slot, int hv) {
  return a.ws + (slot * a.HV + hv) * kWsFloats;
}
// Split T: segment j of a sequence starts at chunk seg_first(a, j) (segment 0: seg0_chunks
// chunks, every later one seg_chunks); a sequence of nchunks chunks has seg_count segments (one,
// empty, if nchunks = 0). seg0_chunks >= seg_chunks, so a sequence has at most as many segments
// as slots of seg_chunks chunks (the segment slots of config.h stay injective).
__device__ __forceinline__ int seg_first(const PrefillArgs& a, int j) {
  return j == 0 ? 0 : a.seg0_chunks + (j - 1) * a.seg_chunks;
}
__device__ __forceinline__ int seg_count(const PrefillArgs& a, int nchunks) {
  return nchunks <= a.seg0_chunks
             ? 1
             : 1 + (nchunks - a.seg0_chunks + a.seg_chunks - 1) / a.seg_chunks;
}
// Split T: E and M of segment slot `slot` (config.h).
__device__ __forceinline__ float* seg_end(const PrefillArgs& a, int64_t slot, int hv) {
  return a.seg_ws + (slot * a.HV + hv) * kSegFloats;
}
__device__ __forceinline__ float* seg_transition(const PrefillArgs& a, int64_t slot, int hv) {
  return seg_end(a, slot, hv) + kV * kK;
}

__device__ __forceinline__ int64_t seq_end(const PrefillArgs& a, int64_t n, int64_t bos) {
  return a.cu_seqlens ? load_cu(a, n + 1) : bos + a.T;
}

// Sequence owning slot `slot` (largest n with slot_base(n) <= slot; slots before the first
// sequence give n = 0 and a negative offset, which callers skip).
__device__ __forceinline__ int64_t slot_sequence(const PrefillArgs& a, int64_t slot,
                                                 int64_t slot_tokens = kC) {
  int64_t lo = 0, hi = a.num_seq - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (slot_base(seq_begin(a, mid), mid, slot_tokens) <= slot)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The gate's A = exp(A_log) of value head hv (1 without A_log), the same in both kernels: one ex2
// (expf is ~8 instructions; ~2 ulp, the gate's own precision). The intra kernel forms it per chunk.
__device__ __forceinline__ float gate_A(const PrefillArgs& a, int hv) {
  return a.A_log ? device::ex2_approx(a.A_log[hv] * kLog2e) : 1.0f;
}

__device__ __forceinline__ float beta_activation(const PrefillArgs& a, float b) {
  if (a.beta_act == BetaAct::kGiven) return b;
  const float s = device::rcp_approx(1.0f + device::ex2_approx(-b * kLog2e));
  return a.beta_act == BetaAct::kTwoSigmoid ? 2.0f * s : s;
}

// Bytes of one chunk's q, k and g rows (the transaction count of load_qkg).
__device__ __forceinline__ uint32_t qkg_bytes(const PrefillArgs& a) {
  return kC * (2 * kK * 2 + (a.g_f32 ? kK * 4 : kK * 2));
}
// The TMA loads of the kC token rows from token t of q, k (head h) and g (value head hv) into r,
// completing on mbar (the scan's prepare; the caller announces qkg_bytes first).
template <class Raw>
__device__ __forceinline__ void load_qkg(const PrefillArgs& a, Raw& r, int t, int h, int hv,
                                         uint64_t* mbar) {
  device::tma_load_2d(&r.q[0][0], &a.tm_q, h * kK, t, mbar);
  device::tma_load_2d(&r.k[0][0], &a.tm_k, h * kK, t, mbar);
  device::tma_load_2d(&r.g[0][0], &a.tm_g, hv * kK, t, mbar);
}

// Thread i, after a chunk's q, k, g rows landed (TMA loads the rows past the sequence end too,
// from the next sequence): zeros in rows nvalid.. of column i (the products rely on them).
template <class Raw>
__device__ __forceinline__ void zero_tail_qkg(const PrefillArgs& a, Raw& r, int nvalid, int i) {
  for (int row = nvalid; row < kC; ++row) {
    r.q[row][i] = 0;
    r.k[row][i] = 0;
    if (a.g_f32)
      r.g[row][i] = 0.0f;
    else
      reinterpret_cast<uint16_t*>(&r.g[0][0])[row * kK + i] = 0;
  }
}

// Raw beta of row `row` of the chunk starting at tok0 (0 past the end).
__device__ __forceinline__ float load_beta_raw(const PrefillArgs& a, int64_t tok0, int row,
                                               int nvalid, int hv) {
  if (row >= nvalid) return 0.0f;
  return load_f32_or_bf16(a.beta, a.beta_f32, (tok0 + row) * a.beta_stride + hv);
}

// 1 / ||x|| from the squared norm ss (the oracle's l2norm epsilon), or 1 without l2norm.
__device__ __forceinline__ float inv_row_norm(const PrefillArgs& a, float ss) {
  return a.l2norm ? device::rsqrt_approx(ss + 1e-6f) : 1.0f;
}

// The bounded gate's sigmoid(A (x + bias)) = 1 / (1 + 2^(x c + bias c)) with c = -A log2(e),
// which gate_rows' factor lower_bound log2(e) turns into the log2 decay.
__device__ __forceinline__ float bounded_log2_decay(float x, float c, float bc) {
  return device::rcp_approx(1.0f + device::ex2_approx(fmaf(x, c, bc)));
}

// The unbounded gates' log2 decay of one element (gate_rows below; the warp intra kernel calls
// them per element): softplus with bl = bias log2(e), and the pre-gated gate, floored at
// -kMinLogDecay2 (see gate_rows).
__device__ __forceinline__ float softplus_log2_decay(float x, float bl, float A) {
  const float z = fmaf(x, kLog2e, bl);
  const float softplus2 =
      z > 20.0f * kLog2e ? z : device::lg2_approx(1.0f + device::ex2_approx(z));
  return device::fmax_nan(-A * softplus2, -kMinLogDecay2);
}
__device__ __forceinline__ float pregated_log2_decay(float x) {
  return device::fmax_nan(x * kLog2e, -kMinLogDecay2);
}

// Log2-decays of one key column for the kC rows of a chunk (rows >= nvalid: 0). The mode switch
// sits outside the row loop so the rows are independent straight-line code (ILP).
//
// The unbounded gates (softplus, pre-gated) are floored at 2^-kMinLogDecay2 per token: a stronger
// decay erases the state as completely in f32 (2^-128 of it is far below f32 resolution), but its
// log2 (-1443 for a gate of -1000) would make the chunk's running f32 sum G so large that the
// differences G_r - G_s of later rows lose ~1e-3 of relative precision (ulp(1443) ~ 1.2e-4 per
// addition). NaN stays NaN (max.NaN). The bounded gate never goes below lower_bound (>= -5).
// kN consecutive rows of one column from the row `nvalid` rows before the end (rows >= nvalid:
// 0; nvalid may be <= 0). kBounded: the caller knows a.gate == Gate::kBounded (no mode switch).
// Returns the factor f of the log2-decays al2[row] * f: the bounded gate leaves its constant
// lower_bound log2(e) to the caller's cumulative sum (one FMA per row instead of a multiply and an
// add); the other gates return 1 (an FMA with 1 is the add, bit for bit).
template <bool kBounded = false, int kN = kC>
__device__ __forceinline__ float gate_rows(const PrefillArgs& a, const float (&x)[kN], float bias,
                                           float A, int nvalid, float (&al2)[kN]) {
  float factor = 1.0f;
  // (x + bias) c as one FMA per row, x c + (bias c), with bias c formed once per column.
  switch (kBounded ? Gate::kBounded : a.gate) {
    case Gate::kBounded: {
      const float c = -A * kLog2e, bc = bias * c;
#pragma unroll
      for (int row = 0; row < kN; ++row) al2[row] = bounded_log2_decay(x[row], c, bc);
      factor = a.lower_bound_log2;
      break;
    }
    case Gate::kSoftplus: {
      const float bl = bias * kLog2e;
#pragma unroll
      for (int row = 0; row < kN; ++row) al2[row] = softplus_log2_decay(x[row], bl, A);
      break;
    }
    default:
#pragma unroll
      for (int row = 0; row < kN; ++row) al2[row] = pregated_log2_decay(x[row]);
  }
  if (nvalid < kN) {  // the last chunk of a sequence only (uniform: one compare per chunk)
#pragma unroll
    for (int row = 0; row < kN; ++row) al2[row] = row < nvalid ? al2[row] : 0.0f;
  }
  return factor;
}

// Thread i (key column i): the gate of its column for all kC rows and the cumulative sum G (log2)
// from G0 in registers (Gr). The scan kernel's prepare.
template <class Raw>
__device__ __forceinline__ void gate_cumsum(const PrefillArgs& a, const Raw& r, int nvalid,
                                            float bias, float A, int i, float G0,
                                            float (&Gr)[kC]) {
  const uint16_t* g16 = reinterpret_cast<const uint16_t*>(&r.g[0][0]);
  float x[kC];
  // One loop per gate type: with the select inside one loop, ptxas predicated both loads (and the
  // conversion) of every row, issuing them all (Nsight Compute, the scan kernel's prepare).
  if (a.g_f32) {
#pragma unroll
    for (int row = 0; row < kC; ++row) x[row] = r.g[row][i];
  } else {
#pragma unroll
    for (int row = 0; row < kC; ++row) x[row] = bf16_bits_to_f32(g16[row * kK + i]);
  }
  float al2[kC];
  const float f = gate_rows(a, x, bias, A, nvalid, al2);
  float G = G0;
#pragma unroll
  for (int row = 0; row < kC; ++row) {
    G = fmaf(al2[row], f, G);
    Gr[row] = G;
  }
}

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

}  // namespace fastkda::prefill_cuda
