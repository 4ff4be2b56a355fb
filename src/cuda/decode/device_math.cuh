// Device helpers for the decode kernel: bf16 conversion, vector loads of token inputs, state chunk
// load/store (fp32 or bf16, streaming cache hints), float4 arithmetic, and the gate / beta
// activations of DESIGN §2 in fp32 with accurate expf / log1pf (no fast-math approximations, so the
// CPU reference predicts the kernel to fp32 rounding).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/decode/config.h"
#include "cuda/device/ptx.cuh"

namespace fastkda::decode_cuda {

// ---- scalars ---------------------------------------------------------------------------------
__device__ __forceinline__ float bf16_to_f32(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}
__device__ __forceinline__ uint16_t f32_to_bf16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// ---- token inputs: N contiguous elements -> float[N] with 4/8/16-byte loads
// ---------------------- bf16 needs 2N-byte alignment (N <= 4) or 8 bytes (N % 4 == 0); f32 needs 8
// (N == 2) or 16 bytes.
template <int N>
__device__ __forceinline__ void load_bf16(const uint16_t* p, float (&x)[N]) {
  if constexpr (N == 2) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    x[0] = bf16_to_f32(u & 0xffffu);
    x[1] = bf16_to_f32(u >> 16);
  } else {
    static_assert(N % 4 == 0, "load_bf16: N must be 2 or a multiple of 4");
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
      const uint2 u = reinterpret_cast<const uint2*>(p)[c];
      x[4 * c + 0] = bf16_to_f32(u.x & 0xffffu);
      x[4 * c + 1] = bf16_to_f32(u.x >> 16);
      x[4 * c + 2] = bf16_to_f32(u.y & 0xffffu);
      x[4 * c + 3] = bf16_to_f32(u.y >> 16);
    }
  }
}
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&x)[N]) {
  if constexpr (N == 2) {
    const float2 u = *reinterpret_cast<const float2*>(p);
    x[0] = u.x;
    x[1] = u.y;
  } else {
    static_assert(N % 4 == 0, "load_f32: N must be 2 or a multiple of 4");
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
      const float4 u = reinterpret_cast<const float4*>(p)[c];
      x[4 * c + 0] = u.x;
      x[4 * c + 1] = u.y;
      x[4 * c + 2] = u.z;
      x[4 * c + 3] = u.w;
    }
  }
}
__device__ __forceinline__ float load_scalar(const void* p, bool is_f32, int64_t i) {
  return is_f32 ? static_cast<const float*>(p)[i] : bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

// ---- state chunks: kVec = 4 consecutive elements, read once and written once (streaming) ------
__device__ __forceinline__ float4 load_state_chunk(const float* p) {
  return __ldcs(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ float4 load_state_chunk(const uint16_t* p) {
  const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
  return make_float4(bf16_to_f32(u.x & 0xffffu), bf16_to_f32(u.x >> 16), bf16_to_f32(u.y & 0xffffu),
                     bf16_to_f32(u.y >> 16));
}
__device__ __forceinline__ void store_state_chunk(float* p, float4 s) {
  __stcs(reinterpret_cast<float4*>(p), s);
}
__device__ __forceinline__ void store_state_chunk(uint16_t* p, float4 s) {
  uint2 u;
  u.x = uint32_t(f32_to_bf16(s.x)) | (uint32_t(f32_to_bf16(s.y)) << 16);
  u.y = uint32_t(f32_to_bf16(s.z)) | (uint32_t(f32_to_bf16(s.w)) << 16);
  __stcs(reinterpret_cast<uint2*>(p), u);
}

using device::prefetch_l2;  // L2 prefetch of the 128-byte line holding p (device/ptx.cuh)

// ---- float4 arithmetic -------------------------------------------------------------------------
__device__ __forceinline__ float4 mul4(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ __forceinline__ float4 scale4(float4 a, float s) {
  return make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
}
// a * s + c
__device__ __forceinline__ float4 fma4(float4 a, float s, float4 c) {
  return make_float4(fmaf(a.x, s, c.x), fmaf(a.y, s, c.y), fmaf(a.z, s, c.z), fmaf(a.w, s, c.w));
}
// a * b + c (elementwise)
__device__ __forceinline__ float4 fma4(float4 a, float4 b, float4 c) {
  return make_float4(fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y), fmaf(a.z, b.z, c.z),
                     fmaf(a.w, b.w, c.w));
}
// acc + a·b
__device__ __forceinline__ float dot4_acc(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}
__device__ __forceinline__ float4 shfl_xor4(float4 a, int mask) {
  return make_float4(
      __shfl_xor_sync(0xffffffffu, a.x, mask), __shfl_xor_sync(0xffffffffu, a.y, mask),
      __shfl_xor_sync(0xffffffffu, a.z, mask), __shfl_xor_sync(0xffffffffu, a.w, mask));
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// ---- activations (DESIGN §2), fp32 ------------------------------------------------------------
__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_f32(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Log-decay a (<= 0) from x = g + dt_bias; A = exp(A_log[hv]) or 1.
__device__ __forceinline__ float gate_log_decay(GateKind kind, float x, float A,
                                                float lower_bound) {
  switch (kind) {
    case GateKind::kBounded:
      return lower_bound * sigmoid_f32(A * x);
    case GateKind::kSoftplus:
      return -A * softplus_f32(x);
    default:
      return x;  // pre-gated
  }
}
__device__ __forceinline__ float beta_activation(BetaKind kind, float b) {
  switch (kind) {
    case BetaKind::kSigmoid:
      return sigmoid_f32(b);
    case BetaKind::kTwoSigmoid:
      return 2.0f * sigmoid_f32(b);
    default:
      return b;
  }
}

}  // namespace fastkda::decode_cuda
