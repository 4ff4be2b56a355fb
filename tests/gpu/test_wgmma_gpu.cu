// GPU unit tests of the wgmma wrappers (src/cuda/device/wgmma.cuh) that the kVs = 128 scan (and the
// planned 64-token scan) builds on: the register layouts of A and D and the no-swizzle K-major
// shared-memory layout of B behind smem_desc_noswizzle, each against a CPU product of the same
// (rounded) operands.
//   tf32 m64n16k8 and m64n32k8, 16 k-steps chained (V_new^T = S^T W^T: 64 value rows, 16 or 32
//   tokens, 128 keys);
//   bf16 m64n128k16 (the state update S^T += V_new^T ke: 64 rows, 128 keys, 16 tokens);
//   the two chained: the accumulator of the second fed back as the A operand of the first with the
//   key order permuted, as the scan does with its state;
//   bf16 m64n(16 n16)k16 on the leading accumulators of an m64n64 (wgmma_m64n64k16_bf16_rs_first,
//   the WY scan's triangular factors): the other columns untouched.
// On a mismatch the test reruns with the two descriptor offsets swapped and says whether that
// layout matches instead.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "cuda/device/wgmma.cuh"
#include "gpu_buffers.h"

namespace {

using namespace fastkda::device;

// B of the tf32 test: 16 tokens (n) x 128 keys (k); core matrix (n / 8, k / 4) at
// (n / 8) * sbo + (k / 4) * lbo bytes: K-adjacent core matrices lbo bytes apart (128: dense; 144:
// the padded layout of the scan's W / qs, config.h kWgLboKeys), N-adjacent sbo = 32 lbo.
template <uint32_t kLbo>
__host__ __device__ constexpr int tf32_b_offset(int n, int k) {  // in floats
  return ((n / 8) * 32 * kLbo + (k / 4) * kLbo) / 4 + (n % 8) * 4 + k % 4;
}
// B of the bf16 test: 128 keys (n) x 16 tokens (k); core matrix (n / 8, k / 8) at
// (n / 8) * 256 + (k / 8) * 128 bytes.
constexpr uint32_t kBf16Lbo = 128, kBf16Sbo = 256;
__host__ __device__ constexpr int bf16_b_offset(int n, int k) {  // in bf16 elements
  return ((n / 8) * kBf16Sbo + (k / 8) * kBf16Lbo) / 2 + (n % 8) * 8 + k % 8;
}

// The m64nN accumulator of this thread (rows r0 = 16 w + g and r0 + 8) into d (64 x N, row-major).
template <int N>
__device__ void store_acc(float* d, const float (&acc)[N / 2]) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  for (int i = 0; i < N / 8; ++i) {
    d[r0 * N + 8 * i + 2 * t] = acc[4 * i + 0];
    d[r0 * N + 8 * i + 2 * t + 1] = acc[4 * i + 1];
    d[r1 * N + 8 * i + 2 * t] = acc[4 * i + 2];
    d[r1 * N + 8 * i + 2 * t + 1] = acc[4 * i + 3];
  }
}

// bf16 m64n128k16 operands: B (b: 128 x 16 bf16 bits, [n][k]) into sb's K-major layout, and this
// thread's A fragment of a (64 x 16 bf16 bits, row-major).
__device__ void fill_bf16_b(uint16_t* sb, const uint16_t* b) {
  for (int i = threadIdx.x; i < 128 * 16; i += 128) sb[bf16_b_offset(i / 16, i % 16)] = b[i];
}
__device__ void bf16_a_fragment(const uint16_t* a, uint32_t (&af)[4]) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  auto pair = [&](int r, int k) {
    return uint32_t(a[r * 16 + k]) | uint32_t(a[r * 16 + k + 1]) << 16;
  };
  af[0] = pair(r0, 2 * t), af[1] = pair(r1, 2 * t), af[2] = pair(r0, 2 * t + 8);
  af[3] = pair(r1, 2 * t + 8);
}

// a: 64 x 128 f32 (row-major), b: N x 128 f32 ([n][k]); d: 64 x N (N = 16 or 32).
template <int N, uint32_t kLbo>
__global__ void tf32_kernel(const float* a, const float* b, float* d, bool swap) {
  constexpr uint32_t kSbo = 32 * kLbo;
  __shared__ __align__(128) float sb[N / 8 * kSbo / 4];
  for (int i = threadIdx.x; i < N * 128; i += 128) {
    const int n = i / 128, k = i % 128;
    sb[tf32_b_offset<kLbo>(n, k)] = __uint_as_float(cvt_rna_tf32(b[i]));
  }
  fence_proxy_async_shared();
  __syncthreads();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  float acc[N / 2] = {};
  wgmma_fence_operands(acc);
  wgmma_fence();
  for (int j = 0; j < 16; ++j) {
    const uint32_t af[4] = {
        cvt_rna_tf32(a[r0 * 128 + 8 * j + t]), cvt_rna_tf32(a[r1 * 128 + 8 * j + t]),
        cvt_rna_tf32(a[r0 * 128 + 8 * j + t + 4]), cvt_rna_tf32(a[r1 * 128 + 8 * j + t + 4])};
    const SmemDesc desc =
        swap ? smem_desc_noswizzle(&sb[tf32_b_offset<kLbo>(0, 8 * j)], kSbo, kLbo)
             : smem_desc_noswizzle(&sb[tf32_b_offset<kLbo>(0, 8 * j)], kLbo, kSbo);
    if constexpr (N == 16)
      wgmma_m64n16k8_tf32_rs(acc, af, desc, true);
    else
      wgmma_m64n32k8_tf32_rs(acc, af, desc, true);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(acc);
  store_acc<N>(d, acc);
}

// a: 64 x 16 bf16 bits (row-major), b: 128 x 16 bf16 bits ([n][k]); d: 64 x 128.
__global__ void bf16_kernel(const uint16_t* a, const uint16_t* b, float* d, bool swap) {
  __shared__ __align__(128) uint16_t sb[16 * kBf16Sbo / 2];
  fill_bf16_b(sb, b);
  fence_proxy_async_shared();
  __syncthreads();
  uint32_t af[4];
  bf16_a_fragment(a, af);
  float acc[64] = {};
  const SmemDesc desc = swap ? smem_desc_noswizzle(sb, kBf16Sbo, kBf16Lbo)
                             : smem_desc_noswizzle(sb, kBf16Lbo, kBf16Sbo);
  wgmma_fence_operands(acc);
  wgmma_fence();
  wgmma_m64n128k16_bf16_rs(acc, af, desc, true);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(acc);
  store_acc<128>(d, acc);
}

// The scan's accumulator-to-operand trick on wgmma: S (64 x 128) = A16 B16^T by one bf16
// m64n128k16 (a: 64 x 16, b: 128 x 16 [key][token], bf16 bits), then V (64 x 16) = S W^T by 16
// tf32 m64n16k8 whose A operands are S's accumulator registers rounded by tf32_rn (cvt.rn):
// the lane holding keys 8j + 2t, 8j + 2t + 1 feeds k slots t, t + 4, so W (w: 16 x 128
// [token][key]) is stored with the keys of every group of 8 permuted to match.
__global__ void chain_kernel(const uint16_t* a, const uint16_t* b, const float* w, float* s_out,
                             float* d) {
  __shared__ __align__(128) uint16_t sb[16 * kBf16Sbo / 2];
  __shared__ __align__(128) float sw[2 * 32 * 128 / 4];
  fill_bf16_b(sb, b);
  for (int i = threadIdx.x; i < 16 * 128; i += 128) {
    const int n = i / 128, key = i % 128, q = key % 8;
    const int slot = 8 * (key / 8) + (q % 2 == 0 ? q / 2 : 4 + q / 2);
    // raw f32: the hardware reads its tf32 part (truncation)
    sw[tf32_b_offset<128>(n, slot)] = w[i];
  }
  fence_proxy_async_shared();
  __syncthreads();
  uint32_t af16[4];
  bf16_a_fragment(a, af16);
  float S[64] = {};
  wgmma_fence_operands(S);
  wgmma_fence();
  wgmma_m64n128k16_bf16_rs(S, af16, smem_desc_noswizzle(sb, kBf16Lbo, kBf16Sbo), true);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(S);
  uint32_t af[16][4];  // every k-step's A stays untouched until the wgmma reading it completes
  for (int j = 0; j < 16; ++j) {
    af[j][0] = tf32_rn(S[4 * j + 0]);
    af[j][1] = tf32_rn(S[4 * j + 2]);
    af[j][2] = tf32_rn(S[4 * j + 1]);
    af[j][3] = tf32_rn(S[4 * j + 3]);
  }
  float V[8] = {};
  wgmma_fence_operands(V);
  wgmma_fence();
  for (int j = 0; j < 16; ++j)
    wgmma_m64n16k8_tf32_rs(
        V, af[j], smem_desc_noswizzle(&sw[tf32_b_offset<128>(0, 8 * j)], 128, 32 * 128), true);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(V);
  store_acc<128>(s_out, S);
  store_acc<16>(d, V);
}

// d (64 x 64, from d0) += a b^T on columns 0 .. 16 n16 - 1 only (a: 64 x 16, b: 64 x 16 [n][k],
// bf16 bits): B's two k cores 1024 bytes apart, its n cores 128 (the WY scan's triangular images).
__global__ void bf16_first_kernel(const uint16_t* a, const uint16_t* b, const float* d0, float* d,
                                  int n16) {
  __shared__ __align__(128) uint16_t sb[2 * 1024 / 2];
  for (int i = threadIdx.x; i < 64 * 16; i += 128) {
    const int n = i / 16, k = i % 16;
    sb[((n / 8) * 128 + (k / 8) * 1024) / 2 + (n % 8) * 8 + k % 8] = b[i];
  }
  fence_proxy_async_shared();
  __syncthreads();
  uint32_t af[4];
  bf16_a_fragment(a, af);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  float acc[32];
  for (int i = 0; i < 8; ++i) {
    acc[4 * i + 0] = d0[r0 * 64 + 8 * i + 2 * t], acc[4 * i + 1] = d0[r0 * 64 + 8 * i + 2 * t + 1];
    acc[4 * i + 2] = d0[r1 * 64 + 8 * i + 2 * t], acc[4 * i + 3] = d0[r1 * 64 + 8 * i + 2 * t + 1];
  }
  wgmma_fence_operands(acc);
  wgmma_fence();
  wgmma_m64n64k16_bf16_rs_first(acc, af, smem_desc_noswizzle(sb, 1024, 128), n16);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(acc);
  store_acc<64>(d, acc);
}

// x truncated to 10 mantissa bits (toward zero): how the tensor cores read raw f32 bits.
float tf32_trunc(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}
// x rounded to 10 mantissa bits (finite x): to nearest, ties away (cvt.rna) or to even (cvt.rn).
float tf32_host(float x, bool ties_even = false) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + (ties_even ? 0x0fffu + ((u >> 13) & 1u) : 0x1000u)) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Random bf16 A (64 x 16) and B (128 x 16, [n][k]) and S = A B^T (64 x 128) in double: the
// operands and reference of the m64n128k16 tests.
std::vector<double> random_bf16_product(std::mt19937_64& rng, std::vector<uint16_t>& a,
                                        std::vector<uint16_t>& b) {
  std::normal_distribution<float> normal(0.f, 1.f);
  a.resize(64 * 16), b.resize(128 * 16);
  for (auto& x : a) x = fastkda::float_to_bf16(normal(rng));
  for (auto& x : b) x = fastkda::float_to_bf16(normal(rng));
  std::vector<double> s(64 * 128, 0.0);
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 128; ++n)
      for (int k = 0; k < 16; ++k)
        s[r * 128 + n] +=
            double(fastkda::bf16_to_float(a[r * 16 + k])) * fastkda::bf16_to_float(b[n * 16 + k]);
  return s;
}

double rms_rel(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double(got[i]) - ref[i];
    num += std::isfinite(e) ? e * e : 1e30;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

template <class T>
T* to_device(const std::vector<T>& h) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

template <int N, uint32_t kLbo = 128>
void tf32_chain_test() {
  std::mt19937_64 rng(fastkda_gpu_test::fresh_seed());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> a(64 * 128), b(N * 128);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  std::vector<double> ref(64 * N, 0.0);
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < 128; ++k)
        ref[r * N + n] += double(tf32_host(a[r * 128 + k])) * tf32_host(b[n * 128 + k]);
  float *da = to_device(a), *db = to_device(b), *dd = nullptr;
  ASSERT_EQ(cudaMalloc(&dd, ref.size() * 4), cudaSuccess);
  auto run = [&](bool swap) {
    std::vector<float> d(ref.size(), NAN);
    cudaMemset(dd, 0xff, ref.size() * 4);
    tf32_kernel<N, kLbo><<<1, 128>>>(da, db, dd, swap);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
    return rms_rel(d, ref);
  };
  const double e = run(false);
  std::printf("[wgmma] tf32 m64n%dk8 x 16, lbo %u: rms_rel %g\n", N, kLbo, e);
  if (!(e <= 1e-6)) std::printf("[wgmma] with lbo / sbo swapped: rms_rel %g\n", run(true));
  EXPECT_LE(e, 1e-6) << "register or shared-memory layout of wgmma m64n" << N << "k8 tf32 differs";
  cudaFree(da), cudaFree(db), cudaFree(dd);
}

TEST(WgmmaGpu, Tf32M64N16K8ChainedOverK128) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  tf32_chain_test<16>();
}

// N = 32: the scan's V_new^T and O^T in one instruction (W and qs stacked in N).
TEST(WgmmaGpu, Tf32M64N32K8ChainedOverK128) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  tf32_chain_test<32>();
}

// The scan's W / qs layout: K-adjacent core matrices 144 bytes apart (16 bytes of padding after
// each, so that the prepare's stores are free of bank conflicts; config.h kWgLboKeys).
TEST(WgmmaGpu, Tf32M64N32K8PaddedLbo) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  tf32_chain_test<32, 144>();
}

TEST(WgmmaGpu, Bf16M64N128K16) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(fastkda_gpu_test::fresh_seed());
  std::vector<uint16_t> a, b;
  const std::vector<double> ref = random_bf16_product(rng, a, b);
  uint16_t *da = to_device(a), *db = to_device(b);
  float* dd = nullptr;
  ASSERT_EQ(cudaMalloc(&dd, ref.size() * 4), cudaSuccess);
  auto run = [&](bool swap) {
    std::vector<float> d(ref.size(), NAN);
    cudaMemset(dd, 0xff, ref.size() * 4);
    bf16_kernel<<<1, 128>>>(da, db, dd, swap);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
    return rms_rel(d, ref);
  };
  const double e = run(false);
  std::printf("[wgmma] bf16 m64n128k16: rms_rel %g\n", e);
  if (!(e <= 1e-6)) std::printf("[wgmma] with lbo / sbo swapped: rms_rel %g\n", run(true));
  EXPECT_LE(e, 1e-6) << "register or shared-memory layout of wgmma m64n128k16 bf16 differs";
  cudaFree(da), cudaFree(db), cudaFree(dd);
}

// The WY scan's triangular products: m64n48 / n32 / n16 (and n64) on an m64n64's leading
// accumulators, against d0 + a b^T there and d0 bit for bit in the other columns.
TEST(WgmmaGpu, Bf16M64N64K16LeadingColumns) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(fastkda_gpu_test::fresh_seed());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> a(64 * 16), b(64 * 16);
  std::vector<float> d0(64 * 64);
  for (auto& x : a) x = fastkda::float_to_bf16(normal(rng));
  for (auto& x : b) x = fastkda::float_to_bf16(normal(rng));
  for (float& x : d0) x = normal(rng);
  uint16_t *da = to_device(a), *db = to_device(b);
  float *dd0 = to_device(d0), *dd = nullptr;
  ASSERT_EQ(cudaMalloc(&dd, d0.size() * 4), cudaSuccess);
  for (int n16 = 1; n16 <= 4; ++n16) {
    std::vector<double> ref(64 * 16 * n16);
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 16 * n16; ++n) {
        double acc = d0[r * 64 + n];
        for (int k = 0; k < 16; ++k)
          acc +=
              double(fastkda::bf16_to_float(a[r * 16 + k])) * fastkda::bf16_to_float(b[n * 16 + k]);
        ref[r * 16 * n16 + n] = acc;
      }
    cudaMemset(dd, 0xff, d0.size() * 4);
    bf16_first_kernel<<<1, 128>>>(da, db, dd0, dd, n16);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> d(d0.size()), lead(ref.size());
    cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
    int untouched = 0;
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 64; ++n) {
        if (n < 16 * n16)
          lead[r * 16 * n16 + n] = d[r * 64 + n];
        else
          untouched += std::memcmp(&d[r * 64 + n], &d0[r * 64 + n], 4) == 0;
      }
    const double e = rms_rel(lead, ref);
    std::printf("[wgmma] bf16 m64n%dk16 on m64n64's leading columns: rms_rel %g\n", 16 * n16, e);
    EXPECT_LE(e, 1e-6) << "m64n" << 16 * n16 << "k16 on the leading accumulators";
    EXPECT_EQ(untouched, 64 * (64 - 16 * n16)) << "columns past " << 16 * n16 << " changed";
  }
  cudaFree(da), cudaFree(db), cudaFree(dd0), cudaFree(dd);
}

// The scan's chain: the state as a wgmma accumulator, fed back (rounded by cvt.rn.tf32) as the
// A operand of V = S W^T with the permuted key order; against S and V on the CPU (V from the
// GPU's S, both operands rounded to tf32 as the kernel does: S to nearest even, W exact).
TEST(WgmmaGpu, AccumulatorAsTf32OperandChain) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(fastkda_gpu_test::fresh_seed());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> a, b;
  const std::vector<double> s_ref = random_bf16_product(rng, a, b);
  std::vector<float> w(16 * 128);
  // Raw f32, not exact in tf32: the wgmma reads its shared-memory tf32 operand truncated (the
  // prefill's kw / qs are stored so, kTruncBias in cuda/prefill/common.cuh); rounded instead, V
  // would be off by ~1e-4.
  for (float& x : w) x = normal(rng);
  uint16_t *da = to_device(a), *db = to_device(b);
  float *dw = to_device(w), *ds = nullptr, *dd = nullptr;
  ASSERT_EQ(cudaMalloc(&ds, s_ref.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, 64 * 16 * 4), cudaSuccess);
  chain_kernel<<<1, 128>>>(da, db, dw, ds, dd);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> s(s_ref.size()), d(64 * 16);
  cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
  std::vector<double> d_ref(64 * 16, 0.0);
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 16; ++n)
      for (int k = 0; k < 128; ++k)
        d_ref[r * 16 + n] += double(tf32_host(s[r * 128 + k], true)) * tf32_trunc(w[n * 128 + k]);
  const double es = rms_rel(s, s_ref), ed = rms_rel(d, d_ref);
  std::printf("[wgmma] chain: S rms_rel %g, V = S W^T rms_rel %g\n", es, ed);
  EXPECT_LE(es, 1e-6) << "bf16 m64n128k16 accumulator layout";
  EXPECT_LE(ed, 1e-6) << "accumulator -> tf32 A operand with permuted keys";
  cudaFree(da), cudaFree(db), cudaFree(dw), cudaFree(ds), cudaFree(dd);
}

}  // namespace
