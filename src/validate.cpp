// Validation of every parameter of the public API, in one place, before anything is written.
// Each failure throws fastkda::Error naming the argument, what was expected and what was given.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common.h"

namespace fastkda {
namespace {

bool is_float_type(DType d) { return d == DType::kF32 || d == DType::kBF16; }
bool is_head_dim(int d) { return d == 64 || d == 128 || d == 256; }
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void check_float_dtype(DType d, const char* name) {
  FASTKDA_CHECK(is_float_type(d), name, ": expected dtype f32 or bf16, got ", to_string(d));
}

void check_token_stride(int64_t stride, int64_t dense, const char* name) {
  FASTKDA_CHECK(stride == 0 || stride >= dense, name, ": expected 0 (dense) or a token stride >= ",
                dense, " elements, got ", stride);
}

// Checks shared by the forward and the decode step. `tokens` is the total token rows.
void validate_inputs(const KdaInputs& p, int64_t tokens) {
  FASTKDA_CHECK(p.device == Device::kCPU || p.device == Device::kCUDA,
                "device: expected CPU or CUDA, got ", int(p.device));
  FASTKDA_CHECK(p.device == Device::kCPU || built_with_cuda(),
                "device: expected cpu, got cuda: fastkda was built without CUDA kernels "
                "(rebuild with nvcc present, or -DFASTKDA_CUDA=ON)");
  FASTKDA_CHECK(p.H > 0, "H: expected > 0, got ", p.H);
  FASTKDA_CHECK(p.HV > 0 && p.HV % p.H == 0, "HV: expected a positive multiple of H = ", p.H,
                ", got ", p.HV);
  FASTKDA_CHECK(is_head_dim(p.K), "K: expected 64, 128 or 256, got ", p.K);
  FASTKDA_CHECK(is_head_dim(p.V), "V: expected 64, 128 or 256, got ", p.V);
  if (p.device == Device::kCUDA) {
    FASTKDA_CHECK(p.K == 128 && p.V == 128, "K, V: expected K = V = 128 on CUDA (the kernels' head dims), got K = ",
                  p.K, ", V = ", p.V);
  }
  check_float_dtype(p.io_dtype, "io_dtype (q, k, v, out)");
  FASTKDA_CHECK(p.device == Device::kCPU || p.io_dtype == DType::kBF16,
                "io_dtype (q, k, v, out): expected bf16 on CUDA, got ", to_string(p.io_dtype));
  check_float_dtype(p.g_dtype, "g_dtype");
  check_float_dtype(p.beta_dtype, "beta_dtype");
  check_token_stride(p.q_stride, int64_t(p.H) * p.K, "q_stride");
  check_token_stride(p.k_stride, int64_t(p.H) * p.K, "k_stride");
  check_token_stride(p.v_stride, int64_t(p.HV) * p.V, "v_stride");
  check_token_stride(p.g_stride, int64_t(p.HV) * p.K, "g_stride");
  check_token_stride(p.beta_stride, int64_t(p.HV), "beta_stride");

  FASTKDA_CHECK(p.gate_mode == GateMode::kBounded || p.gate_mode == GateMode::kSoftplus ||
                    p.gate_mode == GateMode::kPreGated,
                "gate_mode: expected bounded, softplus or pregated, got ", int(p.gate_mode));
  if (p.gate_mode == GateMode::kBounded) {
    FASTKDA_CHECK(std::isfinite(p.lower_bound) && p.lower_bound >= -5.0f && p.lower_bound < 0.0f,
                  "lower_bound: expected a value in [-5, 0) for the bounded gate, got ",
                  p.lower_bound);
  }
  if (p.gate_mode == GateMode::kPreGated) {
    FASTKDA_CHECK(p.A_log == nullptr, "A_log: expected none with the pre-gated gate (g is the "
                                      "log-decay), got a pointer");
    FASTKDA_CHECK(p.dt_bias == nullptr, "dt_bias: expected none with the pre-gated gate, got a "
                                        "pointer");
  }
  FASTKDA_CHECK(p.beta_mode == BetaMode::kSigmoid || p.beta_mode == BetaMode::kGiven ||
                    p.beta_mode == BetaMode::kTwoSigmoid,
                "beta_mode: expected sigmoid, given or two_sigmoid, got ", int(p.beta_mode));
  FASTKDA_CHECK(std::isfinite(p.scale), "scale: expected a finite value (0 = K^-1/2), got ",
                p.scale);

  if (tokens > 0) {
    FASTKDA_CHECK(p.q, "q: expected a pointer, got null");
    FASTKDA_CHECK(p.k, "k: expected a pointer, got null");
    FASTKDA_CHECK(p.v, "v: expected a pointer, got null");
    FASTKDA_CHECK(p.g, "g: expected a pointer, got null");
    FASTKDA_CHECK(p.beta, "beta: expected a pointer, got null");
    FASTKDA_CHECK(p.out, "out: expected a pointer, got null");
  }
  if (p.device == Device::kCUDA) {
    const void* ptrs[] = {p.q, p.k, p.v, p.g, p.out};
    const char* names[] = {"q", "k", "v", "g", "out"};
    for (int i = 0; i < 5; ++i)
      FASTKDA_CHECK(aligned16(ptrs[i]), names[i], ": expected a 16-byte aligned pointer, got ",
                    ptrs[i]);
    const int64_t strides[] = {p.q_stride, p.k_stride, p.v_stride, p.g_stride};
    const char* stride_names[] = {"q_stride", "k_stride", "v_stride", "g_stride"};
    for (int i = 0; i < 4; ++i)
      FASTKDA_CHECK(strides[i] % 8 == 0, stride_names[i],
                    ": expected a multiple of 8 elements on CUDA (16-byte rows), got ", strides[i]);
  }
}

// Two sequences writing one state row would race: non-negative indices must be distinct.
void check_distinct(std::vector<int32_t> idx, const char* name) {
  std::sort(idx.begin(), idx.end());
  for (size_t i = 1; i < idx.size(); ++i)
    FASTKDA_CHECK(idx[i] < 0 || idx[i] != idx[i - 1], name,
                  ": expected distinct non-negative slots (each state row written once), got ",
                  idx[i], " twice");
}

void check_state(const void* ptr, DType dtype, const char* name, Device device) {
  if (!ptr) return;
  FASTKDA_CHECK(is_float_type(dtype), name, ": expected dtype f32 or bf16, got ", to_string(dtype));
  FASTKDA_CHECK(device == Device::kCPU || aligned16(ptr), name,
                ": expected a 16-byte aligned pointer, got ", ptr);
}

}  // namespace

void validate_problem(const ForwardParams& p) {
  FASTKDA_CHECK(p.B >= 0, "B: expected >= 0, got ", p.B);
  FASTKDA_CHECK(p.T >= 0, "T: expected >= 0, got ", p.T);
  validate_inputs(p, p.B * p.T);
  FASTKDA_CHECK(p.algorithm == Algorithm::kChunked || p.algorithm == Algorithm::kRecurrent,
                "algorithm: expected chunked or recurrent, got ", int(p.algorithm));
  FASTKDA_CHECK(p.device == Device::kCPU || p.algorithm == Algorithm::kChunked,
                "algorithm: the token recurrence runs on CPU only; expected chunked on CUDA, got ",
                to_string(p.algorithm));

  if (p.cu_seqlens) {
    FASTKDA_CHECK(p.B == 1, "B: expected 1 with cu_seqlens (packed varlen), got ", p.B);
    FASTKDA_CHECK(p.N >= 0, "N: expected >= 0 sequences, got ", p.N);
    FASTKDA_CHECK(p.cu_seqlens_dtype == DType::kI32 || p.cu_seqlens_dtype == DType::kI64,
                  "cu_seqlens: expected dtype i32 or i64, got ", to_string(p.cu_seqlens_dtype));
    const void* host = p.device == Device::kCPU ? p.cu_seqlens : p.cu_seqlens_host;
    if (host) {
      const int64_t first = load_index(host, p.cu_seqlens_dtype, 0);
      FASTKDA_CHECK(first == 0, "cu_seqlens: expected cu_seqlens[0] == 0, got ", first);
      for (int64_t n = 0; n < p.N; ++n) {
        const int64_t a = load_index(host, p.cu_seqlens_dtype, n);
        const int64_t b = load_index(host, p.cu_seqlens_dtype, n + 1);
        FASTKDA_CHECK(b >= a, "cu_seqlens: expected non-decreasing values, got cu_seqlens[", n,
                      "] = ", a, " > cu_seqlens[", n + 1, "] = ", b);
      }
      const int64_t last = load_index(host, p.cu_seqlens_dtype, p.N);
      FASTKDA_CHECK(last == p.T, "cu_seqlens: expected cu_seqlens[N] == T = ", p.T, ", got ",
                    last);
    }
  } else {
    FASTKDA_CHECK(p.cu_seqlens_host == nullptr,
                  "cu_seqlens_host: expected none without cu_seqlens, got a pointer");
  }

  check_state(p.initial_state, p.initial_state_dtype, "initial_state", p.device);
  check_state(p.final_state, p.final_state_dtype, "final_state", p.device);
  FASTKDA_CHECK(p.state_layout == StateLayout::kVFirst || p.state_layout == StateLayout::kKFirst,
                "state_layout: expected v_first or k_first, got ", int(p.state_layout));
  if (p.initial_state && p.initial_state == p.final_state) {
    FASTKDA_CHECK(p.initial_state_dtype == p.final_state_dtype,
                  "final_state: updated in place (same buffer as initial_state), expected dtype ",
                  to_string(p.initial_state_dtype), ", got ", to_string(p.final_state_dtype));
  }
  check_state(p.boundary_states, p.boundary_states_dtype, "boundary_states", p.device);
  if (p.boundary_states) {
    const void* host = p.cu_seqlens ? (p.device == Device::kCPU ? p.cu_seqlens : p.cu_seqlens_host)
                                     : nullptr;
    const int64_t C = ForwardParams::kBoundaryInterval;
    int64_t rows = -1;  // unknown: device cu_seqlens without a host copy
    if (!p.cu_seqlens) {
      rows = p.B * ((p.T + C - 1) / C);
    } else if (host) {
      rows = 0;
      for (int64_t n = 0; n < p.N; ++n) {
        const int64_t len = load_index(host, p.cu_seqlens_dtype, n + 1) -
                            load_index(host, p.cu_seqlens_dtype, n);
        rows += (len + C - 1) / C;
      }
    }
    FASTKDA_CHECK(rows < 0 ? p.num_boundary_states >= 0 : p.num_boundary_states == rows,
                  "num_boundary_states: expected sum over sequences of ceil(L / 64) = ", rows,
                  ", got ", p.num_boundary_states);
  }
  if (p.state_indices) {
    FASTKDA_CHECK(p.num_state_slots > 0, "num_state_slots: expected > 0 with state_indices, got ",
                  p.num_state_slots);
    if (p.device == Device::kCPU) {
      const int64_t n_seq = num_sequences(p);
      for (int64_t n = 0; n < n_seq; ++n)
        FASTKDA_CHECK(p.state_indices[n] < p.num_state_slots, "state_indices: expected values < ",
                      "num_state_slots = ", p.num_state_slots, ", got state_indices[", n,
                      "] = ", p.state_indices[n]);
      if (p.final_state)
        check_distinct({p.state_indices, p.state_indices + n_seq}, "state_indices");
    }
  }
}

void validate(const ForwardParams& p) {
  validate_problem(p);
  if (p.device == Device::kCUDA) {
    const size_t need = cuda::prefill_workspace_size(p);
    FASTKDA_CHECK(p.workspace_bytes >= need, "workspace_bytes: expected >= ", need,
                  " (forward_workspace_size), got ", p.workspace_bytes);
    FASTKDA_CHECK(need == 0 || p.workspace != nullptr,
                  "workspace: expected a device buffer of ", need, " bytes, got null");
    FASTKDA_CHECK((reinterpret_cast<uintptr_t>(p.workspace) & 255u) == 0,
                  "workspace: expected a 256-byte aligned pointer, got ", p.workspace);
  }
}

void validate(const DecodeParams& p) {
  FASTKDA_CHECK(p.N >= 0, "N: expected >= 0, got ", p.N);
  FASTKDA_CHECK(p.tokens >= 1 && p.tokens <= 8, "tokens: expected 1..8 per sequence, got ",
                p.tokens);
  validate_inputs(p, p.N * p.tokens);
  FASTKDA_CHECK(is_float_type(p.state_dtype), "state_dtype: expected f32 or bf16, got ",
                to_string(p.state_dtype));
  FASTKDA_CHECK(p.state_layout == StateLayout::kVFirst || p.state_layout == StateLayout::kKFirst,
                "state_layout: expected v_first or k_first, got ", int(p.state_layout));
  if (p.N == 0) return;
  FASTKDA_CHECK(p.state_pool, "state_pool: expected a pointer, got null");
  FASTKDA_CHECK(p.device == Device::kCPU || aligned16(p.state_pool),
                "state_pool: expected a 16-byte aligned pointer, got ", p.state_pool);
  FASTKDA_CHECK(p.num_slots > 0, "num_slots: expected > 0, got ", p.num_slots);
  FASTKDA_CHECK(p.slots, "slots: expected a pointer, got null");
  const int64_t columns = p.per_token_states ? p.tokens : 1;
  FASTKDA_CHECK(p.slot_stride >= columns, "slot_stride: expected >= ", columns,
                p.per_token_states ? " (tokens, per-token states)" : "", ", got ", p.slot_stride);
  FASTKDA_CHECK(p.num_accepted == nullptr || p.per_token_states,
                "num_accepted: expected none without per_token_states, got a pointer");
  if (p.device == Device::kCPU) {
    for (int64_t n = 0; n < p.N; ++n) {
      for (int64_t j = 0; j < columns; ++j) {
        const int32_t s = p.slots[n * p.slot_stride + j];
        FASTKDA_CHECK(s < p.num_slots, "slots: expected values < num_slots = ", p.num_slots,
                      ", got slots[", n, ", ", j, "] = ", s);
      }
    }
    for (int64_t n = 0; n < p.N; ++n) {
      if (p.num_accepted) {
        const int32_t a = p.num_accepted[n];
        FASTKDA_CHECK(a >= 1 && a <= p.tokens, "num_accepted: expected values in [1, tokens = ",
                      p.tokens, "], got num_accepted[", n, "] = ", a);
      }
    }
    // Rows run concurrently, so two rows must not write one slot (one row may, in token order).
    std::vector<int32_t> written;  // per row its distinct written slots (padding rows: none)
    for (int64_t n = 0; n < p.N; ++n) {
      const int32_t* row = p.slots + n * p.slot_stride;
      if (row[p.num_accepted ? p.num_accepted[n] - 1 : 0] < 0) continue;
      std::vector<int32_t> mine(row, row + columns);
      std::sort(mine.begin(), mine.end());
      mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
      written.insert(written.end(), mine.begin(), mine.end());
    }
    check_distinct(std::move(written), "slots");
  }
}

}  // namespace fastkda
