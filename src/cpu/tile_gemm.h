// Small fp32 GEMM for the chunked CPU path: C[M][N] += A[M][Kd] · B[Kd][N], all row-major, and
// the per-ISA build of the chunked path that uses it.
//
// The tiles of one chunk are at most 64 x 512, so there is no cache blocking, only a register
// block: MR rows x 16 columns of C held as GCC vector-extension values while one 16-float row of
// B is streamed per p and A[r][p] is broadcast (axpy form: no reduction is reordered, so GCC
// needs no -ffast-math). A plain-loop version of this kernel ran anywhere between 1 and 110
// GFLOP/s depending on ISA level and tile shape; these explicit vectors do not vary like that.
// Every element of C is accumulated in the order p = 0..Kd-1 whatever M and N are, so a row's
// result never depends on the tile height (the chunked path's bitwise causality relies on it).
//
// The library is compiled for baseline x86-64 (SSE2, no FMA). The chunked path is therefore
// built three times from one source (see chunked.cpp), with the register block chosen per ISA:
//                 vector   rows x cols   measured (1 core, 48x128x128)
//   SSE2          4 x f32   2 x 16        ~30 GFLOP/s
//   AVX2 + FMA    8 x f32   4 x 16        ~70 GFLOP/s
//   AVX-512       16 x f32  8 x 16        ~110 GFLOP/s
#pragma once

#include <cstdint>

namespace fastkda::cpu {

inline constexpr int kGemmRows = 8;   // M must be a multiple of this (every MR divides it)
inline constexpr int kGemmCols = 16;  // N must be a multiple of this

template <int W_, int MR_>
struct GemmShape {  // W floats per vector, MR rows of C per register block
  static constexpr int W = W_, MR = MR_, NV = kGemmCols / W_;
  static_assert(kGemmCols % W == 0 && kGemmRows % MR == 0, "register block must tile 8 x 16");
};
using GemmSse2 = GemmShape<4, 2>;     // 8 of 16 xmm registers hold C
using GemmAvx2 = GemmShape<8, 4>;     // 8 of 16 ymm
using GemmAvx512 = GemmShape<16, 8>;  // 8 of 32 zmm

template <class Shape>
[[gnu::always_inline]] inline void gemm_acc(int M, int N, int Kd, const float* __restrict A,
                                            int64_t lda, const float* __restrict B, int64_t ldb,
                                            float* __restrict C, int64_t ldc) {
  constexpr int W = Shape::W, MR = Shape::MR, NV = Shape::NV;
  typedef float Vec __attribute__((vector_size(W * 4), aligned(4)));  // tiles are float-aligned
  for (int i = 0; i < M; i += MR) {
    for (int j = 0; j < N; j += kGemmCols) {
      Vec acc[MR][NV];
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = *(const Vec*)(C + (i + r) * ldc + j + W * v);
      for (int p = 0; p < Kd; ++p) {
        Vec b[NV];
        for (int v = 0; v < NV; ++v) b[v] = *(const Vec*)(B + p * ldb + j + W * v);
        for (int r = 0; r < MR; ++r) {
          const float a = A[(i + r) * lda + p];
          for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
        }
      }
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) *(Vec*)(C + (i + r) * ldc + j + W * v) = acc[r][v];
    }
  }
}

}  // namespace fastkda::cpu
