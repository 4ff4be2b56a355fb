// FASTKDA_CUDA_CHECK(expr): every CUDA runtime call and every launch (cudaGetLastError()) goes
// through it; a failure throws fastkda::Error with the call and the CUDA error string.
#pragma once

#include <cuda_runtime_api.h>

#include "common.h"

#define FASTKDA_CUDA_CHECK(expr)                                                        \
  do {                                                                                  \
    const cudaError_t fastkda_err_ = (expr);                                            \
    FASTKDA_CHECK(fastkda_err_ == cudaSuccess, "CUDA error in ", #expr, ": ",           \
                  cudaGetErrorString(fastkda_err_), " (", __FILE__, ":", __LINE__, ")"); \
  } while (0)

namespace fastkda::cuda {

// Makes `device` current for a launch and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FASTKDA_CUDA_CHECK(cudaGetDevice(&previous_));
    switched_ = previous_ != device;
    if (switched_) FASTKDA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace fastkda::cuda
