// GPU unit test of a numerical shortcut the prefill kernels rely on: a tf32 MMA operand made by
// adding half a tf32 ulp to the f32 bits (device::tf32_operand_finite, one integer add) multiplies
// exactly like the cvt.rna.tf32 rounding of the same value, because the tensor cores ignore the 13
// low bits. Checked bit for bit over random tiles with every rounding case (ties, carries into the
// exponent, denormals); the raw, unrounded bits (truncation) must differ, so the test can fail.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "gpu_buffers.h"

namespace {

enum class Mode : int { kRna = 0, kHalfUlp = 1, kRaw = 2 };

__device__ uint32_t operand(float x, Mode m) {
  switch (m) {
    case Mode::kRna:
      return fastkda::device::cvt_rna_tf32(x);
    case Mode::kHalfUlp:
      return fastkda::device::tf32_operand_finite(x);
    default:
      return __float_as_uint(x);
  }
}

// Warp w: D = A B for A = a[w] (16 x 8, row-major) and B = b[w] (8 x 8, [k][n]), one m16n8k8.
__global__ void mma_tiles(const float* a, const float* b, float* d, Mode m) {
  const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float* A = a + w * 128;
  const float* B = b + w * 64;
  const uint32_t af[4] = {operand(A[g * 8 + t], m), operand(A[(g + 8) * 8 + t], m),
                          operand(A[g * 8 + t + 4], m), operand(A[(g + 8) * 8 + t + 4], m)};
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  fastkda::device::mma_m16n8k8_tf32(acc, af, operand(B[t * 8 + g], m),
                                    operand(B[(t + 4) * 8 + g], m));
  float* D = d + w * 128;
  D[g * 8 + 2 * t] = acc[0];
  D[g * 8 + 2 * t + 1] = acc[1];
  D[(g + 8) * 8 + 2 * t] = acc[2];
  D[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(PtxGpu, Tf32HalfUlpOperandEqualsCvtRna) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr int kWarps = 4096;
  std::mt19937_64 rng(fastkda_gpu_test::fresh_seed());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 5);
  // Random values, many with their low 13 bits set to a rounding edge: exact ties (0x1000), just
  // below / above (0x0fff, 0x1001), all ones (carries, also into the exponent), and denormals.
  auto value = [&]() {
    uint32_t u;
    const float x = normal(rng) * std::exp2(float(int(rng() % 40) - 20));
    std::memcpy(&u, &x, 4);
    switch (pick(rng)) {
      case 0:
        return from_bits((u & ~0x1fffu) | 0x1000u);
      case 1:
        return from_bits((u & ~0x1fffu) | 0x0fffu);
      case 2:
        return from_bits((u & ~0x1fffu) | 0x1001u);
      case 3:
        return from_bits(u | 0x7fffffu);  // mantissa all ones
      case 4:
        return from_bits((u & 0x80000000u) | (u & 0x7fffffu));  // denormal
      default:
        return x;
    }
  };
  std::vector<float> a(kWarps * 128), b(kWarps * 64);
  for (float& x : a) x = value();
  for (float& x : b) x = value();
  float *da, *db, *dd;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, a.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  auto run = [&](Mode m) {
    std::vector<uint32_t> d(a.size());
    mma_tiles<<<kWarps / 4, 128>>>(da, db, dd, m);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return d;
  };
  const auto rna = run(Mode::kRna), half = run(Mode::kHalfUlp), raw = run(Mode::kRaw);
  size_t diff_half = 0, diff_raw = 0;
  for (size_t i = 0; i < rna.size(); ++i) {
    diff_half += rna[i] != half[i];
    diff_raw += rna[i] != raw[i];
  }
  EXPECT_EQ(diff_half, 0u) << "half-ulp operands differ from cvt.rna in " << diff_half << " of "
                           << rna.size() << " products";
  EXPECT_GT(diff_raw, rna.size() / 10) << "unrounded operands should differ (truncation)";
  std::printf("[ptx] tf32 half-ulp == cvt.rna in %zu products; raw bits differ in %zu\n",
              rna.size(), diff_raw);
  cudaFree(da), cudaFree(db), cudaFree(dd);
}

}  // namespace
