// fastkda tensor front end: the same entry points as fastkda.h, taking tensor descriptions
// (pointer, dtype, device, shape, strides) instead of raw pointers and sizes.
//
// It derives B, T, N, H, HV, K, V from the shapes, checks every shape, dtype, device and stride
// agreement (errors name the argument, what was expected and what was given), fills the
// ForwardParams / DecodeParams of fastkda.h and calls fastkda::forward / fastkda::decode, which
// validate the rest (value ranges, cu_seqlens contents, alignment, supported dims). Front ends
// (the Python binding, C++ engines holding tensors) share this one implementation, so no front
// end re-implements the shape rules.
//
// Layout rules (dimension letters as in fastkda.h):
//   q, k [B, T, H, K], v [B, T, HV, V], g [B, T, HV, K], beta [B, T, HV]: the dims after the token
//     dim are contiguous; the token stride may exceed the dense one (views into a fused
//     projection), and the batch stride must be T times the token stride.
//   out [B, T, HV, V], states, A_log, dt_bias, cu_seqlens, state_indices, slots (inner dim),
//     num_accepted: contiguous.
//   Strides of size-1 dims are ignored (frameworks report arbitrary values for them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fastkda/fastkda.h"

namespace fastkda {

inline constexpr int kMaxTensorDims = 6;

// A non-owning description of one tensor. A default-constructed view (null data, ndim 0) means
// "absent"; an empty tensor may have null data but keeps its shape, so it is present.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;
  int device_index = 0;
  int ndim = 0;
  int64_t shape[kMaxTensorDims] = {};
  int64_t strides[kMaxTensorDims] = {};  // in elements

  bool present() const { return data != nullptr || ndim > 0; }
};

// An untyped byte buffer (the CUDA workspace). Absent when data is null.
struct BufferView {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::kCPU;
  int device_index = 0;
};

// Scalar options shared by the forward and the decode step (meaning as in KdaInputs).
struct KdaOptions {
  GateMode gate_mode = GateMode::kBounded;
  float lower_bound = -5.0f;
  BetaMode beta_mode = BetaMode::kSigmoid;
  bool l2norm_qk = true;
  float scale = 0.0f;  // 0: K^-1/2
  StateLayout state_layout = StateLayout::kVFirst;
  void* stream = nullptr;  // cudaStream_t; ignored on CPU
};

struct ForwardTensors {
  TensorView q;                // [B, T, H, K]   bf16 | f32
  TensorView k;                // [B, T, H, K]   dtype of q
  TensorView v;                // [B, T, HV, V]  dtype of q
  TensorView g;                // [B, T, HV, K]  bf16 | f32
  TensorView beta;             // [B, T, HV]     bf16 | f32
  TensorView out;              // [B, T, HV, V]  dtype of q, written
  TensorView A_log;            // [HV]           f32, optional
  TensorView dt_bias;          // [HV, K] or [HV * K]  f32, optional
  TensorView cu_seqlens;       // [N + 1]        i32 | i64, optional (then B == 1)
  TensorView cu_seqlens_host;  // [N + 1]        CPU copy of a CUDA cu_seqlens, optional
  TensorView initial_state;    // [N, HV, V, K] (V-first) or [N, HV, K, V]; rows = slots with
  TensorView final_state;      //   state_indices. f32 | bf16, optional each
  TensorView state_indices;    // [N]            i32, optional
  TensorView boundary_states;  // [rows, HV, V, K] or [rows, HV, K, V] f32 | bf16, optional: the
                               //   state before every 64th token (fastkda.h, boundary_states)
  BufferView workspace;        // CUDA: forward_workspace_size() bytes
  KdaOptions options;
  Algorithm algorithm = Algorithm::kChunked;
};

struct DecodeTensors {
  TensorView q;             // [N, tokens, H, K]
  TensorView k;             // [N, tokens, H, K]
  TensorView v;             // [N, tokens, HV, V]
  TensorView g;             // [N, tokens, HV, K]
  TensorView beta;          // [N, tokens, HV]
  TensorView out;           // [N, tokens, HV, V], written
  TensorView A_log;         // [HV] f32, optional
  TensorView dt_bias;       // [HV, K] or [HV * K] f32, optional
  TensorView state_pool;    // [num_slots, HV, V, K] (V-first) or [.., K, V], updated in place
  TensorView slots;         // [N] or [N, S] i32 (per_token_states: S >= tokens)
  TensorView num_accepted;  // [N] i32, optional
  KdaOptions options;
  bool per_token_states = false;
};

// Shape/dtype/device/stride checks, then the params of fastkda.h (not yet value-validated).
ForwardParams make_forward_params(const ForwardTensors& t);
DecodeParams make_decode_params(const DecodeTensors& t);

size_t forward_workspace_size(const ForwardTensors& t);
void forward(const ForwardTensors& t);
void decode(const DecodeTensors& t);

}  // namespace fastkda
