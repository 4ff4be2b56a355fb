// A C entry point to fastkda::decode for bench/bench_decode.py (ctypes), so the benchmark can time
// fastkda and fla on the same torch tensors, the same stream and the same CUDA graph without
// waiting for the Python package. Device pointers only; returns 0, or -1 with the message in err.
#include <cstdint>
#include <cstring>
#include <exception>

#include "fastkda/fastkda.h"

extern "C" int fastkda_bench_decode(const void* q, const void* k, const void* v, const void* g,
                                    const void* beta, void* out, const float* A_log,
                                    const float* dt_bias, void* state_pool, const int32_t* slots,
                                    const int32_t* num_accepted, int64_t N, int tokens, int H,
                                    int HV, int K, int V, int64_t num_slots, int64_t slot_stride,
                                    int per_token_states, int k_first, int state_bf16,
                                    int gate_mode, float lower_bound, int beta_mode, int g_f32,
                                    int beta_f32, void* stream, char* err, int err_len) {
  try {
    fastkda::DecodeParams p;
    p.device = fastkda::Device::kCUDA;
    p.stream = stream;
    p.H = H, p.HV = HV, p.K = K, p.V = V;
    p.io_dtype = fastkda::DType::kBF16;
    p.q = q, p.k = k, p.v = v, p.g = g, p.beta = beta, p.out = out;
    p.g_dtype = g_f32 ? fastkda::DType::kF32 : fastkda::DType::kBF16;
    p.beta_dtype = beta_f32 ? fastkda::DType::kF32 : fastkda::DType::kBF16;
    p.gate_mode = static_cast<fastkda::GateMode>(gate_mode);
    p.lower_bound = lower_bound;
    p.A_log = A_log, p.dt_bias = dt_bias;
    p.beta_mode = static_cast<fastkda::BetaMode>(beta_mode);
    p.l2norm_qk = true;
    p.N = N, p.tokens = tokens;
    p.state_pool = state_pool;
    p.state_dtype = state_bf16 ? fastkda::DType::kBF16 : fastkda::DType::kF32;
    p.state_layout = k_first ? fastkda::StateLayout::kKFirst : fastkda::StateLayout::kVFirst;
    p.num_slots = num_slots, p.slots = slots, p.slot_stride = slot_stride;
    p.per_token_states = per_token_states != 0;
    p.num_accepted = num_accepted;
    fastkda::decode(p);
    return 0;
  } catch (const std::exception& e) {
    if (err && err_len > 0) {
      std::strncpy(err, e.what(), size_t(err_len) - 1);
      err[err_len - 1] = '\0';
    }
    return -1;
  }
}
