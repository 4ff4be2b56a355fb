// Branch-free fp32 exp and softplus for the chunked CPU path, written so that GCC -O3 vectorises
// the loops that call them (libm's expf/log1pf are scalar calls: ~25% of the chunked forward).
//
// exp_fast: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, degree-6 minimax polynomial
// (Cephes expf), 2^n assembled in the exponent bits. Relative error <= 2 ulp on
// [-87.3, 88.3]; below -87.3 (where expf turns subnormal) it returns 0, above 88.3 it
// saturates at ~2.4e38. The chunked path only exponentiates non-positive numbers.
// softplus_fast(x) = max(x, 0) + log1p(exp(-|x|)), with log1p(y) = 2 atanh(y / (2 + y)) as an
// odd series in s = y / (2 + y) <= 1/3, truncated at s^15 (relative error < 1e-9 + rounding).
#pragma once

#include <bit>
#include <cstdint>

#include "common.h"
#include "cpu/token_step.h"  // FASTKDA_IVDEP

namespace fastkda::cpu {

// Branch-free select on bit patterns. Under GCC's default -ftrapping-math a float comparison in
// a loop body is "control flow" that blocks vectorisation; integer masks are not.
inline uint32_t select_bits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - uint32_t(c);
  return (a & m) | (b & ~m);
}

inline float exp_fast(float x) {
  constexpr uint32_t kLo = std::bit_cast<uint32_t>(-87.3f), kHi = std::bit_cast<uint32_t>(88.3f);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const uint32_t bx = std::bit_cast<uint32_t>(x);
  const bool tiny = bx > kLo;                    // x < -87.3 (sign set, larger magnitude)
  const bool huge = int32_t(bx) > int32_t(kHi);  // x > 88.3
  const float xc = std::bit_cast<float>(select_bits(tiny, kLo, select_bits(huge, kHi, bx)));
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = (p * r) * r + r + 1.0f;
  const float v = y * std::bit_cast<float>((int32_t(n) + 127) << 23);
  return std::bit_cast<float>(select_bits(tiny, 0u, std::bit_cast<uint32_t>(v)));
}

inline float softplus_fast(float x) {
  const uint32_t bx = std::bit_cast<uint32_t>(x);
  const float y = exp_fast(-std::bit_cast<float>(bx & 0x7fffffffu));  // exp(-|x|) in (0, 1]
  const float s = y / (2.0f + y), s2 = s * s;
  float p = 1.0f / 15.0f;
  p = p * s2 + 1.0f / 13.0f;
  p = p * s2 + 1.0f / 11.0f;
  p = p * s2 + 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  const float relu = std::bit_cast<float>(select_bits(int32_t(bx) < 0, 0u, bx));  // max(x, 0)
  return relu + 2.0f * s * p;
}

// Log-decay a[c] of one token and value head h from the raw gate g[c] (DESIGN §2 step 2; the
// same formulas as gate_log_decay in common.h, evaluated with the functions above).
// `zeros` ([K] zeros) stands in for an absent dt_bias, so the loops have no branch.
inline void log_decay_fast(const KdaInputs& p, int h, const float* g, const float* zeros,
                           float* a) {
  const int K = p.K;
  const float A = p.A_log ? std::exp(p.A_log[h]) : 1.0f;
  const float* bias = p.dt_bias ? p.dt_bias + int64_t(h) * K : zeros;
  const float lambda = p.lower_bound;
  switch (p.gate_mode) {
    case GateMode::kSoftplus:
      FASTKDA_IVDEP
      for (int c = 0; c < K; ++c) a[c] = -A * softplus_fast(g[c] + bias[c]);
      break;
    case GateMode::kBounded:
      FASTKDA_IVDEP
      for (int c = 0; c < K; ++c) a[c] = lambda / (1.0f + exp_fast(-A * (g[c] + bias[c])));
      break;
    case GateMode::kPreGated:
      for (int c = 0; c < K; ++c) a[c] = g[c];
      break;
  }
}

}  // namespace fastkda::cpu
