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
