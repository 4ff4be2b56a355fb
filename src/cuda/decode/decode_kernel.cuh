// Decode step (DESIGN §2, §4 "Decode"): 1..8 tokens per sequence on a state pool, in place.
//
// Per token t, value head hv, with S^T the [V, K] state (row = one value dim):
//   q̃ = scale · q̂,  d = exp(a),  S' = S ⊙ d (each row scaled column-wise)
//   (k̂·S')_v and (q̃·S')_v            one pass over the state, both reductions together
//   u_v = β (v_v − (k̂·S')_v)
//   o_v = (q̃·S')_v + u_v (q̃·k̂)        = q̃·S'' without a second pass (S'' = S' + u k̂^T)
//   S'' = S' + u k̂^T
// The output identity o = q̃·(S' + u k̂^T) is exact algebra; only fp32 rounding differs from
// evaluating q̃·S'' after the update (fla's order).
//
// Grid: one CTA per (sequence n, value head hv, slice of kBlockV value rows), flattened into
// blockIdx.x as ((n · HV + hv) · V / kBlockV + slice). The CTA owns rows v0 .. v0 + kBlockV of S^T
// and all K columns, so every reduction over K is CTA-local (V-first: warp-local).
// 128 threads; each holds K / 16 chunks of 4 state elements in registers for the whole kernel: the
// state is read once (16-byte streaming loads) and written once per written slot.
//
// Launched with programmatic dependent launch (PDL): phase 0 waits for the previous kernel on the
// stream (griddepcontrol.wait) and lets the next one stage its CTAs. Before the wait, the first
// resident wave of CTAs prefetches its own state tile into L2 from a possibly stale read of its
// slot (a hint only: every value used is read after the wait; L2 is the device's point of
// coherence). Phases:
//   1. slot columns and num_accepted (lane j holds slots[n, j]); inputs of token t = warp into
//      registers — all loads issued before anything waits.
//   2. read slot resolved; padding row (negative / out-of-range slot or num_accepted):
//      out rows = 0, nothing read or written, return.
//   3. state tile loads issued, then an L2 prefetch of the tile of the CTA one resident wave later
//      (its slot loaded in phase 1; config.h kPrefetchWaves); meanwhile the prologue turns the
//      token inputs into q̃, k̂, d, β, q̃·k̂ and the v slice in shared memory (fused l2 norm, gate,
//      beta activation); warp w prepares tokens w, w + 4 (the second one's inputs loaded only now:
//      fewer live registers).
//   4. token loop (V-first: shuffles within 8-lane row groups; K-first: 2 shuffles + a
//      double-buffered cross-warp pass in shared memory); per-token states stored if asked.
//   5. final state stored to the read slot (unless per-token states), out rows written (bf16).
//
// Shared memory (all members live for the whole kernel, K = 128: 16.4 KB): see SharedStorage.
#pragma once

#include <cstdint>

#include "cuda/decode/config.h"
#include "cuda/decode/device_math.cuh"

namespace fastkda::decode_cuda {

template <int kK>
struct SharedStorage {
  float q[kMaxTokens][kK];         // scale · q̂           (prologue -> token loop)
  float k[kMaxTokens][kK];         // k̂
  float decay[kMaxTokens][kK];     // exp(a)
  float v[kMaxTokens][kBlockV];    // v rows v0 .. v0 + kBlockV
  float out[kMaxTokens][kBlockV];  // o rows, written by the token loop, stored at the end
  float beta[kMaxTokens];          // activated beta
  float qk[kMaxTokens];            // scale · q̂·k̂
  float4 partial[2][kWarps][kLanesPerKRow][2];  // K-first: per-warp (k̂·S', q̃·S'), by token parity
};

// Which state chunks (4 consecutive elements) thread (warp, lane) owns; chunk x of kChunks.
template <int kK, bool kVFirst>
struct TileMap {
  static constexpr int kChunks = kK / 16;  // kBlockV * kK / kVec / kThreads
  static_assert(kChunks * kVec * kThreads == kBlockV * kK, "tile must cover kBlockV x K");

  // V-first: x = j * kColChunks + i -> row w*8 + j*4 + lane/8 of the slice, column chunk lane%8 +
  // 8i.
  static constexpr int kColChunks = kK / (kVec * kLanesPerRow);
  __device__ static int row(int warp, int lane, int j) {
    return warp * (kBlockV / kWarps) + j * (32 / kLanesPerRow) + lane / kLanesPerRow;
  }
  __device__ static int col(int lane, int i) {
    return (lane % kLanesPerRow + kLanesPerRow * i) * kVec;
  }
  // K-first: chunk x -> k-row x*16 + warp*4 + lane/8, value columns (lane%8)*4 .. +4 of the slice.
  __device__ static int krow(int warp, int lane, int x) {
    return x * (kWarps * kKRowsPerWarpStep) + warp * kKRowsPerWarpStep + lane / kLanesPerKRow;
  }
  // Element offset of chunk x inside one state matrix, relative to the slice origin.
  __device__ static int64_t offset(int warp, int lane, int x, int V, int v0) {
    if constexpr (kVFirst) {
      return int64_t(v0 + row(warp, lane, x / kColChunks)) * kK + col(lane, x % kColChunks);
    } else {
      return int64_t(krow(warp, lane, x)) * V + v0 + (lane % kLanesPerKRow) * kVec;
    }
  }
};

// Raw inputs of one token as seen by one lane: K/32 columns of q, k, g; one v row; beta.
template <int kK>
struct TokenInputs {
  static constexpr int kC = kK / 32;
  float q[kC], k[kC], g[kC];
  float v, beta;
};

template <int kK>
__device__ __forceinline__ void load_token_inputs(const DecodeArgs& a, int64_t row, int h, int hv,
                                                  int v0, int lane, TokenInputs<kK>& in) {
  constexpr int kC = TokenInputs<kK>::kC;
  load_bf16<kC>(a.q + row * a.q_stride + int64_t(h) * kK + lane * kC, in.q);
  load_bf16<kC>(a.k + row * a.k_stride + int64_t(h) * kK + lane * kC, in.k);
  const int64_t g0 = row * a.g_stride + int64_t(hv) * kK + lane * kC;
  if (a.g_f32)
    load_f32<kC>(static_cast<const float*>(a.g) + g0, in.g);
  else
    load_bf16<kC>(static_cast<const uint16_t*>(a.g) + g0, in.g);
  static_assert(kBlockV == 32, "one v row per lane");
  in.v = bf16_to_f32(a.v[row * a.v_stride + int64_t(hv) * a.V + v0 + lane]);
  in.beta = load_scalar(a.beta, a.beta_f32, row * a.beta_stride + hv);
}

// Fused l2 norm, gate and beta for token t (one warp): writes q̃, k̂, d, v, β, q̃·k̂ to smem.
template <int kK>
__device__ __forceinline__ void prepare_token(const DecodeArgs& a, const TokenInputs<kK>& in,
                                              const float (&bias)[kK / 32], float A, int t,
                                              int lane, SharedStorage<kK>& sm) {
  constexpr int kC = kK / 32;
  float sq = 0.f, sk = 0.f, sqk = 0.f;
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    sq = fmaf(in.q[c], in.q[c], sq);
    sk = fmaf(in.k[c], in.k[c], sk);
    sqk = fmaf(in.q[c], in.k[c], sqk);
  }
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) {
    sq += __shfl_xor_sync(0xffffffffu, sq, m);
    sk += __shfl_xor_sync(0xffffffffu, sk, m);
    sqk += __shfl_xor_sync(0xffffffffu, sqk, m);
  }
  const float rq = a.l2norm ? 1.0f / sqrtf(sq + 1e-6f) : 1.0f;
  const float rk = a.l2norm ? 1.0f / sqrtf(sk + 1e-6f) : 1.0f;
  const float rqs = rq * a.scale;
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    sm.q[t][lane * kC + c] = in.q[c] * rqs;
    sm.k[t][lane * kC + c] = in.k[c] * rk;
    sm.decay[t][lane * kC + c] = expf(gate_log_decay(a.gate, in.g[c] + bias[c], A, a.lower_bound));
  }
  sm.v[t][lane] = in.v;
  if (lane == 0) {
    sm.beta[t] = beta_activation(a.beta_kind, in.beta);
    sm.qk[t] = sqk * rqs * rk;
  }
}

// One token on a V-first tile: rows are warp-local, reduced over the 8 lanes sharing a row.
template <int kK>
__device__ __forceinline__ void token_step_vfirst(float4 (&S)[kK / 16], SharedStorage<kK>& sm,
                                                  int t, int warp, int lane) {
  using Map = TileMap<kK, true>;
  constexpr int kI = Map::kColChunks, kJ = kRowsPerThread;
  float pk[kJ], pq[kJ];
#pragma unroll
  for (int j = 0; j < kJ; ++j) pk[j] = pq[j] = 0.f;
#pragma unroll
  for (int i = 0; i < kI; ++i) {
    const int c = Map::col(lane, i);
    const float4 d = *reinterpret_cast<const float4*>(&sm.decay[t][c]);
    const float4 kh = *reinterpret_cast<const float4*>(&sm.k[t][c]);
    const float4 qh = *reinterpret_cast<const float4*>(&sm.q[t][c]);
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      float4& s = S[j * kI + i];
      s = mul4(s, d);
      pk[j] = dot4_acc(s, kh, pk[j]);
      pq[j] = dot4_acc(s, qh, pq[j]);
    }
  }
#pragma unroll
  for (int m = 1; m < kLanesPerRow; m *= 2) {
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      pk[j] += __shfl_xor_sync(0xffffffffu, pk[j], m);
      pq[j] += __shfl_xor_sync(0xffffffffu, pq[j], m);
    }
  }
  const float beta = sm.beta[t], qk = sm.qk[t];
  float u[kJ];
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int r = Map::row(warp, lane, j);
    u[j] = beta * (sm.v[t][r] - pk[j]);
    if (lane % kLanesPerRow == 0) sm.out[t][r] = fmaf(u[j], qk, pq[j]);
  }
#pragma unroll
  for (int i = 0; i < kI; ++i) {
    const float4 kh = *reinterpret_cast<const float4*>(&sm.k[t][Map::col(lane, i)]);
#pragma unroll
    for (int j = 0; j < kJ; ++j) S[j * kI + i] = fma4(kh, u[j], S[j * kI + i]);
  }
}

// One token on a K-first tile: each thread holds 4 value columns at K/16 k-rows; the reduction
// over k is 2 shuffles (4 k-rows per warp step) plus a cross-warp pass through shared memory.
template <int kK>
__device__ __forceinline__ void token_step_kfirst(float4 (&S)[kK / 16], SharedStorage<kK>& sm,
                                                  int t, int warp, int lane) {
  using Map = TileMap<kK, false>;
  float4 pk = make_float4(0.f, 0.f, 0.f, 0.f), pq = pk;
#pragma unroll
  for (int x = 0; x < Map::kChunks; ++x) {
    const int kr = Map::krow(warp, lane, x);
    S[x] = scale4(S[x], sm.decay[t][kr]);
    pk = fma4(S[x], sm.k[t][kr], pk);
    pq = fma4(S[x], sm.q[t][kr], pq);
  }
#pragma unroll
  for (int m = kLanesPerKRow; m < 32; m *= 2) {
    pk = add4(pk, shfl_xor4(pk, m));
    pq = add4(pq, shfl_xor4(pq, m));
  }
  const int vq = lane % kLanesPerKRow;
  float4(&part)[kWarps][kLanesPerKRow][2] = sm.partial[t & 1];
  if (lane < kLanesPerKRow) {
    part[warp][vq][0] = pk;
    part[warp][vq][1] = pq;
  }
  __syncthreads();  // partial[t & 1] is rewritten at token t + 2, after the next token's barrier
  pk = part[0][vq][0];
  pq = part[0][vq][1];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    pk = add4(pk, part[w][vq][0]);
    pq = add4(pq, part[w][vq][1]);
  }
  const float beta = sm.beta[t], qk = sm.qk[t];
  const float4 vv = *reinterpret_cast<const float4*>(&sm.v[t][vq * kVec]);
  const float4 u = make_float4(beta * (vv.x - pk.x), beta * (vv.y - pk.y), beta * (vv.z - pk.z),
                               beta * (vv.w - pk.w));
  if (warp == 0 && lane < kLanesPerKRow)
    *reinterpret_cast<float4*>(&sm.out[t][vq * kVec]) = fma4(u, qk, pq);
#pragma unroll
  for (int x = 0; x < Map::kChunks; ++x) S[x] = fma4(u, sm.k[t][Map::krow(warp, lane, x)], S[x]);
}

// L2 prefetch of the state tile (slot, hv, rows v0 .. v0 + kBlockV); nothing for an invalid slot.
// A hint only: L2 is the device's point of coherence, so data loaded later is current even if the
// slot value or the tile changed in between.
template <int kK, bool kVFirst, class StateT>
__device__ __forceinline__ void prefetch_tile(const DecodeArgs& a, int slot, int hv, int v0) {
  if (slot < 0 || slot >= a.num_slots) return;
  const StateT* tile =
      static_cast<const StateT*>(a.pool) + (int64_t(slot) * a.HV + hv) * (int64_t(kK) * a.V);
  if constexpr (kVFirst) {  // rows v0 .. v0 + kBlockV: kBlockV * kK contiguous elements
    constexpr int kLine = 128 / sizeof(StateT), kLines = kBlockV * kK / kLine;
    for (int l = threadIdx.x; l < kLines; l += kThreads)
      prefetch_l2(tile + int64_t(v0) * kK + l * kLine);
  } else {  // K rows of kBlockV elements (<= 128 bytes each)
    for (int l = threadIdx.x; l < kK; l += kThreads) prefetch_l2(tile + int64_t(l) * a.V + v0);
  }
}

template <int kK, bool kVFirst, class StateT>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm)
    decode_kernel(const __grid_constant__ DecodeArgs a) {
  __shared__ __align__(16) SharedStorage<kK> sm;
  using Map = TileMap<kK, kVFirst>;

  const int slices = a.V / kBlockV;
  const int slice = int(blockIdx.x % slices);
  const int hv = int((blockIdx.x / slices) % a.HV);
  const int64_t n = int64_t(blockIdx.x / slices) / a.HV;
  const int h = hv / (a.HV / a.H);
  const int v0 = slice * kBlockV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tokens = a.tokens;
  if constexpr (kUsePdl) {  // everything read below may come from the previous kernel
    if (blockIdx.x < a.early_prefetch_ctas && !(a.per_token_states && a.num_accepted))
      prefetch_tile<kK, kVFirst, StateT>(a, a.slots[n * a.slot_stride], hv, v0);
    device::griddep_wait();
    device::griddep_launch_dependents();
  }

  // ---- 1. slot columns, num_accepted, token inputs: all loads in flight together ------------
  const int columns = a.per_token_states ? tokens : 1;
  const int slot_j = lane < columns ? a.slots[n * a.slot_stride + lane] : -1;
  const int read_col = (a.per_token_states && a.num_accepted) ? a.num_accepted[n] - 1 : 0;
  // The slot of the CTA prefetch_ahead CTAs later (read column 0 only: not with num_accepted).
  const int64_t ahead = int64_t(blockIdx.x) + a.prefetch_ahead;
  const bool prefetch =
      a.prefetch_ahead > 0 && ahead < int64_t(gridDim.x) && !(a.per_token_states && a.num_accepted);
  const int64_t ahead_n = ahead / slices / a.HV;
  const int ahead_slot = prefetch ? a.slots[ahead_n * a.slot_stride] : -1;

  TokenInputs<kK> first;  // token `warp`; tokens warp + 4, .. are loaded after the state loads
  if (warp < tokens) load_token_inputs<kK>(a, n * tokens + warp, h, hv, v0, lane, first);
  float bias[kK / 32];
#pragma unroll
  for (int c = 0; c < kK / 32; ++c) bias[c] = 0.f;
  if (a.dt_bias) load_f32<kK / 32>(a.dt_bias + int64_t(hv) * kK + lane * (kK / 32), bias);
  const float A = a.A_log ? expf(a.A_log[hv]) : 1.0f;

  // ---- 2. read slot; padding rows ------------------------------------------------------------
  const bool col_ok = read_col >= 0 && read_col < columns;
  const int read_slot = __shfl_sync(0xffffffffu, slot_j, col_ok ? read_col : 0);
  if (!col_ok || read_slot < 0 || read_slot >= a.num_slots) {
    for (int x = threadIdx.x; x < tokens * kBlockV; x += kThreads) {
      const int64_t row = n * tokens + x / kBlockV;
      a.out[(row * a.HV + hv) * a.V + v0 + x % kBlockV] = 0;
    }
    return;
  }

  // ---- 3. state tile loads, overlapped with the prologue ---------------------------------------
  StateT* pool = static_cast<StateT*>(a.pool);
  const int64_t matrix = int64_t(kK) * a.V;
  const int64_t hv_offset = int64_t(hv) * matrix;
  float4 S[Map::kChunks];
  {
    const StateT* src = pool + int64_t(read_slot) * a.HV * matrix + hv_offset;
#pragma unroll
    for (int x = 0; x < Map::kChunks; ++x)
      S[x] = load_state_chunk(src + Map::offset(warp, lane, x, a.V, v0));
  }
  prefetch_tile<kK, kVFirst, StateT>(a, ahead_slot, int((ahead / slices) % a.HV),
                                     int(ahead % slices) * kBlockV);
  if (warp < tokens) prepare_token<kK>(a, first, bias, A, warp, lane, sm);
  for (int t = warp + kWarps; t < tokens; t += kWarps) {
    TokenInputs<kK> in;
    load_token_inputs<kK>(a, n * tokens + t, h, hv, v0, lane, in);
    prepare_token<kK>(a, in, bias, A, t, lane, sm);
  }
  __syncthreads();

  // ---- 4. token loop ---------------------------------------------------------------------------
  for (int t = 0; t < tokens; ++t) {
    if constexpr (kVFirst)
      token_step_vfirst<kK>(S, sm, t, warp, lane);
    else
      token_step_kfirst<kK>(S, sm, t, warp, lane);
    if (a.per_token_states) {
      const int ws = __shfl_sync(0xffffffffu, slot_j, t);
      if (ws >= 0 && ws < a.num_slots) {
        StateT* dst = pool + int64_t(ws) * a.HV * matrix + hv_offset;
#pragma unroll
        for (int x = 0; x < Map::kChunks; ++x)
          store_state_chunk(dst + Map::offset(warp, lane, x, a.V, v0), S[x]);
      }
    }
  }

  // ---- 5. final state, out rows ----------------------------------------------------------------
  if (!a.per_token_states) {
    StateT* dst = pool + int64_t(read_slot) * a.HV * matrix + hv_offset;
#pragma unroll
    for (int x = 0; x < Map::kChunks; ++x)
      store_state_chunk(dst + Map::offset(warp, lane, x, a.V, v0), S[x]);
  }
  __syncthreads();
  for (int x = threadIdx.x; x < tokens * kBlockV; x += kThreads) {
    const int64_t row = n * tokens + x / kBlockV;
    a.out[(row * a.HV + hv) * a.V + v0 + x % kBlockV] =
        f32_to_bf16(sm.out[x / kBlockV][x % kBlockV]);
  }
}

}  // namespace fastkda::decode_cuda
