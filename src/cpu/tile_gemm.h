// Small fp32 GEMM for the chunked CPU path: C[M][N] += A[M][Kd] · B[Kd][N], all row-major.
//
// The tiles of one chunk are at most 64 x 256, so there is no cache blocking, only a register
// block of C (see tile_gemm.cpp). Every element of C is accumulated in the order p = 0..Kd-1
// whatever M and N are, so a row's result never depends on the tile height (the chunked path's
// bitwise causality relies on this).
#pragma once

#include <cstdint>

namespace fastkda::cpu {

inline constexpr int kGemmRows = 8;   // M must be a multiple of this
inline constexpr int kGemmCols = 16;  // N must be a multiple of this

void gemm_acc(int M, int N, int Kd, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc);

}  // namespace fastkda::cpu
