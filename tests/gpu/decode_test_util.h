// Helpers of the GPU decode tests: a random decode problem on host buffers (bf16 q/k/v, f32/bf16
// g and beta, a state pool whose unaddressed slots hold a 1e30 sentinel), device copies, and
// runs through the public API on CUDA, on CPU (cpu::decode, fp64) and through the fp64 oracle
// fastkda::forward(Algorithm::kRecurrent).
//
// Every problem draws fresh random inputs; its seed is printed in every failure message
// (describe()) and can be pinned with FASTKDA_TEST_SEED=<n>.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "fastkda/fastkda.h"
#include "gpu_buffers.h"

namespace fastkda_decode_test {

using fastkda::BetaMode;
using fastkda::DType;
using fastkda::GateMode;
using fastkda::StateLayout;

using fastkda_gpu_test::compare;
using fastkda_gpu_test::DeviceBuf;
using fastkda_gpu_test::Err;
using fastkda_gpu_test::fresh_seed;
using fastkda_gpu_test::have_gpu;
using fastkda_gpu_test::HostBuf;

struct Case {
  int64_t N = 16;
  int tokens = 1;
  int H = 4, HV = 8, K = 128, V = 128;
  StateLayout layout = StateLayout::kVFirst;
  DType state_dtype = DType::kF32, g_dtype = DType::kF32, beta_dtype = DType::kF32;
  GateMode gate = GateMode::kBounded;
  float lower_bound = -5.0f;
  bool A_log = true, dt_bias = true;
  BetaMode beta_mode = BetaMode::kSigmoid;
  bool l2norm = true;
  float scale = 0.0f;          // 0: K^-1/2
  bool strided = false;        // token strides larger than dense (views of a fused projection)
  double padding = 0.0;        // fraction of rows with a negative read slot
  bool per_token = false;      // per_token_states
  bool num_accepted = false;   // with per_token: random num_accepted in [1, tokens]
  double skip_writes = 0.0;    // with per_token: fraction of write columns set to -1
  double extreme_gates = 0.0;  // fraction of gate entries at +-1000 (pre-gated: -1000)
  int64_t spare_slots = 7;     // pool slots nobody addresses (must stay bitwise unchanged)
};

inline std::string describe(const Case& c, uint64_t seed) {
  std::ostringstream os;
  os << "N=" << c.N << " tokens=" << c.tokens << " H=" << c.H << " HV=" << c.HV << " K=" << c.K
     << " V=" << c.V << " layout=" << fastkda::to_string(c.layout)
     << " state=" << fastkda::to_string(c.state_dtype) << " g=" << fastkda::to_string(c.g_dtype)
     << " beta=" << fastkda::to_string(c.beta_dtype) << " gate=" << fastkda::to_string(c.gate)
     << " A_log=" << c.A_log << " dt_bias=" << c.dt_bias
     << " beta_mode=" << fastkda::to_string(c.beta_mode) << " strided=" << c.strided
     << " padding=" << c.padding << " per_token=" << c.per_token
     << " num_accepted=" << c.num_accepted << " extreme=" << c.extreme_gates << " seed=" << seed
     << " (FASTKDA_TEST_SEED)";
  return os.str();
}

// One decode problem: inputs fixed once drawn.
struct Problem {
  Case c;
  uint64_t seed;
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride;  // elements
  HostBuf q, k, v, g, beta;                                     // [N * tokens, stride]
  std::vector<float> A_log, dt_bias;
  HostBuf pool;  // [num_slots, HV, K * V]
  int64_t num_slots, slot_stride;
  std::vector<int32_t> slots, accepted;  // [N, slot_stride], [N]
  static constexpr float kSentinel = 1e30f;

  explicit Problem(Case cs, uint64_t s = fresh_seed()) : c(cs), seed(s) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uni(0.f, 1.f);
    const int64_t rows = c.N * c.tokens;
    const int pad = c.strided ? 24 : 0;
    q_stride = int64_t(c.H) * c.K + pad;
    k_stride = int64_t(c.H) * c.K + pad;
    v_stride = int64_t(c.HV) * c.V + pad;
    g_stride = int64_t(c.HV) * c.K + pad;
    beta_stride = c.HV + (c.strided ? 3 : 0);
    q = HostBuf(DType::kBF16, size_t(rows * q_stride));
    k = HostBuf(DType::kBF16, size_t(rows * k_stride));
    v = HostBuf(DType::kBF16, size_t(rows * v_stride));
    g = HostBuf(c.g_dtype, size_t(rows * g_stride));
    beta = HostBuf(c.beta_dtype, size_t(rows * beta_stride));
    for (size_t i = 0; i < q.size(); ++i) q.set(i, normal(rng));
    for (size_t i = 0; i < k.size(); ++i) k.set(i, normal(rng));
    for (size_t i = 0; i < v.size(); ++i) v.set(i, normal(rng));
    for (size_t i = 0; i < g.size(); ++i) {
      float x = normal(rng);
      if (c.gate == GateMode::kPreGated) x = -std::log1p(std::exp(-x));  // log sigmoid: <= 0
      if (c.extreme_gates > 0 && uni(rng) < c.extreme_gates)
        x = c.gate == GateMode::kPreGated ? -1000.f : (uni(rng) < 0.5f ? -1000.f : 1000.f);
      g.set(i, x);
    }
    for (size_t i = 0; i < beta.size(); ++i)
      beta.set(i, c.beta_mode == BetaMode::kGiven ? uni(rng) : normal(rng));
    const bool gated = c.gate != GateMode::kPreGated;
    if (gated && c.A_log)
      for (int h = 0; h < c.HV; ++h) A_log.push_back(std::log(1.f + 15.f * uni(rng)));
    if (gated && c.dt_bias)
      for (int i = 0; i < c.HV * c.K; ++i) dt_bias.push_back(-4.f + 2.f * normal(rng) * 0.5f);

    // Slots: every (row, column) that is addressed gets its own slot; the rest stay sentinel.
    slot_stride = c.per_token ? c.tokens + 1 : 1;  // one spare column: never addressed
    const int columns = c.per_token ? c.tokens : 1;
    num_slots = c.N * columns + c.spare_slots;
    std::vector<int32_t> perm(static_cast<size_t>(num_slots));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    slots.assign(size_t(c.N * slot_stride), -7);
    accepted.assign(size_t(c.N), 1);
    std::uniform_int_distribution<int> tok(1, c.tokens);
    for (int64_t n = 0; n < c.N; ++n) {
      for (int j = 0; j < columns; ++j) slots[n * slot_stride + j] = perm[n * columns + j];
      if (c.per_token && c.num_accepted) accepted[n] = tok(rng);
      const int read_col = accepted[n] - 1;
      if (c.padding > 0 && uni(rng) < c.padding) slots[n * slot_stride + read_col] = -1;
      if (c.per_token && c.skip_writes > 0)
        for (int j = 0; j < columns; ++j)
          if (j != read_col && uni(rng) < c.skip_writes) slots[n * slot_stride + j] = -1;
    }
    const int64_t matrix = int64_t(c.HV) * c.K * c.V;
    pool = HostBuf(c.state_dtype, size_t(num_slots * matrix));
    for (size_t i = 0; i < pool.size(); ++i) pool.set(i, kSentinel);
    for (int64_t n = 0; n < c.N; ++n)
      for (int j = 0; j < columns; ++j) {
        const int32_t s = slots[n * slot_stride + j];
        if (s < 0) continue;
        for (int64_t i = 0; i < matrix; ++i) pool.set(size_t(s * matrix + i), normal(rng));
      }
  }

  std::string describe() const { return fastkda_decode_test::describe(c, seed); }
  size_t out_elems() const { return size_t(c.N * c.tokens * c.HV * c.V); }
  int read_slot(int64_t n) const { return slots[n * slot_stride + accepted[n] - 1]; }

  // DecodeParams reading `inputs` (host or device copies of this problem's buffers).
  struct Ptrs {
    const void *q, *k, *v, *g, *beta;
    const float *A_log, *dt_bias;
    void *out, *pool;
    const int32_t *slots, *accepted;
  };
  fastkda::DecodeParams params(const Ptrs& p, fastkda::Device dev) const {
    fastkda::DecodeParams d;
    d.device = dev;
    d.H = c.H, d.HV = c.HV, d.K = c.K, d.V = c.V;
    d.io_dtype = DType::kBF16;
    d.q = p.q, d.k = p.k, d.v = p.v, d.g = p.g, d.beta = p.beta, d.out = p.out;
    d.g_dtype = c.g_dtype, d.beta_dtype = c.beta_dtype;
    d.q_stride = q_stride, d.k_stride = k_stride, d.v_stride = v_stride, d.g_stride = g_stride;
    d.beta_stride = beta_stride;
    d.gate_mode = c.gate, d.lower_bound = c.lower_bound;
    d.A_log = A_log.empty() ? nullptr : p.A_log;
    d.dt_bias = dt_bias.empty() ? nullptr : p.dt_bias;
    d.beta_mode = c.beta_mode, d.l2norm_qk = c.l2norm, d.scale = c.scale;
    d.N = c.N, d.tokens = c.tokens;
    d.state_pool = p.pool, d.state_dtype = c.state_dtype, d.state_layout = c.layout;
    d.num_slots = num_slots, d.slots = p.slots, d.slot_stride = slot_stride;
    d.per_token_states = c.per_token;
    d.num_accepted = (c.per_token && c.num_accepted) ? p.accepted : nullptr;
    return d;
  }
};

struct Result {
  HostBuf out;   // [N, tokens, HV, V] bf16
  HostBuf pool;  // the whole pool after the step
};

// Device copies of one problem's inputs (pool and out are per run).
struct DeviceInputs {
  DeviceBuf q, k, v, g, beta, A_log, dt_bias, slots, accepted;
  explicit DeviceInputs(const Problem& p)
      : q(p.q.data(), p.q.bytes()),
        k(p.k.data(), p.k.bytes()),
        v(p.v.data(), p.v.bytes()),
        g(p.g.data(), p.g.bytes()),
        beta(p.beta.data(), p.beta.bytes()),
        A_log(p.A_log.data(), p.A_log.size() * 4),
        dt_bias(p.dt_bias.data(), p.dt_bias.size() * 4),
        slots(p.slots.data(), p.slots.size() * 4),
        accepted(p.accepted.data(), p.accepted.size() * 4) {}
};

// Runs the step on the GPU from `pool_in` (default: the problem's pool); out poisoned with NaN.
inline Result run_gpu(const Problem& p, const DeviceInputs& d, const HostBuf* pool_in = nullptr,
                      cudaStream_t stream = nullptr) {
  const HostBuf& pool0 = pool_in ? *pool_in : p.pool;
  Result r{HostBuf(DType::kBF16, p.out_elems()), pool0};
  std::fill(r.out.h.begin(), r.out.h.end(), uint16_t(0x7fc0));  // NaN
  DeviceBuf out(r.out.data(), r.out.bytes()), pool(pool0.data(), pool0.bytes());
  fastkda::DecodeParams dp = p.params(
      {d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(),
       static_cast<const float*>(d.A_log.get()), static_cast<const float*>(d.dt_bias.get()),
       out.get(), pool.get(), static_cast<const int32_t*>(d.slots.get()),
       static_cast<const int32_t*>(d.accepted.get())},
      fastkda::Device::kCUDA);
  dp.stream = stream;
  fastkda::decode(dp);
  if (cudaDeviceSynchronize() != cudaSuccess) throw fastkda::Error("decode: CUDA error after run");
  out.to_host(r.out.data());
  pool.to_host(r.pool.data());
  return r;
}

// Runs the step on the CPU (cpu::decode, fp64 working precision).
inline Result run_cpu(const Problem& p, const HostBuf* pool_in = nullptr) {
  const HostBuf& pool0 = pool_in ? *pool_in : p.pool;
  Result r{HostBuf(DType::kBF16, p.out_elems()), pool0};
  std::fill(r.out.h.begin(), r.out.h.end(), uint16_t(0x7fc0));
  fastkda::decode(
      p.params({p.q.data(), p.k.data(), p.v.data(), p.g.data(), p.beta.data(), p.A_log.data(),
                p.dt_bias.data(), r.out.data(), r.pool.data(), p.slots.data(), p.accepted.data()},
               fastkda::Device::kCPU));
  return r;
}

// The fp64 oracle: fastkda::forward(kRecurrent) over [N, tokens] with state_indices = the read
// slots and the final state written back into a copy of the pool (no per-token states).
inline Result run_oracle(const Problem& p) {
  Result r{HostBuf(DType::kBF16, p.out_elems()), p.pool};
  std::fill(r.out.h.begin(), r.out.h.end(), uint16_t(0x7fc0));
  std::vector<int32_t> idx(size_t(p.c.N));
  for (int64_t n = 0; n < p.c.N; ++n) idx[n] = p.read_slot(n);
  fastkda::DecodeParams d =
      p.params({p.q.data(), p.k.data(), p.v.data(), p.g.data(), p.beta.data(), p.A_log.data(),
                p.dt_bias.data(), r.out.data(), r.pool.data(), p.slots.data(), p.accepted.data()},
               fastkda::Device::kCPU);
  fastkda::ForwardParams f;
  static_cast<fastkda::KdaInputs&>(f) = static_cast<const fastkda::KdaInputs&>(d);
  f.B = p.c.N, f.T = p.c.tokens;
  f.initial_state = r.pool.data(), f.final_state = r.pool.data();
  f.initial_state_dtype = f.final_state_dtype = p.c.state_dtype;
  f.state_layout = p.c.layout;
  f.state_indices = idx.data(), f.num_state_slots = p.num_slots;
  f.algorithm = fastkda::Algorithm::kRecurrent;
  fastkda::forward(f);
  return r;
}

// Pool elements of slots that the step must leave untouched (never addressed, or padding rows'
// write columns); true for every element of a slot the step may write.
inline std::vector<bool> written_slots(const Problem& p) {
  std::vector<bool> w(size_t(p.num_slots), false);
  for (int64_t n = 0; n < p.c.N; ++n) {
    if (p.read_slot(n) < 0) continue;
    if (!p.c.per_token) {
      w[p.read_slot(n)] = true;
      continue;
    }
    for (int j = 0; j < p.c.tokens; ++j) {
      const int32_t s = p.slots[n * p.slot_stride + j];
      if (s >= 0) w[s] = true;
    }
  }
  return w;
}

}  // namespace fastkda_decode_test
