// The register-blocked micro-kernel of gemm_acc (tile_gemm.h), built once per x86 ISA level.
//
// The library is compiled for baseline x86-64 (SSE2, no FMA), where the GEMMs of the chunked
// path run at ~30 GFLOP/s per core; AVX2+FMA gives ~70 and AVX-512 ~110 on the same loop.
// GCC/Clang function multiversioning (target("default") plus feature-specific overloads of the
// same function) picks the best version once at load time, so one binary serves every machine.
// Each version holds MR x 16 floats of C in registers as GCC vector-extension values (a plain
// loop's vectorisation varied 100x between ISA levels and tile shapes; these do not), streams one
// 16-float row of B per p and broadcasts A[r][p]: axpy form, no reduction is reordered.
#include "cpu/tile_gemm.h"

#include <cstring>

namespace fastkda::cpu {

namespace {

template <int W>
struct Vec {  // W floats; aligned(4): tiles are only float-aligned
  typedef float type __attribute__((vector_size(W * 4), aligned(4)));
};

// MR rows x (W * NV) columns of C per register block; W * NV == kGemmCols.
template <int W, int MR, int NV>
[[gnu::always_inline]] inline void gemm_kernel(int M, int N, int Kd, const float* __restrict A,
                                               int64_t lda, const float* __restrict B, int64_t ldb,
                                               float* __restrict C, int64_t ldc) {
  static_assert(W * NV == kGemmCols && kGemmRows % MR == 0, "register block must tile 8 x 16");
  using V = typename Vec<W>::type;
  for (int i = 0; i < M; i += MR) {
    for (int j = 0; j < N; j += kGemmCols) {
      V acc[MR][NV];
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = *(const V*)(C + (i + r) * ldc + j + W * v);
      for (int p = 0; p < Kd; ++p) {
        V b[NV];
        for (int v = 0; v < NV; ++v) b[v] = *(const V*)(B + p * ldb + j + W * v);
        for (int r = 0; r < MR; ++r) {
          const float a = A[(i + r) * lda + p];
          for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
        }
      }
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) *(V*)(C + (i + r) * ldc + j + W * v) = acc[r][v];
    }
  }
}

}  // namespace

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// 16 xmm registers: 2 x 16 accumulators leave room for B and the broadcast.
[[gnu::target("default")]] void gemm_acc(int M, int N, int Kd, const float* A, int64_t lda,
                                         const float* B, int64_t ldb, float* C, int64_t ldc) {
  gemm_kernel<4, 2, 4>(M, N, Kd, A, lda, B, ldb, C, ldc);
}
// 16 ymm registers: 4 x 16 accumulators (8 registers).
[[gnu::target("avx2,fma")]] void gemm_acc(int M, int N, int Kd, const float* A, int64_t lda,
                                          const float* B, int64_t ldb, float* C, int64_t ldc) {
  gemm_kernel<8, 4, 2>(M, N, Kd, A, lda, B, ldb, C, ldc);
}
// 32 zmm registers: 8 x 16 accumulators, one zmm per row.
[[gnu::target("avx512f,avx512vl,avx2,fma")]] void gemm_acc(int M, int N, int Kd, const float* A,
                                                           int64_t lda, const float* B,
                                                           int64_t ldb, float* C, int64_t ldc) {
  gemm_kernel<16, 8, 1>(M, N, Kd, A, lda, B, ldb, C, ldc);
}
#else
void gemm_acc(int M, int N, int Kd, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc) {
  gemm_kernel<4, 2, 4>(M, N, Kd, A, lda, B, ldb, C, ldc);
}
#endif

}  // namespace fastkda::cpu
