// Host side of the decode step: the CUDA-specific preconditions (on top of validate()), DecodeArgs
// from DecodeParams, one template dispatch (K, state layout, state dtype) and the launch on
// params.stream. No allocation, no host synchronisation: safe inside CUDA-graph capture.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "common.h"
#include "cuda/check.h"
#include "cuda/decode/config.h"
#include "cuda/decode/decode_kernel.cuh"

namespace fastkda::cuda {

namespace {

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// What validate() does not know: the vector loads of the kernel need q, k, g (bf16) 8-byte-aligned
// rows, g (f32) and dt_bias 16-byte-aligned rows (8 for K = 64), the pool 16-byte (f32) or 8-byte
// (bf16) alignment; one launch holds at most 2^31 - 1 CTAs.
void check_cuda_preconditions(const DecodeParams& p, const Strides& s) {
  const size_t kcols = size_t(p.K) / 32;  // contiguous columns one lane loads
  const size_t bf16_align = kcols >= 4 ? 8 : 2 * kcols;
  const size_t f32_align = kcols >= 4 ? 16 : 4 * kcols;
  FASTKDA_CHECK(aligned(p.q, bf16_align) && s.q % int64_t(bf16_align / 2) == 0, "q: expected ",
                bf16_align, "-byte aligned rows (pointer and q_stride) on CUDA");
  FASTKDA_CHECK(aligned(p.k, bf16_align) && s.k % int64_t(bf16_align / 2) == 0, "k: expected ",
                bf16_align, "-byte aligned rows (pointer and k_stride) on CUDA");
  const size_t g_align = p.g_dtype == DType::kF32 ? f32_align : bf16_align;
  const size_t g_elem = dtype_size(p.g_dtype);
  FASTKDA_CHECK(aligned(p.g, g_align) && s.g % int64_t(g_align / g_elem) == 0, "g: expected ",
                g_align, "-byte aligned rows (pointer and g_stride) on CUDA");
  FASTKDA_CHECK(p.dt_bias == nullptr || aligned(p.dt_bias, f32_align), "dt_bias: expected a ",
                f32_align, "-byte aligned pointer on CUDA, got ", p.dt_bias);
  FASTKDA_CHECK(aligned(p.state_pool, p.state_dtype == DType::kF32 ? 16 : 8),
                "state_pool: expected a 16-byte (f32) or 8-byte (bf16) aligned pointer, got ",
                p.state_pool);
  const int64_t ctas = p.N * p.HV * (p.V / decode_cuda::kBlockV);
  FASTKDA_CHECK(ctas <= int64_t(INT32_MAX),
                "N * HV: expected at most 2^31 - 1 CTAs per launch, got ", p.N, " x ", p.HV, " x ",
                p.V / decode_cuda::kBlockV);
}

decode_cuda::DecodeArgs make_args(const DecodeParams& p, const Strides& s) {
  decode_cuda::DecodeArgs a{};
  a.q = static_cast<const uint16_t*>(p.q);
  a.k = static_cast<const uint16_t*>(p.k);
  a.v = static_cast<const uint16_t*>(p.v);
  a.g = p.g;
  a.beta = p.beta;
  a.out = static_cast<uint16_t*>(p.out);
  a.q_stride = s.q;
  a.k_stride = s.k;
  a.v_stride = s.v;
  a.g_stride = s.g;
  a.beta_stride = s.beta;
  a.A_log = p.gate_mode == GateMode::kPreGated ? nullptr : p.A_log;
  a.dt_bias = p.gate_mode == GateMode::kPreGated ? nullptr : p.dt_bias;
  a.lower_bound = p.lower_bound;
  a.scale = effective_scale(p);
  a.pool = p.state_pool;
  a.num_slots = p.num_slots;
  a.slots = p.slots;
  a.slot_stride = p.slot_stride;
  a.num_accepted = p.num_accepted;
  a.N = p.N;
  a.H = p.H;
  a.HV = p.HV;
  a.V = p.V;
  a.tokens = p.tokens;
  a.gate = static_cast<decode_cuda::GateKind>(static_cast<int>(p.gate_mode));
  a.beta_kind = static_cast<decode_cuda::BetaKind>(static_cast<int>(p.beta_mode));
  a.g_f32 = p.g_dtype == DType::kF32;
  a.beta_f32 = p.beta_dtype == DType::kF32;
  a.l2norm = p.l2norm_qk;
  a.per_token_states = p.per_token_states;
  return a;
}

template <class F>
void dispatch_bool(bool flag, F&& f) {
  if (flag)
    f(std::true_type{});
  else
    f(std::false_type{});
}

template <class F>
void dispatch_head_dim(int K, F&& f) {
  switch (K) {
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return f(std::integral_constant<int, 256>{});
  }
}

// Resident CTAs of `kernel` on `device` (SMs x CTAs per SM), the occupancy queried once per kernel.
int64_t resident_ctas(void (*kernel)(decode_cuda::DecodeArgs), int device,
                      std::atomic<int>& per_sm_cache) {
  int per_sm = per_sm_cache.load(std::memory_order_relaxed);
  if (per_sm == 0) {
    FASTKDA_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, decode_cuda::kThreads, 0));
    per_sm_cache.store(per_sm, std::memory_order_relaxed);
  }
  int sms = 0;
  FASTKDA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return int64_t(sms) * per_sm;
}

// Launches on `stream`; with kUsePdl, as a programmatic dependent of the previous kernel there
// (the kernel waits for it with griddepcontrol.wait before its first global read).
template <int kK, bool kVFirst, class StateT>
void launch(unsigned grid, int device, cudaStream_t stream, decode_cuda::DecodeArgs args) {
  auto* kernel = decode_cuda::decode_kernel<kK, kVFirst, StateT>;
  static std::atomic<int> per_sm{0};  // one per instantiation: racing callers store the same value
  const int64_t resident = resident_ctas(kernel, device, per_sm);
  args.prefetch_ahead = decode_cuda::kPrefetchWaves * resident;
  args.early_prefetch_ctas = resident;  // the first wave
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(decode_cuda::kThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = decode_cuda::kUsePdl ? 1 : 0;
  FASTKDA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

}  // namespace

void decode(const DecodeParams& p) {
  const Strides s = token_strides(p);
  check_cuda_preconditions(p, s);
  if (p.N == 0) return;
  const decode_cuda::DecodeArgs args = make_args(p, s);
  const unsigned grid = unsigned(p.N * p.HV * (p.V / decode_cuda::kBlockV));
  auto stream = static_cast<cudaStream_t>(p.stream);

  DeviceGuard guard(p.device_index);
  dispatch_head_dim(p.K, [&](auto kK) {
    dispatch_bool(p.state_layout == StateLayout::kVFirst, [&](auto kVFirst) {
      dispatch_bool(p.state_dtype == DType::kF32, [&](auto kF32) {
        using StateT = std::conditional_t<kF32(), float, uint16_t>;
        launch<kK(), kVFirst(), StateT>(grid, p.device_index, stream, args);
      });
    });
  });
  FASTKDA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fastkda::cuda
