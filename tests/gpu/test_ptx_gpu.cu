// GPU unit tests of the tf32 operand rounding the prefill kernels use: device::tf32_rn (cvt.rn.tf32,
// one F2FP on sm_90) must multiply bit for bit like the operand rounded to nearest even on the host
// and read raw, over random tiles with every rounding case (ties, carries into the exponent,
// denormals); the raw, unrounded bits must differ, so the test can fail, and multiply bit for bit
// like the operand truncated on the host (the tensor cores ignore the low 13 bits: the prefill's
// truncated operands, kTruncBias in cuda/prefill/common.cuh, rely on it). And it must keep NaN and
// inf (the one-add rounding used before turned the canonical NaN into -0).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "gpu_buffers.h"

namespace {

enum class Mode : int { kRn = 0, kRaw = 1 };

__device__ uint32_t operand(float x, Mode m) {
  return m == Mode::kRn ? fastkda::device::tf32_rn(x) : __float_as_uint(x);
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
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Finite x rounded to 10 mantissa bits, to nearest, ties to even.
float tf32_rne_host(float x) {
  const uint32_t u = to_bits(x);
  return from_bits((u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u);
}
// x truncated to 10 mantissa bits (toward zero).
float tf32_trunc_host(float x) { return from_bits(to_bits(x) & 0xffffe000u); }

TEST(PtxGpu, Tf32RnOperandEqualsHostRounding) {
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
  auto run = [&](const std::vector<float>& ha, const std::vector<float>& hb, Mode m) {
    EXPECT_EQ(cudaMemcpy(da, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(db, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<uint32_t> d(ha.size());
    mma_tiles<<<kWarps / 4, 128>>>(da, db, dd, m);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return d;
  };
  std::vector<float> ar(a.size()), br(b.size());
  for (size_t i = 0; i < a.size(); ++i) ar[i] = tf32_rne_host(a[i]);
  for (size_t i = 0; i < b.size(); ++i) br[i] = tf32_rne_host(b[i]);
  std::vector<float> at(a.size()), bt(b.size());
  for (size_t i = 0; i < a.size(); ++i) at[i] = tf32_trunc_host(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bt[i] = tf32_trunc_host(b[i]);
  const auto rn = run(a, b, Mode::kRn), host = run(ar, br, Mode::kRaw), raw = run(a, b, Mode::kRaw);
  const auto host_trunc = run(at, bt, Mode::kRaw);
  size_t diff_rn = 0, diff_raw = 0, diff_trunc = 0;
  for (size_t i = 0; i < rn.size(); ++i) {
    diff_rn += rn[i] != host[i];
    diff_raw += raw[i] != host[i];
    diff_trunc += raw[i] != host_trunc[i];
  }
  EXPECT_EQ(diff_rn, 0u) << "tf32_rn operands differ from host rounding in " << diff_rn << " of "
                         << rn.size() << " products";
  EXPECT_GT(diff_raw, rn.size() / 10) << "unrounded operands should differ (truncation)";
  EXPECT_EQ(diff_trunc, 0u) << "raw operands differ from host truncation in " << diff_trunc
                            << " of " << rn.size() << " products";
  std::printf("[ptx] tf32_rn == host round-to-nearest-even in %zu products; raw bits differ from "
              "it in %zu and from host truncation in %zu\n",
              rn.size(), diff_raw, diff_trunc);
  cudaFree(da), cudaFree(db), cudaFree(dd);
}

__global__ void round_values(const float* x, uint32_t* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fastkda::device::tf32_rn(x[i]);
}

TEST(PtxGpu, Tf32RnKeepsNanAndInf) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  // The canonical NaN of NVIDIA GPUs (0x7fffffff, what ex2(NaN) or NaN * x return), a quiet NaN
  // with and without the sign, +-inf, and the largest finite value (rounds to inf).
  const std::vector<uint32_t> bits = {0x7fffffffu, 0xffffffffu, 0x7fc00000u, 0xffc00000u,
                                      0x7f800000u, 0xff800000u, 0x7f7fffffu};
  std::vector<float> x;
  for (uint32_t u : bits) x.push_back(from_bits(u));
  float* dx;
  uint32_t* dy;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  round_values<<<1, 32>>>(dx, dy, int(x.size()));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint32_t> y(x.size());
  ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(std::isnan(from_bits(y[i]))) << std::hex << bits[i] << " -> " << y[i];
  EXPECT_EQ(y[4], 0x7f800000u);
  EXPECT_EQ(y[5], 0xff800000u);
  EXPECT_EQ(y[6], 0x7f800000u) << "largest finite rounds to inf";
  cudaFree(dx), cudaFree(dy);
}

}  // namespace
