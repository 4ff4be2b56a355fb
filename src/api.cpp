// Public entry points: validate, then dispatch to the CPU implementation or the CUDA launchers.
#include "common.h"

namespace fastkda {

const char* to_string(Device d) {
  switch (d) {
    case Device::kCPU: return "cpu";
    case Device::kCUDA: return "cuda";
  }
  return "unknown device";
}
const char* to_string(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "unknown dtype";
}
const char* to_string(GateMode m) {
  switch (m) {
    case GateMode::kBounded: return "bounded";
    case GateMode::kSoftplus: return "softplus";
    case GateMode::kPreGated: return "pregated";
  }
  return "unknown gate mode";
}
const char* to_string(BetaMode m) {
  switch (m) {
    case BetaMode::kSigmoid: return "sigmoid";
    case BetaMode::kGiven: return "given";
    case BetaMode::kTwoSigmoid: return "two_sigmoid";
  }
  return "unknown beta mode";
}
const char* to_string(StateLayout l) {
  switch (l) {
    case StateLayout::kVFirst: return "v_first";
    case StateLayout::kKFirst: return "k_first";
  }
  return "unknown state layout";
}
const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kChunked: return "chunked";
    case Algorithm::kRecurrent: return "recurrent";
  }
  return "unknown algorithm";
}

bool built_with_cuda() {
#ifdef FASTKDA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef FASTKDA_WITH_CUDA
// CPU-only build: validation rejects Device::kCUDA before these could be reached.
namespace cuda {
size_t prefill_workspace_size(const ForwardParams&) { return 0; }
void prefill(const ForwardParams&) { FASTKDA_CHECK(false, "device: built without CUDA kernels"); }
void decode(const DecodeParams&) { FASTKDA_CHECK(false, "device: built without CUDA kernels"); }
}  // namespace cuda
#endif

size_t forward_workspace_size(const ForwardParams& p) {
  validate_problem(p);
  return p.device == Device::kCUDA ? cuda::prefill_workspace_size(p) : 0;
}

void forward(const ForwardParams& p) {
  validate(p);
  if (p.device == Device::kCUDA) {
    cuda::prefill(p);
  } else if (p.algorithm == Algorithm::kRecurrent) {
    cpu::forward_recurrent(p);
  } else {
    cpu::forward_chunked(p);
  }
}

void decode(const DecodeParams& p) {
  validate(p);
  if (p.device == Device::kCUDA)
    cuda::decode(p);
  else
    cpu::decode(p);
}

}  // namespace fastkda
