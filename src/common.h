// Internal helpers shared by the API, the CPU implementation and the CUDA launchers (host side).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "fastkda/fastkda.h"

namespace fastkda {

// ---- errors -----------------------------------------------------------------------------------
// Messages are built without iostreams: numbers through std::to_chars, so the error path needs no
// locale. (A Python extension linked against a static libstdc++, as the GPU machine's toolchain
// produced, segfaulted formatting an int through std::ostringstream; strings alone went through.)
namespace detail {
template <class A>
void append_one(std::string& s, const A& a) {
  if constexpr (std::is_convertible_v<const A&, std::string_view>) {
    s += std::string_view(a);
  } else if constexpr (requires { a.append_to(s); }) {  // a type that prints itself
    a.append_to(s);
  } else if constexpr (std::is_same_v<A, bool>) {
    s += a ? "true" : "false";
  } else if constexpr (std::is_arithmetic_v<A>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), a);
    s.append(buf, r.ptr);
  } else if constexpr (std::is_enum_v<A>) {
    append_one(s, static_cast<std::underlying_type_t<A>>(a));
  } else {
    static_assert(std::is_pointer_v<A>,
                  "error message argument: string, number, enum, pointer or append_to(std::string&)");
    char buf[32] = "0x";
    const auto r = std::to_chars(buf + 2, buf + sizeof(buf),
                                 reinterpret_cast<uintptr_t>(a), 16);
    s.append(buf, r.ptr);
  }
}
template <class... Args>
[[noreturn]] void throw_error(const char* file, int line, const Args&... args) {
  std::string msg = "fastkda: ";
  (append_one(msg, args), ...);
  (void)file;
  (void)line;
  throw Error(msg);
}
}  // namespace detail

// FASTKDA_CHECK(cond, "argument", ": expected ", x, ", got ", y) throws fastkda::Error.
#define FASTKDA_CHECK(cond, ...)                                        \
  do {                                                                  \
    if (!(cond)) ::fastkda::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// A tuning knob from the environment (benchmarks, tests): unset or empty -> nullopt; otherwise a
// whole decimal integer that `valid` accepts, or a fastkda::Error naming the variable, what it
// expects (`expected`) and the value.
template <class Valid>
std::optional<int64_t> env_knob(const char* name, const char* expected, Valid valid) {
  const char* env = std::getenv(name);
  if (!env || !*env) return std::nullopt;
  const std::string_view s = env;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  FASTKDA_CHECK(ec == std::errc() && end == s.data() + s.size() && valid(v), name, ": expected ",
                expected, ", got '", s, "'");
  return v;
}

// ---- scalar types -----------------------------------------------------------------------------
inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline size_t dtype_size(DType d) {
  switch (d) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}
// Element i of a buffer holding f32 or bf16, as float.
inline float load_float(const void* p, DType d, int64_t i) {
  return d == DType::kF32 ? static_cast<const float*>(p)[i]
                          : bf16_to_float(static_cast<const uint16_t*>(p)[i]);
}
inline void store_float(void* p, DType d, int64_t i, float x) {
  if (d == DType::kF32)
    static_cast<float*>(p)[i] = x;
  else
    static_cast<uint16_t*>(p)[i] = float_to_bf16(x);
}
inline int64_t load_index(const void* p, DType d, int64_t i) {
  return d == DType::kI64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

// ---- the activations of DESIGN §2, in one place (templated on the working precision) ---------
template <class R>
inline R sigmoid(R x) {
  return R(1) / (R(1) + std::exp(-x));
}
template <class R>
inline R softplus(R x) {  // log(1 + e^x) without overflow
  return x > R(20) ? x : std::log1p(std::exp(x));
}
// Log-decay a for a raw gate value x = g (without dt_bias); A = exp(A_log[h]) or 1.
template <class R>
inline R gate_log_decay(GateMode mode, R x, R dt_bias, R A, R lower_bound) {
  switch (mode) {
    case GateMode::kBounded: return lower_bound * sigmoid(A * (x + dt_bias));
    case GateMode::kSoftplus: return -A * softplus(x + dt_bias);
    case GateMode::kPreGated: return x;
  }
  return x;
}
template <class R>
inline R beta_activation(BetaMode mode, R b) {
  switch (mode) {
    case BetaMode::kSigmoid: return sigmoid(b);
    case BetaMode::kGiven: return b;
    case BetaMode::kTwoSigmoid: return R(2) * sigmoid(b);
  }
  return b;
}

// ---- resolved problem geometry (after validation) -------------------------------------------
struct Strides {
  int64_t q, k, v, g, beta, out;  // token strides in elements
};
inline Strides token_strides(const KdaInputs& p) {
  return {p.q_stride ? p.q_stride : int64_t(p.H) * p.K,
          p.k_stride ? p.k_stride : int64_t(p.H) * p.K,
          p.v_stride ? p.v_stride : int64_t(p.HV) * p.V,
          p.g_stride ? p.g_stride : int64_t(p.HV) * p.K,
          p.beta_stride ? p.beta_stride : int64_t(p.HV),
          int64_t(p.HV) * p.V};
}
inline float effective_scale(const KdaInputs& p) {
  return p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(p.K));
}
inline int64_t num_sequences(const ForwardParams& p) { return p.cu_seqlens ? p.N : p.B; }
// [begin, end) token rows (in the flattened [B*T] token axis) of sequence n. Host pointers only.
inline void sequence_range(const ForwardParams& p, int64_t n, int64_t* begin, int64_t* end) {
  if (p.cu_seqlens) {
    *begin = load_index(p.cu_seqlens, p.cu_seqlens_dtype, n);
    *end = load_index(p.cu_seqlens, p.cu_seqlens_dtype, n + 1);
  } else {
    *begin = n * p.T;
    *end = (n + 1) * p.T;
  }
}
// Element offset of S[i_k][i_v] inside one [K, V] or [V, K] state matrix.
inline int64_t state_offset(StateLayout layout, int K, int V, int i_k, int i_v) {
  return layout == StateLayout::kVFirst ? int64_t(i_v) * K + i_k : int64_t(i_k) * V + i_v;
}

// ---- internal entry points (called by api.cpp after validation) -----------------------------
// Everything validate(ForwardParams) checks except the workspace (which is sized from the rest).
void validate_problem(const ForwardParams& p);

namespace cpu {
void forward_recurrent(const ForwardParams& p);  // fp64 token recurrence: the oracle
void forward_chunked(const ForwardParams& p);    // fp32 chunked form (DESIGN §2)
void decode(const DecodeParams& p);              // decode step on the state pool
}  // namespace cpu

namespace cuda {
size_t prefill_workspace_size(const ForwardParams& p);
void prefill(const ForwardParams& p);  // validated params, device pointers
void decode(const DecodeParams& p);
}  // namespace cuda

}  // namespace fastkda
