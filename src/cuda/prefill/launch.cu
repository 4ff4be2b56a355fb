// Host side of the chunked prefill: CUDA preconditions (on top of validate()), PrefillArgs from
// ForwardParams, the value-split choice and the launch on params.stream. No allocation, no host
// synchronisation (CUDA-graph capturable). Two launches on the stream: intra_kernel (chunk-parallel
// Tb and A_qk into the caller's workspace), then prefill_kernel (the scan).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>

#include "common.h"
#include "cuda/check.h"
#include "cuda/prefill/args.h"
#include "cuda/prefill/config.h"
#include "cuda/prefill/intra_kernel.cuh"
#include "cuda/prefill/prefill_kernel.cuh"

namespace fastkda::cuda {

namespace {

using prefill_cuda::PrefillArgs;

static_assert(prefill_cuda::kBoundaryChunks * prefill_cuda::kC == ForwardParams::kBoundaryInterval,
              "boundary states: one every kBoundaryChunks scan chunks");


bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

void check_cuda_preconditions(const ForwardParams& p, const Strides& s) {
  FASTKDA_CHECK(p.K == prefill_cuda::kK, "K: the CUDA prefill supports K = 128, got ", p.K);
  FASTKDA_CHECK(p.V == prefill_cuda::kV, "V: the CUDA prefill supports V = 128, got ", p.V);
  FASTKDA_CHECK(p.io_dtype == DType::kBF16, "io_dtype: the CUDA prefill expects bf16, got ",
                to_string(p.io_dtype));
  FASTKDA_CHECK(p.H > 0 && p.HV > 0 && p.HV % p.H == 0,
                "HV: expected a positive multiple of H = ", p.H, ", got ", p.HV);
  FASTKDA_CHECK(p.g_dtype == DType::kF32 || p.g_dtype == DType::kBF16,
                "g_dtype: expected f32 or bf16, got ", to_string(p.g_dtype));
  FASTKDA_CHECK(p.beta_dtype == DType::kF32 || p.beta_dtype == DType::kBF16,
                "beta_dtype: expected f32 or bf16, got ", to_string(p.beta_dtype));
  // 16-byte cp.async rows: pointers 16-byte aligned and token strides multiples of 16 bytes.
  const void* ptrs[] = {p.q, p.k, p.v, p.g, p.out};
  const char* names[] = {"q", "k", "v", "g", "out"};
  for (int i = 0; i < 5; ++i)
    FASTKDA_CHECK(ptrs[i] == nullptr || aligned(ptrs[i], 16), names[i],
                  ": the CUDA prefill expects a 16-byte aligned pointer, got ", ptrs[i]);
  const int64_t g_elems16 = p.g_dtype == DType::kF32 ? 4 : 8;
  FASTKDA_CHECK(s.q % 8 == 0, "q_stride: expected a multiple of 8 elements, got ", s.q);
  FASTKDA_CHECK(s.k % 8 == 0, "k_stride: expected a multiple of 8 elements, got ", s.k);
  FASTKDA_CHECK(s.v % 8 == 0, "v_stride: expected a multiple of 8 elements, got ", s.v);
  FASTKDA_CHECK(s.g % g_elems16 == 0, "g_stride: expected a multiple of ", g_elems16,
                " elements, got ", s.g);
}

PrefillArgs make_args(const ForwardParams& p, const Strides& s) {
  PrefillArgs a{};
  a.q = static_cast<const uint16_t*>(p.q);
  a.k = static_cast<const uint16_t*>(p.k);
  a.v = static_cast<const uint16_t*>(p.v);
  a.g = p.g;
  a.beta = p.beta;
  a.out = static_cast<uint16_t*>(p.out);
  a.q_stride = s.q, a.k_stride = s.k, a.v_stride = s.v, a.g_stride = s.g;
  a.beta_stride = s.beta, a.out_stride = s.out;
  const bool gated = p.gate_mode != GateMode::kPreGated;
  a.A_log = gated ? p.A_log : nullptr;
  a.dt_bias = gated ? p.dt_bias : nullptr;
  a.cu_seqlens = p.cu_seqlens;
  a.initial_state = p.initial_state;
  a.final_state = p.final_state;
  a.state_indices = p.state_indices;
  a.num_state_slots = p.state_indices ? p.num_state_slots : INT64_MAX;
  a.boundary_states = p.boundary_states;
  a.num_boundary_states = p.boundary_states ? p.num_boundary_states : 0;
  a.T = p.T;
  a.H = p.H, a.HV = p.HV, a.group = p.HV / p.H;
  a.gate = static_cast<prefill_cuda::Gate>(static_cast<int>(p.gate_mode));
  a.beta_act = static_cast<prefill_cuda::BetaAct>(static_cast<int>(p.beta_mode));
  a.lower_bound_log2 = p.lower_bound * prefill_cuda::kLog2e;
  a.scale = effective_scale(p);
  a.g_f32 = p.g_dtype == DType::kF32;
  a.beta_f32 = p.beta_dtype == DType::kF32;
  a.l2norm = p.l2norm_qk;
  a.cu_i64 = p.cu_seqlens_dtype == DType::kI64;
  a.init_f32 = p.initial_state_dtype == DType::kF32;
  a.final_f32 = p.final_state_dtype == DType::kF32;
  a.boundary_f32 = p.boundary_states_dtype == DType::kF32;
  a.k_first = p.state_layout == StateLayout::kKFirst;
  return a;
}

int sm_count(int device) {
  int n = 0;
  FASTKDA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

// CTAs per (sequence, value head): split V (one CTA per SM) only while the grid still fits in
// one wave, at most 4 ways (each CTA repeats the light prepare work of its head).
// FASTKDA_PREFILL_VSPLIT=1|2|4 overrides it (benchmarks).
int choose_vsplit(int64_t heads_total, int sms) {
  if (const char* env = std::getenv("FASTKDA_PREFILL_VSPLIT")) {
    const int v = std::atoi(env);
    if (v == 1 || v == 2 || v == 4) return v;
  }
  if (4 * heads_total <= sms) return 4;
  if (2 * heads_total <= sms) return 2;
  return 1;
}

template <int kVs>
void launch(const PrefillArgs& a, int64_t ctas, cudaStream_t stream) {
  constexpr size_t smem = prefill_cuda::shared_bytes<kVs>();
  constexpr int threads = prefill_cuda::block_threads<kVs>();
  auto* kernel = prefill_cuda::prefill_kernel<kVs>;
  FASTKDA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<unsigned(ctas), threads, smem, stream>>>(a);
  FASTKDA_CUDA_CHECK(cudaGetLastError());
}

// Chunk slots of the workspace (config.h): slot_base(N) = total tokens / kC + N.
int64_t chunk_slots(const ForwardParams& p) {
  const int64_t n = num_sequences(p);
  if (n <= 0 || p.B <= 0 || p.T < 0) return 0;
  return p.B * p.T / prefill_cuda::kC + n;
}

}  // namespace

// 0 for shapes the CUDA prefill rejects (prefill() then names the argument).
size_t prefill_workspace_size(const ForwardParams& p) {
  if (p.K != prefill_cuda::kK || p.V != prefill_cuda::kV) return 0;
  const size_t bytes =
      size_t(chunk_slots(p)) * size_t(p.HV > 0 ? p.HV : 0) * prefill_cuda::kWsBytes;
  return (bytes + 255) / 256 * 256;
}

void prefill(const ForwardParams& p) {
  const Strides s = token_strides(p);
  check_cuda_preconditions(p, s);
  const int64_t num_seq = num_sequences(p);
  if (num_seq == 0) return;
  DeviceGuard guard(p.device_index);
  PrefillArgs a = make_args(p, s);
  a.ws = static_cast<float*>(p.workspace);
  a.num_seq = num_seq;
  const int64_t slots = chunk_slots(p);
  FASTKDA_CHECK(slots <= int64_t(INT32_MAX) && p.HV <= 65535,
                "T: expected at most 2^31 - 1 chunk slots and 65535 value heads per launch, got ",
                slots, " chunk slots x ", p.HV, " heads");
  a.vsplit = choose_vsplit(num_seq * p.HV, sm_count(p.device_index));
  const int64_t ctas = num_seq * p.HV * a.vsplit;
  FASTKDA_CHECK(ctas <= int64_t(INT32_MAX),
                "N * HV: expected at most 2^31 - 1 CTAs per launch, got ", num_seq, " x ", p.HV,
                " x ", a.vsplit);
  auto stream = static_cast<cudaStream_t>(p.stream);
  {
    constexpr size_t smem = prefill_cuda::intra_shared_bytes();
    FASTKDA_CUDA_CHECK(cudaFuncSetAttribute(
        prefill_cuda::intra_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    prefill_cuda::intra_kernel<<<dim3(unsigned(slots), unsigned(p.HV)), prefill_cuda::kPrepThreads,
                                 smem, stream>>>(a);
    FASTKDA_CUDA_CHECK(cudaGetLastError());
  }
  switch (a.vsplit) {
    case 1:
      launch<128>(a, ctas, stream);
      break;
    case 2:
      launch<64>(a, ctas, stream);
      break;
    default:
      launch<32>(a, ctas, stream);
      break;
  }
}

}  // namespace fastkda::cuda
