// Scan-chain microbenchmark: the sequential part of the chunked scan alone (no prepare, no loads),
// for chunk lengths C = 16, 32, 64, to size the 64-token scan (docs/prefill.md, item 0) before
// building it. Per chunk and warpgroup (64 value rows of S^T, 64 f32 registers per thread), with
// operands in shared memory (zeros: wgmma's time does not depend on values):
//   P^T = S^T kw^T and O^T = S^T qs^T    2 x 16 wgmma m64nCk8 tf32 (A = tf32(S) from registers)
//   V_new^T = (v^T - P^T) Tb^T           C / 16 k16 steps x 3 wgmma m64nCk16 bf16 (split hi / lo)
//   O^T += V_new^T A_qk^T                C / 8 wgmma m64nCk8 tf32 (A = tf32(V_new))
//   out <- bf16(O^T)                     global stores
//   S^T = S^T diag(d) + V_new^T ke       64 FMUL + C / 16 x 3 wgmma m64n128k16 bf16
// and one named barrier of the scan threads (the real scan's hand-off wait). One CTA per SM, 1 or
// 2 warpgroups (kVs = 64 / 128), 8192 tokens per CTA; prints microseconds per 16 tokens.
//   fastkda_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='ScanChainBench.*'
// Differences from the shipped 16-token scan (prefill/scan.cuh): P and O as two wgmma per k step
// (not one N = 2C wgmma: O^T must be its own accumulator for the A_qk step), V_new and the A_qk
// step on wgmma (not mma.sync), no output staging. The C = 16 row is the comparison point.
// Measured (session 12, H200, us per 16 tokens, C = 16 / 32 / 64): kVs = 64 0.77 / 0.90 / 1.05,
// kVs = 128 1.17 / 1.43 / 1.72, kVs = 128 with the warpgroups apart 1.10 / 1.35 / 1.72: longer
// chunks cost more per token in the chain (docs/prefill.md, Session 12).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "cuda/device/wgmma.cuh"
#include "cuda/prefill/scan.cuh"
#include "gpu_buffers.h"

namespace {

using namespace fastkda::device;

// Wider wgmma shapes than the shipped scan uses (same conventions as cuda/device/wgmma.cuh).
__device__ __forceinline__ void wgmma_m64n64k8_tf32_rs(float (&d)[32], const uint32_t (&a)[4],
                                    SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %38, 0;\nmov.b64 desc, {%36, %37};\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, desc, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

__device__ __forceinline__ void wgmma_m64n16k16_bf16_rs(float (&d)[8], const uint32_t (&a)[4],
                                    SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %14, 0;\nmov.b64 desc, {%12, %13};\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7"
      "}, {%8, %9, %10, %11}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

__device__ __forceinline__ void wgmma_m64n32k16_bf16_rs(float (&d)[16], const uint32_t (&a)[4],
                                    SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %22, 0;\nmov.b64 desc, {%20, %21};\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, {%16, %17, %18, %19}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs(float (&d)[32], const uint32_t (&a)[4],
                                    SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %38, 0;\nmov.b64 desc, {%36, %37};\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}


template <int N>
__device__ __forceinline__ void tf32_rs(float (&d)[N / 2], const uint32_t (&a)[4], SmemDesc b,
                                        bool acc) {
  if constexpr (N == 16) wgmma_m64n16k8_tf32_rs(d, a, b, acc);
  else if constexpr (N == 32) wgmma_m64n32k8_tf32_rs(d, a, b, acc);
  else wgmma_m64n64k8_tf32_rs(d, a, b, acc);
}
template <int N>
__device__ __forceinline__ void bf16_rs(float (&d)[N / 2], const uint32_t (&a)[4], SmemDesc b,
                                        bool acc) {
  if constexpr (N == 16) wgmma_m64n16k16_bf16_rs(d, a, b, acc);
  else if constexpr (N == 32) wgmma_m64n32k16_bf16_rs(d, a, b, acc);
  else if constexpr (N == 64) wgmma_m64n64k16_bf16_rs(d, a, b, acc);
  else wgmma_m64n128k16_bf16_rs(d, a, b, acc);
}

// A fragments from accumulator tiles, as the shipped scan forms them (prefill/scan.cuh): tf32 (k8)
// from tile j, split bf16 (k16) from tiles 2 kk, 2 kk + 1.
__device__ __forceinline__ void tile_to_tf32(const float* c, uint32_t (&a)[4]) {
  fastkda::prefill_cuda::acc_to_a(*reinterpret_cast<const float(*)[4]>(c), a);
}
__device__ __forceinline__ void tiles_to_bf16(const float* c, uint32_t (&h)[4], uint32_t (&l)[4]) {
  fastkda::prefill_cuda::split_vnew(*reinterpret_cast<const float(*)[2][4]>(c), h, l);
}

constexpr int kSmemBytes = 80 * 1024;  // zeros; every descriptor below reads inside it
constexpr uint32_t kLbo = 128, kSbo = 4096;

template <int C>
__global__ void __launch_bounds__(256, 1)
    scan_chain_kernel(int chunks, float* state_out, uint32_t* o_out, int desync) {
  extern __shared__ __align__(128) unsigned char smem[];
  for (int i = threadIdx.x; i < kSmemBytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  fence_proxy_async_shared();
  __syncthreads();
  const float* decay = reinterpret_cast<const float*>(smem);
  const SmemDesc desc = smem_desc_noswizzle(smem, kLbo, kSbo);
  constexpr uint32_t kStep = 2 * kLbo / 16;  // one k step: two core matrices along K
  const int lane = threadIdx.x & 31, t = lane & 3;

  float S[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) S[i] = 0.01f * float((threadIdx.x + i) % 7);
  wgmma_fence_operands(S);
  uint32_t* o_dst = o_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * (C / 4);

  // desync: each warpgroup waits on its own barrier (an mbarrier hand-off would let them run
  // apart), the second starting a few microseconds late; else one barrier for all (the shipped
  // named-barrier hand-off, which keeps the warpgroups in lockstep).
  const int wg = threadIdx.x / 128;
  if (desync && wg == 1) __nanosleep(2000);
  for (int c = 0; c < chunks; ++c) {
    if (desync)
      bar_sync(1 + wg, 128);
    else
      bar_sync(1, blockDim.x);  // stands for the hand-off wait
    // P^T and O^T over the 128 keys, A = tf32(S) in batches of 4 key tiles.
    float pk[C / 2], o[C / 2];
#pragma unroll
    for (int i = 0; i < C / 2; ++i) pk[i] = o[i] = 0.0f;
    wgmma_fence_operands(pk);
    wgmma_fence_operands(o);
#pragma unroll
    for (int b = 0; b < 16; b += 4) {
      uint32_t af[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) tile_to_tf32(&S[4 * (b + j)], af[j]);
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        tf32_rs<C>(pk, af[j], desc + kStep * (b + j), true);
        tf32_rs<C>(o, af[j], desc + kStep * (b + j) + 8, true);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
    }
    wgmma_fence_operands(pk);
    wgmma_fence_operands(o);
    // V_new^T = (v^T - P^T) Tb^T, split bf16 (v stands in as a constant).
    float vn[C / 2];
#pragma unroll
    for (int i = 0; i < C / 2; ++i) {
      pk[i] = 0.5f - pk[i];
      vn[i] = 0.0f;
    }
    wgmma_fence_operands(vn);
    {
      uint32_t xh[C / 16][4], xl[C / 16][4];
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) tiles_to_bf16(&pk[8 * kk], xh[kk], xl[kk]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        bf16_rs<C>(vn, xl[kk], desc + kStep * kk, true);
        bf16_rs<C>(vn, xh[kk], desc + kStep * kk + 16, true);
        bf16_rs<C>(vn, xh[kk], desc + kStep * kk, true);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
    }
    wgmma_fence_operands(vn);
    // O^T += V_new^T A_qk^T (tf32, C / 8 k steps).
    {
      uint32_t av[C / 8][4];
#pragma unroll
      for (int m = 0; m < C / 8; ++m) tile_to_tf32(&vn[4 * m], av[m]);
      wgmma_fence();
#pragma unroll
      for (int m = 0; m < C / 8; ++m) tf32_rs<C>(o, av[m], desc + kStep * m + 32, true);
      wgmma_commit_group();
      wgmma_wait_group<0>();
    }
    wgmma_fence_operands(o);
#pragma unroll
    for (int i = 0; i < C / 4; ++i) o_dst[i] = pack_bf16x2(o[2 * i], o[2 * i + 1]);
    // S^T = S^T diag(d) + V_new^T ke (split bf16, C / 16 k16 steps).
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(&decay[8 * j + 2 * t]);
      S[4 * j + 0] = S[4 * j + 0] * d.x + 1e-3f;
      S[4 * j + 1] = S[4 * j + 1] * d.y + 1e-3f;
      S[4 * j + 2] = S[4 * j + 2] * d.x + 1e-3f;
      S[4 * j + 3] = S[4 * j + 3] * d.y + 1e-3f;
    }
    {
      uint32_t vh[C / 16][4], vl[C / 16][4];
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) tiles_to_bf16(&vn[8 * kk], vh[kk], vl[kk]);
      wgmma_fence_operands(S);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_m64n128k16_bf16_rs(S, vl[kk], desc + kStep * kk, true);
        wgmma_m64n128k16_bf16_rs(S, vh[kk], desc + kStep * kk + 16, true);
        wgmma_m64n128k16_bf16_rs(S, vh[kk], desc + kStep * kk, true);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      wgmma_fence_operands(S);
    }
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i];
}

template <int C>
float time_chain(int warpgroups, int sms, int tokens, int desync = 0) {
  const int threads = 128 * warpgroups, chunks = tokens / C;
  fastkda_gpu_test::DeviceBuf state(size_t(sms) * threads * 64 * 4);
  fastkda_gpu_test::DeviceBuf o(size_t(sms) * threads * (C / 4) * 4);
  EXPECT_EQ(cudaFuncSetAttribute(scan_chain_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes),
            cudaSuccess);
  auto launch = [&] {
    scan_chain_kernel<C><<<sms, threads, kSmemBytes>>>(chunks,
                                                       static_cast<float*>(state.get()),
                                                       static_cast<uint32_t*>(o.get()), desync);
  };
  for (int i = 0; i < 2; ++i) launch();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int r = 0; r < 9; ++r) {
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0.0f;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0f / float(tokens / 16);  // us per 16 tokens
}

TEST(ScanChainBench, DISABLED_ChunkLengths) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  constexpr int kTokens = 8192;
  for (int wg = 1; wg <= 2; ++wg) {
    const float t16 = time_chain<16>(wg, sms, kTokens);
    const float t32 = time_chain<32>(wg, sms, kTokens);
    const float t64 = time_chain<64>(wg, sms, kTokens);
    std::printf("SCANCHAIN kVs=%d us_per_16_tokens C16 %.3f C32 %.3f C64 %.3f\n", 64 * wg, t16, t32,
                t64);
  }
  std::printf("SCANCHAIN kVs=128 desync us_per_16_tokens C16 %.3f C32 %.3f C64 %.3f\n",
              time_chain<16>(2, sms, kTokens, 1), time_chain<32>(2, sms, kTokens, 1),
              time_chain<64>(2, sms, kTokens, 1));
}

}  // namespace
