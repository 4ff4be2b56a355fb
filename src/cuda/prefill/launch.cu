// Host side of the chunked prefill: CUDA preconditions (on top of validate()), PrefillArgs from
// ForwardParams, the workspace layout and the launches of the plan (plan.h) on params.stream. No
// allocation, no host synchronisation (CUDA-graph capturable). The intra kernel (chunk-parallel Tb
// and A_qk into the caller's workspace), then prefill_kernel (the scan) once, or for split T twice
// around combine_kernel (split.cuh).
#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's signature (found at run time)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common.h"
#include "cuda/check.h"
#include "cuda/prefill/args.h"
#include "cuda/prefill/config.h"
#include "cuda/prefill/intra_warp.cuh"
#include "cuda/prefill/order.cuh"
#include "cuda/prefill/plan.h"
#include "cuda/prefill/prefill_kernel.cuh"
#include "cuda/prefill/split.cuh"
#include "cuda/prefill/wy64.cuh"

namespace fastkda::cuda {

namespace {

using prefill_cuda::PrefillArgs;

static_assert(prefill_cuda::kBoundaryChunks * prefill_cuda::kC == ForwardParams::kBoundaryInterval,
              "boundary states: one every kBoundaryChunks scan chunks");
static_assert(sizeof(PrefillArgs) <= 4096, "kernel parameters: 4 KiB at most");

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
  // TMA boxes and 16-byte output rows: pointers 16-byte aligned, token strides multiples of 16
  // bytes (cuTensorMapEncodeTiled's requirements).
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

// cuTensorMapEncodeTiled from the driver through the runtime (no link against libcuda).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FASTKDA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                        cudaEnableDefault, &found));
    FASTKDA_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr,
                  "cuTensorMapEncodeTiled: not provided by the CUDA driver (query result ",
                  int(found), ")");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// TMA descriptor of a row-major [rows, cols] tensor with `stride` elements per row (a multiple
// of 16 bytes, checked by check_cuda_preconditions), read in boxes of box_rows x box_cols; rows
// past the tensor read as zeros. With `blocks8`, the box lands in shared memory as blocks of 8
// columns, [box_cols / 8][box_rows][8] (a 3-D map: 8 columns, rows, column blocks 16 bytes
// apart), so that a warp reading one column of several rows hits different banks. `swizzle`:
// the box's 16-byte pieces XOR-swizzled (CU_TENSOR_MAP_SWIZZLE_*; 2-D maps).
CUtensorMap tensor_map(const void* base, CUtensorMapDataType type, int elem_bytes, int64_t rows,
                       int64_t cols, int64_t stride, int box_cols, int box_rows,
                       bool blocks8 = false,
                       CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  CUtensorMap m;
  const cuuint64_t row_bytes = cuuint64_t(stride) * cuuint64_t(elem_bytes);
  const cuuint64_t dims2[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t dims3[3] = {8, cuuint64_t(rows), cuuint64_t(cols / 8)};
  const cuuint64_t strides2[1] = {row_bytes};
  const cuuint64_t strides3[2] = {row_bytes, cuuint64_t(8 * elem_bytes)};
  const cuuint32_t box2[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t box3[3] = {8, cuuint32_t(box_rows), cuuint32_t(box_cols / 8)};
  const cuuint32_t steps[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(
      &m, type, blocks8 ? 3 : 2, const_cast<void*>(base), blocks8 ? dims3 : dims2,
      blocks8 ? strides3 : strides2, blocks8 ? box3 : box2, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FASTKDA_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled: error ", int(r), " for a [", rows,
                ", ", cols, "] tensor with a row stride of ", stride, " elements",
                blocks8 ? " (as blocks of 8 columns)" : "");
  return m;
}

// The scan kernel's loads (prepare.cuh load_stage): q, k, g rows of kK columns, this CTA's kVs
// value columns of v (at kVs = 64 / 32 in blocks of 8 columns: v_in_blocks), kC token rows per
// box.
void make_load_maps(const ForwardParams& p, const Strides& s, int vsplit, PrefillArgs& a) {
  const int64_t rows = p.B * p.T;  // <= 2^31 - 1 (check_launch_limits)
  if (rows <= 0) return;           // nothing is loaded
  using prefill_cuda::kC;
  constexpr int kK = prefill_cuda::kK, kV = prefill_cuda::kV;
  const auto bf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  a.tm_q = tensor_map(p.q, bf16, 2, rows, int64_t(p.H) * kK, s.q, kK, kC);
  a.tm_k = tensor_map(p.k, bf16, 2, rows, int64_t(p.H) * kK, s.k, kK, kC);
  using prefill_cuda::v_in_blocks;
  const bool v_blocks = vsplit == 1   ? v_in_blocks<kV>()
                        : vsplit == 2 ? v_in_blocks<kV / 2>()
                                      : v_in_blocks<kV / 4>();
  a.tm_v = tensor_map(p.v, bf16, 2, rows, int64_t(p.HV) * kV, s.v, kV / vsplit, kC, v_blocks);
  const bool g_f32 = p.g_dtype == DType::kF32;
  a.tm_g = tensor_map(p.g, g_f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : bf16, g_f32 ? 4 : 2, rows,
                      int64_t(p.HV) * kK, s.g, kK, kC);
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

// pdl: launched with programmatic stream serialization (right behind the intra kernel, which lets
// it start early; prefill_kernel waits for the intra kernel's completion before reading the
// workspace; split T's pass 2 right behind the combine, whose start states its scan warps wait
// for).
template <int kVs, prefill_cuda::Pass kPass, bool kF16 = false>
void launch(const PrefillArgs& a, int64_t ctas, bool pdl, cudaStream_t stream) {
  constexpr size_t smem = prefill_cuda::shared_bytes<kVs>();
  constexpr int threads =
      prefill_cuda::block_threads<kVs, prefill_cuda::kPairLayout<kPass>>();
  auto* kernel = prefill_cuda::prefill_kernel<kVs, kPass, kF16>;
  FASTKDA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(ctas));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute serialization{};
  serialization.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  serialization.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &serialization;
  config.numAttrs = pdl ? 1 : 0;
  FASTKDA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
}

// A kernel of this file with `smem` bytes of dynamic shared memory (the attribute set first), on
// `stream`, launch errors checked.
void launch_with_smem(void (*kernel)(PrefillArgs), dim3 grid, int threads, size_t smem,
                      cudaStream_t stream, const PrefillArgs& a) {
  FASTKDA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, threads, smem, stream>>>(a);
  FASTKDA_CUDA_CHECK(cudaGetLastError());
}

// Split T's combine, kRows rows of S^T per CTA (Plan::combine_rows).
template <int kRows>
void launch_combine(const PrefillArgs& a, int64_t heads, cudaStream_t stream) {
  launch_with_smem(prefill_cuda::combine_kernel<kRows>,
                   dim3(unsigned(heads), unsigned(prefill_cuda::kV / kRows)),
                   prefill_cuda::kCombineThreads, prefill_cuda::combine_shared_bytes<kRows>(),
                   stream, a);
}

// The kVs = 128 scan, on f16 operands where the plan says so (plan.h f16_scan). kVs = 64 / 32
// keep tf32: at kVs = 64 the scale's upkeep cost what the f16 products saved (sessions 35, 36).
template <prefill_cuda::Pass kPass>
void launch_vs1(const PrefillArgs& a, bool f16, int64_t ctas, bool pdl, cudaStream_t stream) {
  if (f16)
    launch<128, kPass, true>(a, ctas, pdl, stream);
  else
    launch<128, kPass>(a, ctas, pdl, stream);
}

template <prefill_cuda::Pass kPass>
void launch_scan(const PrefillArgs& a, bool f16, int64_t ctas, bool pdl, cudaStream_t stream) {
  switch (a.vsplit) {
    case 1:
      launch_vs1<kPass>(a, f16, ctas, pdl, stream);
      break;
    case 2:
      launch<64, kPass>(a, ctas, pdl, stream);
      break;
    default:
      launch<32, kPass>(a, ctas, pdl, stream);
      break;
  }
}

// Slots of slot_tokens tokens (config.h): slot_base(N) = total tokens / slot_tokens + N.
int64_t slots_of(const ForwardParams& p, int64_t slot_tokens) {
  const int64_t n = num_sequences(p);
  if (n <= 0 || p.B <= 0 || p.T < 0) return 0;
  return p.B * p.T / slot_tokens + n;
}
int64_t chunk_slots(const ForwardParams& p) { return slots_of(p, prefill_cuda::kC); }

// Bytes of the workspace: chunk slots (Tb, A_qk), then the split-T segment slots (E, M).
size_t chunk_ws_bytes(const ForwardParams& p) {
  const size_t bytes =
      size_t(chunk_slots(p)) * size_t(p.HV > 0 ? p.HV : 0) * prefill_cuda::kWsBytes;
  return (bytes + 255) / 256 * 256;
}
size_t order_ws_bytes(const ForwardParams& p, const Plan& plan) {
  return plan.longest_first ? (size_t(num_sequences(p)) * sizeof(int32_t) + 255) / 256 * 256 : 0;
}
// Streamed intra kernel: ready counters per (sequence, value head, block of kReadyChunks chunks
// of the longest sequence: a fixed-length batch or one sequence), then the StreamQueue.
int64_t ready_blocks(const ForwardParams& p) {
  return (longest_chunks(p) + prefill_cuda::kReadyChunks - 1) / prefill_cuda::kReadyChunks;
}
size_t ready_bytes(const ForwardParams& p) {
  return (size_t(num_sequences(p)) * size_t(p.HV > 0 ? p.HV : 0) * size_t(ready_blocks(p)) *
              sizeof(uint32_t) +
          255) /
         256 * 256;
}
size_t stream_ws_bytes(const ForwardParams& p, const Plan& plan) {
  return plan.streamed ? ready_bytes(p) + 256 : 0;
}
size_t slot_map_bytes(const ForwardParams& p, const Plan& plan) {
  return plan.slot_map ? (size_t(chunk_slots(p)) * sizeof(int2) + 255) / 256 * 256 : 0;
}
size_t seg_ws_bytes(const ForwardParams& p, const Plan& plan) {
  if (plan.seg_chunks == 0) return 0;
  return size_t(slots_of(p, int64_t(plan.seg_chunks) * prefill_cuda::kC)) *
         size_t(p.HV > 0 ? p.HV : 0) * prefill_cuda::kSegBytes;
}

// The launch limits that depend on the shapes alone, checked by the size query and by prefill()
// before anything else (no device access): the same error from both.
void check_launch_limits(const ForwardParams& p) {
  FASTKDA_CHECK(p.B * p.T <= int64_t(INT32_MAX),
                "T: expected B * T <= 2^31 - 1 tokens (TMA box coordinates are 32-bit), got ",
                p.B * p.T);
  const int64_t slots = chunk_slots(p);
  FASTKDA_CHECK(slots <= int64_t(INT32_MAX) && p.HV <= 65535,
                "T: expected at most 2^31 - 1 chunk slots and 65535 value heads per launch, got ",
                slots, " chunk slots x ", p.HV, " heads");
}

// The 64-token WY pipeline's workspace (Plan::wy64): per (sequence, head, chunk) item its image
// and its Tb, then the ready flags and the producer's counter (zeroed together).
int64_t wy64_items(const ForwardParams& p) { return p.B * (p.T / 64) * p.H; }
size_t wy64_flag_bytes(const ForwardParams& p) {
  return (size_t(wy64_items(p)) * sizeof(uint32_t) + 255) / 256 * 256 + 256;
}
size_t wy64_ws_bytes(const ForwardParams& p) {
  return size_t(wy64_items(p)) * (prefill_cuda::wy64::kImgBytes + prefill_cuda::wy64::kTbBytes) +
         wy64_flag_bytes(p);
}

// The producer (two CTAs per SM, each taking items from the counter; those on the first N x H SMs
// none, unless the whole grid landed there), then the scan behind it by PDL (one CTA per sequence
// and head, on the SMs the producer leaves): the scan waits for each chunk's ready flag, so it
// needs no grid dependency.
void launch_wy64(const ForwardParams& p, const Strides& s, PrefillArgs& a, const Plan& plan,
                 cudaStream_t stream) {
  namespace wy = prefill_cuda::wy64;
  const int64_t items = wy64_items(p);
  char* const ws = static_cast<char*>(p.workspace);
  a.wy_img = reinterpret_cast<unsigned char*>(ws);
  a.wy_tb = a.wy_img + size_t(items) * wy::kImgBytes;
  a.wy_ready = reinterpret_cast<uint32_t*>(a.wy_tb + size_t(items) * wy::kTbBytes);
  a.wy_counter = a.wy_ready + (wy64_flag_bytes(p) - 256) / sizeof(uint32_t);
  a.wy_chunks = int(p.T / 64);
  a.wy_idle_sms = int(a.num_seq * p.H);
  a.tm_v = tensor_map(p.v, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.B * p.T, int64_t(p.H) * 128, s.v,
                      64, 64, false, CU_TENSOR_MAP_SWIZZLE_128B);
  a.tm_out = tensor_map(p.out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.B * p.T,
                        int64_t(p.H) * 128, s.out, 64, 64, false, CU_TENSOR_MAP_SWIZZLE_128B);
  FASTKDA_CUDA_CHECK(cudaMemsetAsync(a.wy_ready, 0, wy64_flag_bytes(p), stream));
  constexpr int kProducerSmem = int(sizeof(wy::producer::Smem));
  FASTKDA_CUDA_CHECK(cudaFuncSetAttribute(
      wy::producer::producer_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kProducerSmem));
  // Two CTAs on every SM (also for few items: the first wave covers the SMs the scan leaves).
  const int64_t grid = 2 * int64_t(plan.sms);
  wy::producer::producer_kernel<<<unsigned(grid), wy::producer::kThreads, kProducerSmem, stream>>>(
      a);
  FASTKDA_CUDA_CHECK(cudaGetLastError());
  FASTKDA_CUDA_CHECK(cudaFuncSetAttribute(
      wy::scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(wy::Layout::kSmem)));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(a.num_seq * p.H));
  config.blockDim = dim3(wy::kScanThreads);
  config.dynamicSmemBytes = wy::Layout::kSmem;
  config.stream = stream;
  cudaLaunchAttribute serialization{};
  serialization.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  serialization.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &serialization;
  config.numAttrs = 1;
  FASTKDA_CUDA_CHECK(cudaLaunchKernelEx(&config, wy::scan_kernel, a));
}

}  // namespace

// 0 for shapes the CUDA prefill rejects (prefill() then names the argument).
size_t prefill_workspace_size(const ForwardParams& p) {
  if (p.K != prefill_cuda::kK || p.V != prefill_cuda::kV) return 0;
  check_launch_limits(p);
  const Plan plan = choose_plan(p, num_sequences(p), sm_count(p.device_index));
  if (plan.wy64) return wy64_ws_bytes(p);
  return chunk_ws_bytes(p) + seg_ws_bytes(p, plan) + order_ws_bytes(p, plan) +
         stream_ws_bytes(p, plan) + slot_map_bytes(p, plan);
}

void prefill(const ForwardParams& p) {
  using prefill_cuda::Pass;
  check_launch_limits(p);  // also from validation (the size query); kept for direct callers
  const Strides s = token_strides(p);
  check_cuda_preconditions(p, s);
  const int64_t num_seq = num_sequences(p);
  if (num_seq == 0) return;
  DeviceGuard guard(p.device_index);
  PrefillArgs a = make_args(p, s);
  a.ws = static_cast<float*>(p.workspace);
  a.num_seq = num_seq;
  const int64_t slots = chunk_slots(p);  // within the launch limits (validation: the size query)
  a.chunk_slots = slots;
  const Plan plan = choose_plan(p, num_seq, sm_count(p.device_index));
  auto stream = static_cast<cudaStream_t>(p.stream);
  if (plan.wy64) {
    launch_wy64(p, s, a, plan, stream);
    return;
  }
  a.vsplit = plan.vsplit;
  make_load_maps(p, s, plan.vsplit, a);
  a.seg_chunks = plan.seg_chunks;
  a.seg0_chunks = plan.seg0_chunks;
  a.first_out = plan.first_out;
  char* const ws = static_cast<char*>(p.workspace);
  a.seg_ws = plan.seg_chunks ? reinterpret_cast<float*>(ws + chunk_ws_bytes(p)) : nullptr;
  int32_t* const order =
      plan.longest_first
          ? reinterpret_cast<int32_t*>(ws + chunk_ws_bytes(p) + seg_ws_bytes(p, plan))
          : nullptr;
  a.order = order;
  if (plan.streamed) {
    char* const stream_ws =
        ws + chunk_ws_bytes(p) + seg_ws_bytes(p, plan) + order_ws_bytes(p, plan);
    a.ready = reinterpret_cast<uint32_t*>(stream_ws);
    a.ready_blocks = int(ready_blocks(p));
    a.queue = reinterpret_cast<prefill_cuda::StreamQueue*>(stream_ws + ready_bytes(p));
    a.intra_tiles = plan.intra_tiles, a.retire_tile = plan.retire_tile;
    a.keep_sms = plan.keep_sms;
  }
  int2* const slot_map =
      plan.slot_map ? reinterpret_cast<int2*>(ws + chunk_ws_bytes(p) + seg_ws_bytes(p, plan) +
                                              order_ws_bytes(p, plan) + stream_ws_bytes(p, plan))
                    : nullptr;
  a.slot_map = slot_map;
  // CTAs of the scan: per sequence (or segment slot), value head and slice; pass 1 of split T
  // has a transition slice for every value slice.
  const int64_t units =
      plan.seg_chunks ? slots_of(p, int64_t(plan.seg_chunks) * prefill_cuda::kC) : num_seq;
  const int64_t ctas = units * p.HV * a.vsplit * (plan.seg_chunks ? 2 : 1);
  FASTKDA_CHECK(ctas <= int64_t(INT32_MAX),
                "N * HV: expected at most 2^31 - 1 CTAs per launch, got ", units, " x ", p.HV,
                " x ", ctas / (units * p.HV));
  FASTKDA_CHECK(num_seq * p.HV <= int64_t(INT32_MAX),
                "N * HV: expected at most 2^31 - 1 (sequence, head) pairs per launch, got ",
                num_seq, " x ", p.HV);
  if (order) {
    const unsigned blocks =
        unsigned((num_seq + prefill_cuda::kOrderThreads - 1) / prefill_cuda::kOrderThreads);
    prefill_cuda::order_kernel<<<blocks, prefill_cuda::kOrderThreads, 0, stream>>>(a, order);
    FASTKDA_CUDA_CHECK(cudaGetLastError());
  }
  if (slot_map) {
    const unsigned blocks = unsigned((slots + prefill_cuda::kSlotMapThreads - 1) /
                                     prefill_cuda::kSlotMapThreads);
    prefill_cuda::slot_map_kernel<<<blocks, prefill_cuda::kSlotMapThreads, 0, stream>>>(
        a, slots, slot_map);
    FASTKDA_CUDA_CHECK(cudaGetLastError());
  }
  // The intra work runs one chunk per warp (intra_warp.cuh), the bounded gate's with two anchors
  // per chunk, the others' with the binary split of intra_warp_hier.
  const bool bounded = a.gate == prefill_cuda::Gate::kBounded;
  if (plan.streamed) {
    // Ready counters and queue zeroed, then the persistent intra grid, then the scan beside it.
    FASTKDA_CUDA_CHECK(cudaMemsetAsync(a.ready, 0, stream_ws_bytes(p, plan), stream));
    launch_with_smem(bounded ? prefill_cuda::intra_warp_streamed_kernel<true>
                             : prefill_cuda::intra_warp_streamed_kernel<false>,
                     unsigned(plan.sms * prefill_cuda::kIntraWarpCtasPerSm),
                     32 * prefill_cuda::kIntraWarps, sizeof(prefill_cuda::IntraWarpPlan), stream,
                     a);
  } else {
    const int64_t ctas = (slots + prefill_cuda::kIntraWarps - 1) / prefill_cuda::kIntraWarps;
    launch_with_smem(bounded ? prefill_cuda::intra_warp_kernel<true>
                             : prefill_cuda::intra_warp_kernel<false>,
                     dim3(unsigned(ctas), unsigned(p.HV)), 32 * prefill_cuda::kIntraWarps,
                     sizeof(prefill_cuda::IntraWarpPlan), stream, a);
  }
  a.jobs = ctas;
  if (!plan.seg_chunks) {
    launch_scan<Pass::kWhole>(a, plan.f16,
                              plan.persistent ? std::min(ctas, int64_t(plan.sms)) : ctas,
                              /*pdl=*/true, stream);
    return;
  }
  if (plan.pairs) {
    // Segment 0's output jobs (kFirst: N x HV CTAs), then one CTA per segment slot and head for
    // the value and transition rows of the other segments (kPairs), which starts once every kFirst
    // CTA has passed its wait for the intra kernel and runs beside them; it completes after them.
    a.jobs = num_seq * p.HV;
    launch_vs1<Pass::kFirst>(a, plan.f16, a.jobs, /*pdl=*/true, stream);
    a.jobs = ctas / 2;
    launch_vs1<Pass::kPairs>(a, plan.f16, ctas / 2, /*pdl=*/true, stream);
  } else {
    launch_scan<Pass::kTransitions>(a, plan.f16, ctas, /*pdl=*/true, stream);
  }
  if (plan.combine_rows == 32)
    launch_combine<32>(a, num_seq * p.HV, stream);
  else
    launch_combine<16>(a, num_seq * p.HV, stream);
  // Pass 2 right behind the combine (programmatic stream serialization): its prepare starts on the
  // SMs the combine leaves or frees, its scan warps wait for the combine's start states.
  a.jobs = ctas / 2;
  launch_scan<Pass::kOutputs>(a, plan.f16, ctas / 2, /*pdl=*/true, stream);
}

}  // namespace fastkda::cuda
