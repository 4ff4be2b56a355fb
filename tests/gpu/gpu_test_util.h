// Helpers of the GPU prefill tests: a random prefill problem on host buffers (bf16 q/k/v, f32 or
// bf16 g/beta/states, fixed-length or varlen, optional state pool with indices), device copies,
// one GPU run through fastkda::forward (outputs poisoned with NaN first) and the fp64 oracle
// (fastkda::forward, Algorithm::kRecurrent, on CPU copies with f32 q/k/v/out so the reference is
// not rounded to bf16), run sequence by sequence.
//
// Every problem draws fresh random inputs; the seed is in every failure message (describe()) and
// can be pinned with FASTKDA_TEST_SEED=<n>.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "fastkda/fastkda.h"
#include "gpu_buffers.h"

namespace fastkda_prefill_test {

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

#define FASTKDA_REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: GPU prefill tests skipped"

enum class InitState { kNone, kF32, kBF16 };

struct Case {
  int64_t B = 1, T = 64;
  std::vector<int64_t> seqlens;  // non-empty: varlen (B must be 1), T = sum
  int64_t lead = 0, tail = 0;    // varlen: tokens before the first / after the last sequence
  bool cu_i64 = false;
  int H = 2, HV = 2;
  DType g_dtype = DType::kF32, beta_dtype = DType::kF32;
  GateMode gate = GateMode::kBounded;
  float lower_bound = -5.0f;
  bool A_log = true, dt_bias = true;
  BetaMode beta_mode = BetaMode::kSigmoid;
  bool l2norm = true;
  float scale = 0.0f;
  InitState init = InitState::kF32;
  bool final_state = true;
  DType final_dtype = DType::kF32;
  StateLayout layout = StateLayout::kVFirst;
  bool pool = false;      // state_indices into a pool with spare slots (some indices -1)
  bool in_place = false;  // pool: initial_state == final_state
  bool strided = false;   // token strides larger than dense
  double extreme_gates =
      0.0;                 // fraction of gate entries at -1000 (softplus / pre-gated: per token)
  bool collinear = false;  // 32 identical keys, raw gate -12, beta logit +8
  bool boundary = false;   // chunk-boundary states (one sentinel row past the last, NaN)
  DType boundary_dtype = DType::kF32;
  bool cu_host = false;          // varlen: also pass cu_seqlens_host (validated; needs lead == 0)
  int64_t boundary_dropped = 0;  // num_boundary_states = rows - this (device cu_seqlens only)
};

inline std::string describe(const Case& c, uint64_t seed) {
  std::ostringstream os;
  os << "B=" << c.B << " T=" << c.T << " varlen=[";
  for (auto l : c.seqlens) os << l << ",";
  os << "] H=" << c.H << " HV=" << c.HV << " g=" << fastkda::to_string(c.g_dtype)
     << " beta=" << fastkda::to_string(c.beta_dtype) << " gate=" << fastkda::to_string(c.gate)
     << " A_log=" << c.A_log << " dt_bias=" << c.dt_bias
     << " beta_mode=" << fastkda::to_string(c.beta_mode) << " l2norm=" << c.l2norm
     << " init=" << int(c.init) << " final=" << c.final_state
     << " final_dtype=" << fastkda::to_string(c.final_dtype)
     << " layout=" << fastkda::to_string(c.layout) << " pool=" << c.pool
     << " in_place=" << c.in_place << " strided=" << c.strided << " extreme=" << c.extreme_gates
     << " collinear=" << c.collinear << " boundary=" << c.boundary
     << " boundary_dtype=" << fastkda::to_string(c.boundary_dtype) << " cu_host=" << c.cu_host
     << " boundary_dropped=" << c.boundary_dropped << " seed=" << seed << " (FASTKDA_TEST_SEED)";
  return os.str();
}

constexpr int kK = 128, kV = 128;
constexpr uint16_t kPoison = 0x7fc0;  // bf16 NaN

struct Problem {
  Case c;
  uint64_t seed;
  int64_t rows;  // B * T token rows
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride;
  std::vector<int64_t> cu;  // [N + 1] token offsets (varlen) -- also built for fixed length
  HostBuf q, k, v, g, beta;
  std::vector<float> A_log, dt_bias;
  int64_t num_seq, num_slots;
  std::vector<int32_t> indices;  // [num_seq] (pool)
  HostBuf init_state;            // [num_slots, HV, V*K]
  DType init_dtype = DType::kF32;

  explicit Problem(Case cs, uint64_t s = fresh_seed()) : c(cs), seed(s) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uni(0.f, 1.f);
    if (!c.seqlens.empty()) {
      c.B = 1;
      cu.push_back(c.lead);
      for (auto l : c.seqlens) cu.push_back(cu.back() + l);
      c.T = cu.back() + c.tail;
      num_seq = int64_t(c.seqlens.size());
    } else {
      for (int64_t b = 0; b <= c.B; ++b) cu.push_back(b * c.T);
      num_seq = c.B;
    }
    rows = c.B * c.T;
    const int pad = c.strided ? 40 : 0;
    q_stride = int64_t(c.H) * kK + pad;
    k_stride = int64_t(c.H) * kK + pad + 8;
    v_stride = int64_t(c.HV) * kV + pad;
    g_stride = int64_t(c.HV) * kK + pad;
    beta_stride = c.HV + (c.strided ? 3 : 0);
    q = HostBuf(DType::kBF16, size_t(rows * q_stride));
    k = HostBuf(DType::kBF16, size_t(rows * k_stride));
    v = HostBuf(DType::kBF16, size_t(rows * v_stride));
    g = HostBuf(c.g_dtype, size_t(rows * g_stride));
    beta = HostBuf(c.beta_dtype, size_t(rows * beta_stride));
    const float qk_scale = c.l2norm ? 1.0f : 1.0f / std::sqrt(float(kK));
    for (size_t i = 0; i < q.size(); ++i) q.set(i, qk_scale * normal(rng));
    for (size_t i = 0; i < k.size(); ++i) k.set(i, qk_scale * normal(rng));
    for (size_t i = 0; i < v.size(); ++i) v.set(i, normal(rng));
    for (int64_t t = 0; t < rows; ++t) {
      const bool extreme_token = c.extreme_gates > 0 && uni(rng) < c.extreme_gates;
      for (int64_t i = 0; i < g_stride; ++i) {
        float x = normal(rng);
        if (c.gate == GateMode::kPreGated) x = -std::log1p(std::exp(-x));  // log sigmoid <= 0
        if (extreme_token) {
          // -1000 per token as log-decay (pre-gated) or as softplus(g) (softplus: g = 1000);
          // bounded gates saturate at the lower bound.
          x = c.gate == GateMode::kPreGated ? -1000.f : 1000.f;
        }
        g.set(size_t(t * g_stride + i), x);
      }
    }
    for (size_t i = 0; i < beta.size(); ++i)
      beta.set(i, c.beta_mode == BetaMode::kGiven ? uni(rng) : normal(rng));
    const bool gated = c.gate != GateMode::kPreGated;
    if (gated && c.A_log)
      for (int h = 0; h < c.HV; ++h) A_log.push_back(std::log(1.f + 15.f * uni(rng)));
    if (gated && c.dt_bias)
      for (int i = 0; i < c.HV * kK; ++i) dt_bias.push_back(-4.0f + 0.5f * normal(rng));
    if (c.collinear) {  // first 32 tokens of every sequence: one key, weak decay, beta ~ 1
      for (int64_t n = 0; n < num_seq; ++n)
        for (int64_t t = cu[n]; t < std::min(cu[n + 1], cu[n] + 32); ++t) {
          for (int64_t i = 0; i < k_stride; ++i)
            k.h[size_t(t * k_stride + i)] = k.h[size_t(cu[n] * k_stride + i)];
          for (int64_t i = 0; i < g_stride; ++i) g.set(size_t(t * g_stride + i), -12.f);
          for (int64_t j = 0; j < beta_stride; ++j) beta.set(size_t(t * beta_stride + j), 8.f);
        }
    }
    num_slots = c.pool ? num_seq + 5 : num_seq;
    if (c.pool) {
      std::vector<int32_t> perm(static_cast<size_t>(num_slots));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t n = 0; n < num_seq; ++n)
        indices.push_back(uni(rng) < 0.2f ? -1 : perm[size_t(n)]);
    }
    init_dtype = c.init == InitState::kBF16 ? DType::kBF16 : DType::kF32;
    if (c.in_place) init_dtype = c.final_dtype;
    init_state = HostBuf(init_dtype, size_t(num_slots * c.HV * kK * kV));
    for (size_t i = 0; i < init_state.size(); ++i) init_state.set(i, 0.3f * normal(rng));
  }

  std::string describe() const { return fastkda_prefill_test::describe(c, seed); }
  size_t out_elems() const { return size_t(rows * c.HV * kV); }
  size_t state_elems() const { return size_t(num_slots * c.HV * kK * kV); }
  bool has_init() const { return c.init != InitState::kNone || c.in_place; }
  int64_t slot_of(int64_t n) const { return c.pool ? indices[size_t(n)] : n; }
  // Boundary-state rows (fla's `h`): sequence n owns rows [base[n], base[n + 1]), one per 64
  // tokens.
  std::vector<int64_t> boundary_base() const {
    constexpr int64_t kI = fastkda::ForwardParams::kBoundaryInterval;
    std::vector<int64_t> base{0};
    for (int64_t n = 0; n < num_seq; ++n)
      base.push_back(base.back() + (cu[size_t(n) + 1] - cu[size_t(n)] + kI - 1) / kI);
    return base;
  }
  int64_t boundary_rows() const { return boundary_base().back(); }
  size_t row_elems() const { return size_t(c.HV) * kK * kV; }  // one state row, all value heads

  struct Ptrs {
    const void *q, *k, *v, *g, *beta, *cu;
    const float *A_log, *dt_bias;
    void* out;
    const void* init;
    void* fin;
    const int32_t* indices;
  };
  fastkda::ForwardParams params(const Ptrs& p, fastkda::Device dev) const {
    fastkda::ForwardParams f;
    f.device = dev;
    f.H = c.H, f.HV = c.HV, f.K = kK, f.V = kV;
    f.io_dtype = DType::kBF16;
    f.q = p.q, f.k = p.k, f.v = p.v, f.g = p.g, f.beta = p.beta, f.out = p.out;
    f.g_dtype = c.g_dtype, f.beta_dtype = c.beta_dtype;
    f.q_stride = q_stride, f.k_stride = k_stride, f.v_stride = v_stride, f.g_stride = g_stride;
    f.beta_stride = beta_stride;
    f.gate_mode = c.gate, f.lower_bound = c.lower_bound;
    f.A_log = A_log.empty() ? nullptr : p.A_log;
    f.dt_bias = dt_bias.empty() ? nullptr : p.dt_bias;
    f.beta_mode = c.beta_mode, f.l2norm_qk = c.l2norm, f.scale = c.scale;
    f.B = c.B, f.T = c.T;
    if (!c.seqlens.empty()) {
      f.cu_seqlens = p.cu;
      f.cu_seqlens_dtype = c.cu_i64 ? DType::kI64 : DType::kI32;
      f.N = num_seq;
    }
    f.initial_state = has_init() ? p.init : nullptr;
    f.final_state = c.final_state ? p.fin : nullptr;
    f.initial_state_dtype = init_dtype;
    f.final_state_dtype = c.final_dtype;
    f.state_layout = c.layout;
    if (c.pool) f.state_indices = p.indices, f.num_state_slots = num_slots;
    return f;
  }
};

struct Result {
  HostBuf out;       // [rows, HV, V] bf16 (GPU) or f32 (oracle)
  HostBuf state;     // [num_slots, HV, ...] final states (initial contents where not written)
  HostBuf boundary;  // [boundary_rows + 1, HV, ...] with c.boundary; NaN where not written
};

struct DeviceInputs {
  DeviceBuf q, k, v, g, beta, A_log, dt_bias, cu, indices;
  size_t dt_bias_offset = 0;  // floats: run_gpu passes dt_bias + dt_bias_offset
  explicit DeviceInputs(const Problem& p)
      : q(p.q.data(), p.q.bytes()),
        k(p.k.data(), p.k.bytes()),
        v(p.v.data(), p.v.bytes()),
        g(p.g.data(), p.g.bytes()),
        beta(p.beta.data(), p.beta.bytes()),
        A_log(p.A_log.data(), p.A_log.size() * 4),
        dt_bias(p.dt_bias.data(), p.dt_bias.size() * 4),
        indices(p.indices.data(), p.indices.size() * 4) {
    if (p.c.cu_i64) {
      cu = DeviceBuf(p.cu.data(), p.cu.size() * 8);
    } else {
      std::vector<int32_t> c32(p.cu.begin(), p.cu.end());
      cu = DeviceBuf(c32.data(), c32.size() * 4);
    }
  }
};

// Params of p on the device inputs d for a workspace size query (and a forward writing `out`):
// no states, no A_log / dt_bias (the size depends on neither).
inline fastkda::ForwardParams size_query_params(const Problem& p, const DeviceInputs& d,
                                                void* out) {
  return p.params({d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(), d.cu.get(), nullptr,
                   nullptr, out, nullptr, nullptr, nullptr},
                  fastkda::Device::kCUDA);
}

// GPU run: out poisoned with NaN; final states start as a copy of the initial pool (or NaN when
// there is no initial state) so unwritten slots can be checked bit for bit.
inline Result run_gpu(const Problem& p, const DeviceInputs& d, cudaStream_t stream = nullptr) {
  Result r{HostBuf(DType::kBF16, p.out_elems()), HostBuf(p.c.final_dtype, p.state_elems())};
  std::fill(r.out.h.begin(), r.out.h.end(), kPoison);
  if (p.has_init() && p.init_dtype == p.c.final_dtype)
    r.state = p.init_state;
  else
    for (size_t i = 0; i < r.state.size(); ++i) r.state.set(i, NAN);
  DeviceBuf out(r.out.data(), r.out.bytes());
  DeviceBuf init(p.init_state.data(), p.init_state.bytes());
  DeviceBuf fin = p.c.in_place ? DeviceBuf() : DeviceBuf(r.state.data(), r.state.bytes());
  if (p.c.in_place) init.from_host(r.state.data());
  DeviceBuf bnd;
  if (p.c.boundary) {
    r.boundary = HostBuf(p.c.boundary_dtype, size_t(p.boundary_rows() + 1) * p.row_elems());
    for (size_t i = 0; i < r.boundary.size(); ++i) r.boundary.set(i, NAN);
    bnd = DeviceBuf(r.boundary.data(), r.boundary.bytes());
  }
  const std::vector<int32_t> cu32(p.cu.begin(), p.cu.end());  // for cu_seqlens_host
  fastkda::ForwardParams f = p.params(
      {d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(), d.cu.get(),
       static_cast<const float*>(d.A_log.get()),
       static_cast<const float*>(d.dt_bias.get()) + d.dt_bias_offset, out.get(), init.get(),
       p.c.in_place ? init.get() : fin.get(), static_cast<const int32_t*>(d.indices.get())},
      fastkda::Device::kCUDA);
  f.stream = stream;
  if (p.c.boundary) {
    f.boundary_states = bnd.get();
    f.boundary_states_dtype = p.c.boundary_dtype;
    f.num_boundary_states = p.boundary_rows() - p.c.boundary_dropped;
  }
  if (p.c.cu_host && !p.c.seqlens.empty())
    f.cu_seqlens_host = p.c.cu_i64 ? static_cast<const void*>(p.cu.data()) : cu32.data();
  DeviceBuf ws(fastkda::forward_workspace_size(f));
  f.workspace = ws.get(), f.workspace_bytes = fastkda::forward_workspace_size(f);
  fastkda::forward(f);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw fastkda::Error(std::string("prefill: CUDA error ") + cudaGetErrorString(e));
  out.to_host(r.out.data());
  (p.c.in_place ? init : fin).to_host(r.state.data());
  if (p.c.boundary) bnd.to_host(r.boundary.data());
  return r;
}

// The fp64 oracle, one sequence at a time (B = 1 calls), on f32 copies of q, k, v.
inline Result run_oracle(const Problem& p) {
  auto to_f32 = [](const HostBuf& b) {
    HostBuf r(DType::kF32, b.size());
    for (size_t i = 0; i < b.size(); ++i) r.f[i] = b.get(i);
    return r;
  };
  const HostBuf q = to_f32(p.q), k = to_f32(p.k), v = to_f32(p.v);
  Result r{HostBuf(DType::kF32, p.out_elems()), HostBuf(DType::kF32, p.state_elems())};
  std::fill(r.out.f.begin(), r.out.f.end(), NAN);
  for (size_t i = 0; i < r.state.size(); ++i) r.state.f[i] = p.init_state.get(i);
  const int64_t matrix = int64_t(p.c.HV) * kK * kV;
  const std::vector<int64_t> base = p.boundary_base();
  if (p.c.boundary) {  // f32 (rounded from fp64), in the problem's layout
    r.boundary = HostBuf(DType::kF32, size_t(base.back() + 1) * p.row_elems());
    std::fill(r.boundary.f.begin(), r.boundary.f.end(), NAN);
  }
  for (int64_t n = 0; n < p.num_seq; ++n) {
    const int64_t bos = p.cu[size_t(n)], len = p.cu[size_t(n) + 1] - bos;
    const int64_t slot = p.slot_of(n);
    if (slot < 0 && len == 0) continue;
    fastkda::ForwardParams f;
    f.device = fastkda::Device::kCPU;
    f.H = p.c.H, f.HV = p.c.HV, f.K = kK, f.V = kV;
    f.io_dtype = DType::kF32;
    f.q = q.f.data() + bos * p.q_stride;
    f.k = k.f.data() + bos * p.k_stride;
    f.v = v.f.data() + bos * p.v_stride;
    f.g =
        static_cast<const char*>(p.g.data()) + bos * p.g_stride * fastkda::dtype_size(p.c.g_dtype);
    f.beta = static_cast<const char*>(p.beta.data()) +
             bos * p.beta_stride * fastkda::dtype_size(p.c.beta_dtype);
    f.out = r.out.f.data() + bos * p.c.HV * kV;
    f.g_dtype = p.c.g_dtype, f.beta_dtype = p.c.beta_dtype;
    f.q_stride = p.q_stride, f.k_stride = p.k_stride, f.v_stride = p.v_stride;
    f.g_stride = p.g_stride, f.beta_stride = p.beta_stride;
    f.gate_mode = p.c.gate, f.lower_bound = p.c.lower_bound;
    f.A_log = p.A_log.empty() ? nullptr : p.A_log.data();
    f.dt_bias = p.dt_bias.empty() ? nullptr : p.dt_bias.data();
    f.beta_mode = p.c.beta_mode, f.l2norm_qk = p.c.l2norm, f.scale = p.c.scale;
    f.B = 1, f.T = len;
    std::vector<float> s0(size_t(matrix), 0.f), s1(size_t(matrix), 0.f);
    if (slot >= 0 && p.has_init())
      for (int64_t i = 0; i < matrix; ++i)
        s0[size_t(i)] = p.init_state.get(size_t(slot * matrix + i));
    f.initial_state = s0.data(), f.final_state = s1.data();
    f.initial_state_dtype = f.final_state_dtype = DType::kF32;
    f.state_layout = p.c.layout;
    f.algorithm = fastkda::Algorithm::kRecurrent;
    if (p.c.boundary) {
      f.boundary_states = r.boundary.f.data() + base[size_t(n)] * matrix;
      f.boundary_states_dtype = DType::kF32;
      f.num_boundary_states = base[size_t(n) + 1] - base[size_t(n)];
    }
    if (len > 0)
      fastkda::forward(f);
    else
      s1 = s0;
    if (slot >= 0 && p.c.final_state)
      std::copy(s1.begin(), s1.end(), r.state.f.begin() + slot * matrix);
  }
  return r;
}

// Token rows covered by some sequence.
inline std::vector<bool> covered_rows(const Problem& p) {
  std::vector<bool> in(size_t(p.rows), false);
  for (int64_t n = 0; n < p.num_seq; ++n)
    for (int64_t t = p.cu[size_t(n)]; t < p.cu[size_t(n) + 1]; ++t) in[size_t(t)] = true;
  return in;
}
// State slots that the forward writes.
inline std::vector<bool> written_slots(const Problem& p) {
  std::vector<bool> w(size_t(p.num_slots), false);
  if (!p.c.final_state) return w;
  for (int64_t n = 0; n < p.num_seq; ++n)
    if (p.slot_of(n) >= 0) w[size_t(p.slot_of(n))] = true;
  return w;
}

// f() must throw a fastkda::Error whose message names `needle`; `what` says which call (on failure).
template <class F>
void expect_error(F&& f, const std::string& needle, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << " must throw";
  } catch (const fastkda::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
  }
}

}  // namespace fastkda_prefill_test
