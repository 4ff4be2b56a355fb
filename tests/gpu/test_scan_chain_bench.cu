// Scan-chain microbenchmark: the sequential part of the chunked scan alone (no prepare, no loads),
// for chunk lengths C = 16, 32, 64, to size the 64-token scan (docs/prefill_history.md, item 0)
// before building it. Per chunk and warpgroup (64 value rows of S^T, 64 f32 registers per thread),
// with operands in shared memory (zeros: wgmma's time does not depend on values):
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
// chunks cost more per token in the chain (docs/prefill_history.md, Session 12).
// Session 24 (DISABLED_Interleaved, DISABLED_WgmmaRates; docs/prefill_history.md, Session 24): each
// wgmma shape runs at its peak rate (m64n32k8 tf32 16 clocks, m64n128k16 bf16 64, m64n16k8 tf32 13;
// two warpgroups share one pipe per SM), but the issuing warp stalls on each wgmma until the pipe
// takes it, mma.sync does not run beside a wgmma group, and ALU or mma.sync work written between
// the wgmma of a group slows the group: so neither two chains in one warpgroup (1.086 us per 16
// tokens for 128 rows, two warpgroups 1.066), split accumulators (0.64-0.65 against 0.636) nor a
// lookahead with its small products inside the wgmma stream (0.72-0.73) beats the shipped order. A
// 32-token chunk done the kernel's way (chain32_kernel) does: 0.551 against 0.640 us per 16 tokens
// (one warpgroup), 0.966 against 1.055 (two); session 12's C = 32 row above formed its small
// products with wgmma and waited after each P^T / O^T batch. Beside two synthetic prepare groups
// (kCompete) the gain shrinks with their load: -13 / -15 / -15 / -9.5 / -5 % at 0 / 64 / 128 /
// 256 / 560 FFMA per prepare thread and 16 tokens.
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
  else if constexpr (N == 64) wgmma_m64n64k16_rs<true>(d, a, b, acc);
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

// The state update S^T = S^T + V_new^T ke over C / 16 k16 steps in split bf16 (vn: V_new^T's C / 8
// token tiles; ke through `desc`, k16 step kk at desc + step kk), waited for.
template <int C>
__device__ __forceinline__ void bench_update(float (&S)[64], const float* vn, SmemDesc desc,
                                             uint32_t step) {
  uint32_t vh[C / 16][4], vl[C / 16][4];
#pragma unroll
  for (int kk = 0; kk < C / 16; ++kk) tiles_to_bf16(&vn[8 * kk], vh[kk], vl[kk]);
  wgmma_fence_operands(S);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C / 16; ++kk) {
    wgmma_m64n128k16_bf16_rs(S, vl[kk], desc + step * kk, true);
    wgmma_m64n128k16_bf16_rs(S, vh[kk], desc + step * kk + 16, true);
    wgmma_m64n128k16_bf16_rs(S, vh[kk], desc + step * kk, true);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(S);
}

// Every kernel here: kSmemBytes of zeros (the operands), visible to the async proxy.
__device__ __forceinline__ void zero_smem(unsigned char* smem) {
  for (int i = threadIdx.x; i < kSmemBytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  fence_proxy_async_shared();
  __syncthreads();
}

template <int C>
__global__ void __launch_bounds__(256, 1)
    scan_chain_kernel(int chunks, float* state_out, uint32_t* o_out, int desync) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
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
    bench_update<C>(S, vn, desc, kStep);
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i];
}

// 16-token chunks in two orders (kVs = 64 / 128 as above, one barrier per chunk):
//   kLook = false, the shipped scan's order (prefill/scan.cuh): P^T and O^T as one m64n32k8 per
//     key step in 2 batches of 8, V_new^T = (v^T - P^T) Tb^T, O^T += V_new^T A_qk^T, out, decay,
//     state update: four waits, each product waiting for the one before;
//   kLook = true, one chunk of lookahead: with S_{c+1} = S_c D_c + V_c^T ke_c,
//     P_{c+1} = S_c (D_c kw_{c+1})^T + V_c^T M_c,  M_c = ke_c kw_{c+1}^T (16 x 16, from the
//     producers), so chunk c forms V_c from P~_c (formed during chunk c - 1) plus the small
//     correction V_{c-1}^T M_{c-1}, then issues [P~_{c+1} | O_c] from S_c and the state update
//     in the same wgmma stream: the K = 128 products and the state update no longer wait for
//     each other.
// Here A_qk goes into its own accumulator (a wgmma into a slice of the m64n32 one serialises).
// kPhases (shipped order only; bits, all by default): 1 P^T / O^T, 2 V_new^T and A_qk, 4 the
// decay and the state update; a phase left out keeps its registers as they are. With 4: 8 = the
// state update with A = V_new^T hi / lo from shared memory (SS: each thread stores its fragments,
// proxy fence, warpgroup barrier), 16 = one wgmma instead of three (its per-instruction cost).
// 32: P^T / O^T in one wgmma group of 16 key tiles instead of two of 8. 64 (two warpgroups):
// ping-pong, the warpgroups take turns to issue their two big wgmma sections (P^T / O^T, the
// state update) through two named barriers, each its own hand-off barrier, so that one's
// conversions, small products and waits run while the other's big section is on the tensor pipe.
template <bool kLook, int kPhases = 7>
__global__ void __launch_bounds__(256, 1)
    chain16_kernel(int chunks, float* state_out, uint32_t* o_out, int /*desync: not used*/) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  const float* decay = reinterpret_cast<const float*>(smem);
  const SmemDesc desc = smem_desc_noswizzle(smem, kLbo, kSbo);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  const int lane = threadIdx.x & 31, t = lane & 3;

  float S[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) S[i] = 0.01f * float((threadIdx.x + i) % 7);
  float pt[8], vprev[8];  // lookahead: P~ of the next chunk, V_new of the last one
#pragma unroll
  for (int i = 0; i < 8; ++i) pt[i] = vprev[i] = 0.0f;
  wgmma_fence_operands(S);
  uint32_t* o_dst = o_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;

  auto v_new = [&](const float (&p)[8], float (&vn)[8]) {  // (v^T - P^T) Tb^T, split bf16
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[i] = 0.5f - p[i];
      vn[i] = 0.0f;
    }
    uint32_t xh[4], xl[4];
    tiles_to_bf16(x, xh, xl);
    wgmma_fence_operands(vn);
    wgmma_fence();
    bf16_rs<16>(vn, xl, desc, true);
    bf16_rs<16>(vn, xh, desc + 16, true);
    bf16_rs<16>(vn, xh, desc, true);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operands(vn);
  };
  auto decay_s = [&] {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(&decay[8 * j + 2 * t]);
      S[4 * j + 0] = S[4 * j + 0] * d.x + 1e-3f;
      S[4 * j + 1] = S[4 * j + 1] * d.y + 1e-3f;
      S[4 * j + 2] = S[4 * j + 2] * d.x + 1e-3f;
      S[4 * j + 3] = S[4 * j + 3] * d.y + 1e-3f;
    }
  };
  // The SS variant's A tiles: V_new^T hi and lo per warpgroup (2 x 2 KiB), past the zeros.
  uint4* a_tile = reinterpret_cast<uint4*>(smem + kSmemBytes - 8192) + (threadIdx.x / 128) * 256;
  const SmemDesc desc_a = smem_desc_noswizzle(a_tile, kLbo, 256);
  auto state_update = [&](const float (&vn)[8]) {  // issue only: the caller commits and waits
    uint32_t vh[4], vl[4];
    tiles_to_bf16(vn, vh, vl);
    if constexpr ((kPhases & 8) != 0) {
      a_tile[threadIdx.x % 128] = make_uint4(vh[0], vh[1], vh[2], vh[3]);
      a_tile[128 + threadIdx.x % 128] = make_uint4(vl[0], vl[1], vl[2], vl[3]);
      fence_proxy_async_shared();
      bar_sync(2 + int(threadIdx.x / 128), 128);
    }
    wgmma_fence_operands(S);
    wgmma_fence();
    if constexpr ((kPhases & 8) != 0) {
      wgmma_m64n128k16_bf16_ss(S, desc_a + 128, desc, true);
      wgmma_m64n128k16_bf16_ss(S, desc_a, desc + 16, true);
      wgmma_m64n128k16_bf16_ss(S, desc_a, desc, true);
    } else if constexpr ((kPhases & 16) != 0) {
      wgmma_m64n128k16_bf16_rs(S, vh, desc, true);
    } else {
      wgmma_m64n128k16_bf16_rs(S, vl, desc, true);
      wgmma_m64n128k16_bf16_rs(S, vh, desc + 16, true);
      wgmma_m64n128k16_bf16_rs(S, vh, desc, true);
    }
  };

  constexpr bool kPing = (kPhases & 64) != 0;
  const int wg = threadIdx.x / 128;
  const bool ping = kPing && blockDim.x == 256;
  auto my_turn = [&] {
    if (ping) bar_sync(5 + wg, 256);
  };
  auto your_turn = [&] {
    if (ping) bar_arrive(5 + (wg ^ 1), 256);
  };
  if (wg == 1) your_turn();  // warpgroup 0 issues first
  for (int c = 0; c < chunks; ++c) {
    if (ping)
      bar_sync(1 + wg, 128);  // stands for a hand-off wait of its own
    else
      bar_sync(1, blockDim.x);  // stands for the hand-off wait
    float acc[16], oq[8], vn[8];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) oq[i] = 0.0f;
    wgmma_fence_operands(acc);
    wgmma_fence_operands(oq);
    if constexpr (!kLook) {
      constexpr int kBatch = (kPhases & 32) ? 16 : 8;
      my_turn();
#pragma unroll
      for (int b = 0; b < ((kPhases & 1) ? 16 : 0); b += kBatch) {
        uint32_t af[kBatch][4];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) tile_to_tf32(&S[4 * (b + j)], af[j]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          wgmma_m64n32k8_tf32_rs(acc, af[j], desc + kStep * (b + j), true);
        wgmma_commit_group();
        if (b + kBatch == 16) your_turn();
        wgmma_wait_group<0>();
      }
      wgmma_fence_operands(acc);
      if constexpr ((kPhases & 2) != 0) {
        v_new(reinterpret_cast<const float(&)[8]>(acc[0]), vn);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) vn[i] = acc[i] + 0.5f;
      }
      if constexpr ((kPhases & 2) != 0) {
        uint32_t av[2][4];
        tile_to_tf32(&vn[0], av[0]);
        tile_to_tf32(&vn[4], av[1]);
        wgmma_fence();
        tf32_rs<16>(oq, av[0], desc + 32, true);
        tf32_rs<16>(oq, av[1], desc + 32 + kStep, true);
        wgmma_commit_group();
        wgmma_wait_group<0>();
        wgmma_fence_operands(oq);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o_dst[i] = pack_bf16x2(acc[8 + 2 * i] + oq[2 * i], acc[9 + 2 * i] + oq[2 * i + 1]);
      if constexpr ((kPhases & 4) != 0) {
        decay_s();
        my_turn();
        state_update(vn);
        wgmma_commit_group();
        your_turn();
        wgmma_wait_group<0>();
        wgmma_fence_operands(S);
      } else {
        S[0] += vn[0];
        wgmma_fence_operands(S);  // S counts as changed: its conversions stay in the loop
      }
    } else {
      {  // P_c = P~_c + V_{c-1}^T M_{c-1}
        uint32_t av[2][4];
        tile_to_tf32(&vprev[0], av[0]);
        tile_to_tf32(&vprev[4], av[1]);
        wgmma_fence_operands(pt);
        wgmma_fence();
        tf32_rs<16>(pt, av[0], desc + 48, true);
        tf32_rs<16>(pt, av[1], desc + 48 + kStep, true);
        wgmma_commit_group();
        wgmma_wait_group<0>();
        wgmma_fence_operands(pt);
      }
      v_new(pt, vn);
#pragma unroll
      for (int i = 0; i < 8; ++i) vprev[i] = vn[i];
      // Batch 1: O_c's intra-chunk part and [P~_{c+1} | O_c] over key tiles 0-7.
      uint32_t av[2][4];
      tile_to_tf32(&vn[0], av[0]);
      tile_to_tf32(&vn[4], av[1]);
      {
        uint32_t af[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) tile_to_tf32(&S[4 * j], af[j]);
        wgmma_fence();
        tf32_rs<16>(oq, av[0], desc + 32, true);
        tf32_rs<16>(oq, av[1], desc + 32 + kStep, true);
#pragma unroll
        for (int j = 0; j < 8; ++j) wgmma_m64n32k8_tf32_rs(acc, af[j], desc + kStep * j, true);
        wgmma_commit_group();
        wgmma_wait_group<0>();
      }
      {  // Batch 2: key tiles 8-15, then (S read) the decay and the state update, one stream.
        uint32_t af[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) tile_to_tf32(&S[4 * (8 + j)], af[j]);
        decay_s();
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 8; ++j)
          wgmma_m64n32k8_tf32_rs(acc, af[j], desc + kStep * (8 + j), true);
        state_update(vn);
        wgmma_commit_group();
        wgmma_wait_group<0>();
        wgmma_fence_operands(S);
      }
      wgmma_fence_operands(acc);
      wgmma_fence_operands(oq);
#pragma unroll
      for (int i = 0; i < 8; ++i) pt[i] = acc[i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o_dst[i] = pack_bf16x2(acc[8 + 2 * i] + oq[2 * i], acc[9 + 2 * i] + oq[2 * i + 1]);
    }
  }
  if (wg == 0) my_turn();  // warpgroup 1's last hand-over
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i] + pt[i % 8] + vprev[i % 8];
}

// The operands of the session-24 chain kernels in the zeroed shared memory: the decays at 0, Tb,
// A_qk, G, H (`small`) at 8 KiB, every B operand through one descriptor; and S^T's start values.
struct BenchOperands {
  const float* decay;
  const uint32_t* small;
  SmemDesc desc;
};
__device__ __forceinline__ BenchOperands bench_operands(const unsigned char* smem) {
  return {reinterpret_cast<const float*>(smem), reinterpret_cast<const uint32_t*>(smem + 8192),
          smem_desc_noswizzle(smem, kLbo, kSbo)};
}
__device__ __forceinline__ void bench_state(float (&S)[64], int salt) {
#pragma unroll
  for (int i = 0; i < 64; ++i) S[i] = 0.01f * float((threadIdx.x + i + salt) % 7);
}

// The kernel-like small steps of interleaved_kernel and lookahead_kernel (operands zeros in
// `small`: Tb pre-split at 0, A_qk^T at 1024 words, G / H at 2048 / 2304).
// V_new^T = (v^T - P^T) Tb^T in split bf16 (6 mma.sync); p: P^T's two token tiles.
__device__ __forceinline__ void bench_v_new(const float* p, const uint32_t* small, int g, int t,
                                            float (&vn)[2][4]) {
  float x[2][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int f = 0; f < 4; ++f) x[m][f] = 0.5f - p[4 * m + f];
  uint32_t xh[4], xl[4];
  fastkda::prefill_cuda::split_vnew(x, xh, xl);
#pragma unroll
  for (int mr = 0; mr < 2; ++mr) {
    const uint4 b = *reinterpret_cast<const uint4*>(&small[4 * (8 * (8 * mr + g) + t)]);
#pragma unroll
    for (int f = 0; f < 4; ++f) vn[mr][f] = 0.0f;
    mma_m16n8k16_bf16(vn[mr], xl, b.x, b.y);
    mma_m16n8k16_bf16(vn[mr], xh, b.z, b.w);
    mma_m16n8k16_bf16(vn[mr], xh, b.x, b.y);
  }
}
// O^T += V_new^T A_qk^T over the lower triangle of kTiles token tiles (3 / 10 mma.sync for 2 / 4);
// o: O^T's kTiles token tiles.
template <int kTiles>
__device__ __forceinline__ void bench_intra_out(float* o, const float (&vn)[kTiles][4],
                                                const uint32_t* small, int g, int t) {
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
    uint32_t av[4];
    tile_to_tf32(vn[m], av);
#pragma unroll
    for (int mr = m; mr < kTiles; ++mr)
      mma_m16n8k8_tf32(*reinterpret_cast<float(*)[4]>(o + 4 * mr), av,
                       small[1024 + 64 * mr + 8 * g + 2 * t + m],
                       small[1024 + 64 * mr + 8 * g + 2 * t + 4 + m]);
  }
}
// The 16-token chunk's output: its A_qk part, then out.
__device__ __forceinline__ void bench_output(float* o, const float (&vn)[2][4],
                                             const uint32_t* small, int g, int t,
                                             uint32_t* o_dst) {
  bench_intra_out<2>(o, vn, small, g, t);
#pragma unroll
  for (int i = 0; i < 4; ++i) o_dst[i] = pack_bf16x2(o[2 * i], o[2 * i + 1]);
}
// Key tiles j0 .. j1 - 1 of S^T times the decays (values kept away from zero).
__device__ __forceinline__ void bench_decay(float (&S)[64], const float* decay, int t, int j0,
                                            int j1) {
#pragma unroll
  for (int j = j0; j < j1; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(&decay[8 * j + 2 * t]);
    S[4 * j + 0] = S[4 * j + 0] * d.x + 1e-3f;
    S[4 * j + 1] = S[4 * j + 1] * d.y + 1e-3f;
    S[4 * j + 2] = S[4 * j + 2] * d.x + 1e-3f;
    S[4 * j + 3] = S[4 * j + 3] * d.y + 1e-3f;
  }
}

// Issue competition for the chain kernels below (kCompete): as in the prefill kernel, two
// prepare groups of 128 threads (warps 0-7, 112 registers) hand 16-token stages to the scan
// warpgroup (warps 8-11, 232 registers) through Full / Empty named barriers (ids 2, 3 / 4, 5), one
// group per stage in turn. Instead of the prepare's math each thread issues kPrepFfma FFMA per 16
// tokens (8 independent chains): session 22 measured ~570 instructions per thread and 16-token
// chunk in the prepare, whose math costs the chain 12-16 % (skip probes).
constexpr int kCompeteFull = 2, kCompeteEmpty = 4;
template <int kTok, int kPrepFfma>
__device__ __forceinline__ void prep_role(int chunks, float* sink) {
  setmaxnreg_dec<112>();
  const int p = threadIdx.x / 128;
  float x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = float(threadIdx.x + i);
  for (int c = p; c < chunks; c += 2) {
    if (c >= 2) bar_sync(kCompeteEmpty + c % 2, 256);
#pragma unroll 1
    for (int it = 0; it < kPrepFfma * kTok / 16 / 8; ++it)
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = fmaf(x[i], 0.999f, 1e-3f);
    bar_arrive(kCompeteFull + c % 2, 256);
  }
  float y = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) y += x[i];
  sink[threadIdx.x] = y;
}
// kCompete >= 0: threads 0-255 run the prepare role (true: done), the scan warpgroup takes its
// registers. kCompete < 0: no prepare threads.
template <int kTok, int kCompete>
__device__ __forceinline__ bool ran_prepare(int chunks, uint32_t* sink) {
  if constexpr (kCompete >= 0) {
    if (threadIdx.x < 256) {
      prep_role<kTok, kCompete>(chunks, reinterpret_cast<float*>(sink));
      return true;
    }
    setmaxnreg_inc<232>();
  }
  return false;
}

// Interleaved chains (session 24): kChains (1 or 2) independent 64-row slices of S^T in ONE
// warpgroup, sharing the B operands (the two value halves of a kVs = 128 head), each chain as the
// shipped kVs = 64 scan forms it (P^T / O^T one m64n32k8 per key tile, V_new^T by mma.sync in
// split bf16, O^T += V_new^T A_qk^T by mma.sync, 64 FMUL and three m64n128k16 for the state
// update), issued so that one chain's V_new^T, decay, split and output run while the other
// chain's products are on the tensor pipe: per chunk P0 (wait) P1, finish 0 -> U0, (wait P1)
// finish 1 -> U1, (wait U0), and the next chunk's conversions of S0 run beside U1. The tf32 A
// operands are one set of 16 key tiles (registers reused between batches made ptxas inject a
// full wait: it hoists the next batch's conversions). With two chains ptxas still waits for U1
// at the loop head after 12 of S0's 64 conversions (C7517). kChains = 1: the same code for one
// chain; kSplit > 1 (one chain): P^T / O^T over kSplit rotating accumulators, summed after.
template <int kChains, int kSplit = 1, int kCompete = -1>
__global__ void __launch_bounds__(kCompete >= 0 ? 384 : 256, 1)
    interleaved_kernel(int chunks, float* state_out, uint32_t* o_out, int /*not used*/) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  if (ran_prepare<16, kCompete>(chunks, o_out)) return;  // kCompete FFMA per thread, 16 tokens
  const auto [decay, small, desc] = bench_operands(smem);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  float S[kChains][64];
#pragma unroll
  for (int c = 0; c < kChains; ++c) bench_state(S[c], c);
  float acc[kChains][16];
  float part[kSplit][16];  // kSplit > 1: key tile j accumulates into part[j % kSplit]
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[c][i] = 0.0f;
#pragma unroll
  for (int q = 0; q < kSplit; ++q)
#pragma unroll
    for (int i = 0; i < 16; ++i) part[q][i] = 0.0f;
  uint32_t* o_dst = o_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
#pragma unroll
  for (int c = 0; c < kChains; ++c) wgmma_fence_operands(S[c]);

  // Chain c's P^T / O^T over the 16 key tiles: one group.
  auto po = [&](int c) {
    uint32_t af[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) tile_to_tf32(&S[c][4 * j], af[j]);
    wgmma_fence();
    if constexpr (kSplit == 1) {
#pragma unroll
      for (int j = 0; j < 16; ++j) wgmma_m64n32k8_tf32_rs(acc[c], af[j], desc + kStep * j, j > 0);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j)
        wgmma_m64n32k8_tf32_rs(part[j % kSplit], af[j], desc + kStep * j, j >= kSplit);
    }
    wgmma_commit_group();
  };
  // After chain c's P^T / O^T: V_new^T, the decay, the state update issued (one group), output.
  auto finish = [&](int c) {
    if constexpr (kSplit > 1) {
#pragma unroll
      for (int q = 0; q < kSplit; ++q) wgmma_fence_operands(part[q]);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float sum = part[0][i];
#pragma unroll
        for (int q = 1; q < kSplit; ++q) sum += part[q][i];
        acc[c][i] = sum;
      }
    }
    wgmma_fence_operands(acc[c]);
    float vn[2][4];
    bench_v_new(acc[c], small, g, t, vn);
    bench_decay(S[c], decay, t, 0, 16);
    uint32_t vh[4], vl[4];
    fastkda::prefill_cuda::split_vnew(vn, vh, vl);
    wgmma_fence_operands(S[c]);
    wgmma_fence();
    wgmma_m64n128k16_bf16_rs(S[c], vl, desc, true);
    wgmma_m64n128k16_bf16_rs(S[c], vh, desc + 16, true);
    wgmma_m64n128k16_bf16_rs(S[c], vh, desc, true);
    wgmma_commit_group();
    bench_output(&acc[c][8], vn, small, g, t, o_dst);  // in the update's shadow
  };

  for (int ch = 0; ch < chunks; ++ch) {
    if constexpr (kCompete >= 0)
      bar_sync(kCompeteFull + ch % 2, 256);
    else
      bar_sync(1, blockDim.x);  // stands for the hand-off wait
    po(0);  // the first key tile overwrites acc (no zeroing: its registers may still be U1's A)
    wgmma_wait_group<0>();  // P0 done (and the last chunk's U1: S1 ready)
    if constexpr (kChains == 1) {
      finish(0);
    } else {
      wgmma_fence_operands(S[1]);
      po(1);
      finish(0);
      wgmma_wait_group<1>();  // P1 done, U0 may run
      finish(1);
    }
    wgmma_wait_group<kChains - 1>();  // U0 done: S0 ready
    wgmma_fence_operands(S[0]);
    if (kCompete >= 0 && ch + 2 < chunks) bar_arrive(kCompeteEmpty + ch % 2, 256);
  }
  wgmma_wait_group<0>();
#pragma unroll
  for (int c = 0; c < kChains; ++c) wgmma_fence_operands(S[c]);
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[0][i] + S[kChains - 1][i];
}

// The transition pass's chunk of scan_chunk_wg<128, false> written for fewer registers (session
// 27, to fit four scan warpgroups and a prepare group in 96 registers per thread): P^T in
// batches of kBatch key tiles (the shipped chunk: 8, 32 registers of tf32 copies of S). A
// version without copies (S's own registers as the A operands, truncated tf32) made ptxas
// serialise the chain even at 128 registers (C7512); it was not kept.
template <int kBatch>
__device__ __forceinline__ void lean_transition_chunk(
    const fastkda::prefill_cuda::WgScanStage<128>& sb, float (&S)[16][4], int vc) {
  using namespace fastkda::prefill_cuda;
  const int t = threadIdx.x & 3;
  float pk[2][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int f = 0; f < 4; ++f) pk[m][f] = 0.0f;
  auto& pk8 = reinterpret_cast<float(&)[8]>(pk);
  auto& S64 = reinterpret_cast<float(&)[64]>(S);
  const SmemDesc desc_w = smem_desc_noswizzle(sb.w, kWgLboKeys, kWgSboKeys);
  constexpr uint32_t kStepW = 2 * kWgLboKeys / 16;
  wgmma_fence_operands(pk8);
#pragma unroll
  for (int b = 0; b < 16; b += kBatch) {
    uint32_t af[kBatch][4];
#pragma unroll
    for (int jj = 0; jj < kBatch; ++jj) acc_to_a(S[b + jj], af[jj]);
    wgmma_fence();
#pragma unroll
    for (int jj = 0; jj < kBatch; ++jj)
      wgmma_m64n16k8_tf32_rs(pk8, af[jj], desc_w + kStepW * (b + jj), true);
    wgmma_commit_group();
#pragma unroll
    for (int jj = 0; jj < kBatch; ++jj)
      decay_tile(S[b + jj], *reinterpret_cast<const float2*>(&sb.decay[8 * (b + jj) + 2 * t]));
    wgmma_wait_group<0>();
  }
  wgmma_fence_operands(pk8);
  float vn[2][4];
  wg_v_new(sb, pk, vc, true, vn);
  uint32_t vh[4], vl[4];
  split_vnew(vn, vh, vl);
  issue_state_update(S64, vh, vl, sb);
  wgmma_wait_group<0>();
  wgmma_fence_operands(S64);
}

// Synthetic prepare groups (transition_chain_kernel, wy_chain_kernel): kGroups groups of 128
// threads take chunks in turn; per chunk each thread issues kFfma FFMA (8 independent chains) and
// each warp kMma independent mma.sync m16n8k16, then hands the chunk over on Full (ids 2, 3) after
// waiting on Empty (ids 4, 5) for the chunk two before.
template <int kFfma, int kMma = 0, int kGroups = 1>
__device__ __forceinline__ void prep_synthetic(int chunks, int handoff, float* sink) {
  const int p = int(threadIdx.x) / 128;
  float x[8], acc[4][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = float(threadIdx.x + i);
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i / 4][i % 4] = 0.0f;
  const uint32_t a[4] = {threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3};
  for (int c = p; c < chunks; c += kGroups) {
    if (c >= 2) bar_sync(kCompeteEmpty + c % 2, handoff);
#pragma unroll 1
    for (int it = 0; it < kMma / 4; ++it)
#pragma unroll
      for (int i = 0; i < 4; ++i) mma_m16n8k16_bf16(acc[i], a, a[i], uint32_t(it));
#pragma unroll 1
    for (int it = 0; it < kFfma / 8; ++it)
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = fmaf(x[i], 0.999f, 1e-3f);
    bar_arrive(kCompeteFull + c % 2, handoff);
  }
  float y = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) y += x[i] + acc[i / 2][i % 4];
  sink[threadIdx.x] = y;
}

// Session 27: split T's pass-1 chunk (the shipped scan_chunk_wg<128, false>: P^T on m64n16k8,
// V_new^T by split-bf16 mma.sync, decay, three m64n128k16) with 2 scan warpgroups (128 rows of S^T:
// today's value or transition CTA) or 4 (256 rows: a segment's value and transition slices in
// one CTA, sharing one prepare), beside one synthetic prepare warpgroup of kPrepFfma FFMA per
// thread and chunk (< 0: none) that hands chunks over through Full / Empty named barriers as the
// kernel's does. Launch bounds kLaunch set the register cap (640 threads: 96 per thread).
template <int kLaunch, int kPrepFfma, int kChunk = -1, int kPrepRegs = 0, int kScanRegs = 0>
__global__ void __launch_bounds__(kLaunch, 1)
    transition_chain_kernel(int chunks, float* state_out, uint32_t* o_out, int /*not used*/) {
  using namespace fastkda::prefill_cuda;
  extern __shared__ __align__(128) unsigned char smem[];
  static_assert(sizeof(WgScanStage<128>) + 8 * kC * kLdOut * 2 <= kSmemBytes, "bench smem");
  zero_smem(smem);
  constexpr int kPrep = kPrepFfma >= 0 ? 128 : 0;
  const int handoff = int(blockDim.x);
  if constexpr (kPrep > 0) {
    if (int(threadIdx.x) < kPrep) {
      setmaxnreg_dec<kPrepRegs ? kPrepRegs : kLaunch == 640 ? 96 : 112>();
      prep_synthetic<kPrepFfma>(chunks, handoff, reinterpret_cast<float*>(o_out));
      return;
    }
    setmaxnreg_inc<kScanRegs ? kScanRegs : kLaunch == 640 ? 96 : 152>();
  }
  const int tid = int(threadIdx.x) - kPrep, warp = tid / 32, wg = tid / 128;
  const auto& sb = *reinterpret_cast<const WgScanStage<128>*>(smem);
  auto& ostage = *reinterpret_cast<uint16_t(*)[kC][kLdOut]>(smem + sizeof(WgScanStage<128>) +
                                                            size_t(warp % 8) * kC * kLdOut * 2);
  float S[16][4];
  bench_state(reinterpret_cast<float(&)[64]>(S), wg);
  wgmma_fence_operands(reinterpret_cast<float(&)[64]>(S));
  const PrefillArgs a{};
  for (int c = 0; c < chunks; ++c) {
    bar_sync(kPrep ? kCompeteFull + c % 2 : 1, handoff);
    if constexpr (kChunk < 0)
      scan_chunk_wg<128, false>(a, sb, ostage, S, 16 * (warp % 8), nullptr, kC, true);
    else
      lean_transition_chunk<kChunk>(sb, S, 16 * (warp % 8));
    if (kPrep && c + 2 < chunks) bar_arrive(kCompeteEmpty + c % 2, handoff);
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i / 4][i % 4];
}

// Session 30: split T's pass-1 chunk for a segment's value and transition rows in one CTA with
// two m-blocks per scan warpgroup (warpgroup w: value rows 64 w .. 64 w + 63 as block A, the
// transition rows with the same numbers as block B; 128 f32 registers of S per thread), so that
// one prepare serves 256 rows with 2 scan warpgroups, where session 27's 4 warpgroups (640
// threads with a prepare group) had 96 registers per thread and a serialised chain. The chunk is
// the shipped one (scan.cuh scan_chunk_pair, Pass::kPairs: P^T in batches of 2 key tiles per
// block). kPrepGroups synthetic prepare groups of kPrepFfma FFMA per thread and chunk hand chunks
// over as in transition_chain_kernel (< 0: none).
template <int kLaunch, int kPrepFfma, int kPrepGroups, int kPrepRegs, int kScanRegs>
__global__ void __launch_bounds__(kLaunch, 1)
    pair_blocks_kernel(int chunks, float* state_out, uint32_t* o_out, int /*not used*/) {
  using namespace fastkda::prefill_cuda;
  extern __shared__ __align__(128) unsigned char smem[];
  static_assert(sizeof(WgScanStage<128>) <= kSmemBytes, "bench smem");
  zero_smem(smem);
  constexpr int kPrep = kPrepFfma >= 0 ? 128 * kPrepGroups : 0;
  static_assert(kLaunch == kPrep + 256, "prepare groups and two scan warpgroups");
  const int handoff = 128 + 256;  // one prepare group per chunk and the scan threads
  if constexpr (kPrep > 0) {
    if (int(threadIdx.x) < kPrep) {
      setmaxnreg_dec<kPrepRegs>();
      prep_synthetic<kPrepFfma, 0, kPrepGroups>(chunks, handoff, reinterpret_cast<float*>(o_out));
      return;
    }
    setmaxnreg_inc<kScanRegs>();
  }
  const int tid = int(threadIdx.x) - kPrep, warp = tid / 32, wg = tid / 128;
  const auto& sb = *reinterpret_cast<const WgScanStage<128>*>(smem);
  float SA[16][4], SB[16][4];
  bench_state(reinterpret_cast<float(&)[64]>(SA), wg);
  bench_state(reinterpret_cast<float(&)[64]>(SB), wg + 2);
  wgmma_fence_operands(reinterpret_cast<float(&)[64]>(SA));
  wgmma_fence_operands(reinterpret_cast<float(&)[64]>(SB));
  for (int c = 0; c < chunks; ++c) {
    bar_sync(kPrep ? kCompeteFull + c % 2 : 1, kPrep ? handoff : 256);
    scan_chunk_pair(sb, SA, SB, 16 * (warp % 4) + 64 * wg);
    if (kPrep && c + 2 < chunks) bar_arrive(kCompeteEmpty + c % 2, handoff);
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = SA[i / 4][i % 4] + SB[i / 4][i % 4];
}

// Session 28: the WY form of a C-token chunk for split T's first pass (no outputs). With
// W = X (k^ . 2^G) and U = X v formed by the prepare over the whole C-token chunk (X the chunk's
// C x C inverse, block forward substitution over its 16-token Tb blocks), the chain per chunk is
// two products and nothing between them but conversions:
//   P^T = S^T W^T                    16 wgmma m64nCk8 tf32 (A = tf32(S^T), batches of kBatch)
//   V_new^T = U^T - P^T              value rows (transition rows: U = 0, W stored negated)
//   S^T = S^T diag(d) + V_new^T ke   C / 16 k16 steps x 3 wgmma m64n128k16 bf16 (split hi / lo)
// (the shipped 16-token chunk forms V_new^T = (v^T - P^T) Tb^T inside the chain by mma.sync, and
// session 12's longer chunks did that product over the whole chunk: its cost grows with C^2).
// kPrepFfma >= 0: two synthetic prepare warpgroups alternating chunks (the kVs = 128 kernel's two
// groups, 112 / 144 registers), each thread kPrepFfma FFMA and each warp kPrepMma independent
// mma.sync m16n8k16 per chunk of C tokens, handed over on Full / Empty named barriers.
// kShipped: the shipped chunk (scan_chunk_wg<128, false>, C = 16) in the same harness.
template <int C, bool kValue, int kBatch, int kPrepFfma = -1, int kPrepMma = 0,
          bool kShipped = false>
__global__ void __launch_bounds__(kPrepFfma >= 0 ? 512 : 256, 1)
    wy_chain_kernel(int chunks, float* state_out, uint32_t* o_out, int /*not used*/) {
  using namespace fastkda::prefill_cuda;
  static_assert(!kShipped || C == 16, "the shipped chunk is 16 tokens");
  static_assert(sizeof(WgScanStage<128>) + 8 * kC * kLdOut * 2 <= kSmemBytes, "bench smem");
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  constexpr int kPrep = kPrepFfma >= 0 ? 256 : 0;
  const int handoff = 128 + (int(blockDim.x) - kPrep);  // one prepare group + the scan threads
  if constexpr (kPrep > 0) {
    if (int(threadIdx.x) < kPrep) {
      setmaxnreg_dec<112>();
      prep_synthetic<kPrepFfma, kPrepMma, 2>(chunks, handoff, reinterpret_cast<float*>(o_out));
      return;
    }
    setmaxnreg_inc<144>();
  }
  const int tid = int(threadIdx.x) - kPrep, warp = tid / 32, wg = tid / 128, t = tid & 3;
  const float* decay = reinterpret_cast<const float*>(smem);
  const float4* ustage = reinterpret_cast<const float4*>(smem);  // [C / 8][scan threads]
  const SmemDesc desc = smem_desc_noswizzle(smem, kLbo, kSbo);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  const auto& sb = *reinterpret_cast<const WgScanStage<128>*>(smem);
  auto& ostage = *reinterpret_cast<uint16_t(*)[kC][kLdOut]>(smem + sizeof(WgScanStage<128>) +
                                                            size_t(warp % 8) * kC * kLdOut * 2);
  const PrefillArgs args{};
  float S[64];
  bench_state(S, wg);
  wgmma_fence_operands(S);
  for (int c = 0; c < chunks; ++c) {
    bar_sync(kPrep ? kCompeteFull + c % 2 : 1, kPrep ? handoff : int(blockDim.x));
    if constexpr (kShipped) {
      scan_chunk_wg<128, false>(args, sb, ostage, reinterpret_cast<float(&)[16][4]>(S),
                                16 * (warp % 8), nullptr, kC, true);
    } else {
      float p[C / 2];
#pragma unroll
      for (int b = 0; b < 16; b += kBatch) {
        uint32_t af[kBatch][4];
#pragma unroll
        for (int jj = 0; jj < kBatch; ++jj) tile_to_tf32(&S[4 * (b + jj)], af[jj]);
        wgmma_fence();
#pragma unroll
        for (int jj = 0; jj < kBatch; ++jj)
          tf32_rs<C>(p, af[jj], desc + kStep * (b + jj), b + jj > 0);
        wgmma_commit_group();
        wgmma_wait_group<0>();
      }
      wgmma_fence_operands(p);
      bench_decay(S, decay, t, 0, 16);
      if constexpr (kValue) {
#pragma unroll
        for (int i = 0; i < C / 8; ++i) {
          const float4 u = ustage[i * 256 + tid];
          p[4 * i + 0] = u.x - p[4 * i + 0];
          p[4 * i + 1] = u.y - p[4 * i + 1];
          p[4 * i + 2] = u.z - p[4 * i + 2];
          p[4 * i + 3] = u.w - p[4 * i + 3];
        }
      }
      bench_update<C>(S, p, desc, 32);
    }
    if (kPrep && c + 2 < chunks) bar_arrive(kCompeteEmpty + c % 2, handoff);
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i];
}

// One chunk of lookahead with the small products on mma.sync inside the wgmma stream (session 24).
// With S_{c+1} = S_c D_c + V_c^T ke_c, chunk c + 1's K = 128 products come from S_c:
//   Y_c = S_c [D_c kw_{c+1}; D_c qs_{c+1}]^T            16 m64n32k8 (as today's P^T / O^T)
//   P_{c+1} = Y_c.P + V_c^T G_c,  O~_{c+1} = Y_c.O + V_c^T H_c   (G_c, H_c = ke_c [kw; qs]_{c+1}^T,
//                                                       16 x 16 each, from the producers)
// so that chunk c's V_new^T, output, decay and split (which need Y_{c-1} and V_{c-1}, not Y_c) can
// run while Y_c is on the tensor pipe: the issuing warp stalls at each wgmma until the pipe takes
// it (WgmmaRates / OVERLAP: 16 m64n32k8 then 64 dependent FFMA overlap by ~60 clocks only), so the
// independent work is written between the wgmma batches for ptxas to interleave. kInterleave = 0:
// the same work written after all 16 wgmma (ptxas moves it between them all the same; in both
// the SASS has one wait per chunk, after the state update). Slower than the shipped order
// (0.72-0.73 against 0.63-0.64 us): mma.sync inside a wgmma stream stalls the stream.
template <int kInterleave>
__global__ void __launch_bounds__(128, 1)
    lookahead_kernel(int chunks, float* state_out, uint32_t* o_out, int /*not used*/) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  const auto [decay, small, desc] = bench_operands(smem);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  float S[64];
  bench_state(S, 0);
  float Y[16], Yn[16], vprev[2][4];
#pragma unroll
  for (int i = 0; i < 16; ++i) Y[i] = Yn[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) vprev[i / 4][i % 4] = 0.0f;
  uint32_t* o_dst = o_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  wgmma_fence_operands(S);

  // One chunk: Y = Y_{c-1} in, Yn = Y_c out (two buffers taking turns: a copy made ptxas wait for
  // Y_c before the state update, C7517).
  auto step = [&](float (&Y)[16], float (&Yn)[16]) {
    // Nothing is in flight here; saying so keeps ptxas from assuming the last step's groups are
    // (its tracking merges the loop's back edge: else it waits for Y_c before the corrections).
    wgmma_wait_group<0>();
    wgmma_fence_operands(Y);
    bar_sync(1, 128);  // stands for the hand-off wait
    uint32_t af[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) tile_to_tf32(&S[4 * j], af[j]);
    float p[2][4], o[2][4], vn[2][4];
    uint32_t vh[4], vl[4];
    // The pieces of chunk c's own work (Y = Y_{c-1}, vprev = V_{c-1}).
    auto correction = [&] {  // P = Y.P + vprev G, O~ = Y.O + vprev H (tf32, 2 k steps each)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int f = 0; f < 4; ++f) p[m][f] = Y[4 * m + f], o[m][f] = Y[8 + 4 * m + f];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        uint32_t av[4];
        tile_to_tf32(vprev[k], av);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          mma_m16n8k8_tf32(p[m], av, small[2048 + 64 * m + 8 * g + t + 4 * k],
                           small[2048 + 64 * m + 8 * g + t + 4 * k + 2]);
          mma_m16n8k8_tf32(o[m], av, small[2304 + 64 * m + 8 * g + t + 4 * k],
                           small[2304 + 64 * m + 8 * g + t + 4 * k + 2]);
        }
      }
    };
    auto v_new = [&] { bench_v_new(&p[0][0], small, g, t, vn); };
    auto output = [&] { bench_output(&o[0][0], vn, small, g, t, o_dst); };
    auto decay_half = [&](int h) { bench_decay(S, decay, t, 8 * h, 8 * h + 8); };
    wgmma_fence_operands(Yn);
    wgmma_fence();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int j = 4 * q; j < 4 * q + 4; ++j)
        wgmma_m64n32k8_tf32_rs(Yn, af[j], desc + kStep * j, j > 0);
      if constexpr (kInterleave) {
        if (q == 0) correction();
        if (q == 1) v_new();
        if (q == 2) { output(); decay_half(0); }
      }
    }
    wgmma_commit_group();
    if constexpr (!kInterleave) {
      correction();
      v_new();
      output();
      decay_half(0);
    }
    decay_half(1);
    fastkda::prefill_cuda::split_vnew(vn, vh, vl);
    wgmma_fence_operands(S);
    wgmma_fence();
    wgmma_m64n128k16_bf16_rs(S, vl, desc, true);
    wgmma_m64n128k16_bf16_rs(S, vh, desc + 16, true);
    wgmma_m64n128k16_bf16_rs(S, vh, desc, true);
    wgmma_commit_group();
#pragma unroll
    for (int i = 0; i < 8; ++i) vprev[i / 4][i % 4] = vn[i / 4][i % 4];
    wgmma_wait_group<0>();
    wgmma_fence_operands(S);
    wgmma_fence_operands(Yn);
  };
  for (int ch = 0; ch < chunks; ch += 2) {
    step(Y, Yn);
    step(Yn, Y);
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i] + Y[i % 16] + vprev[0][i % 4];
}

// A 32-token chunk done the kernel's way (session 24; session 12's C = 32 row had its small
// products on wgmma and P^T / O^T in 4 waited batches): P^T / O^T as one group of 16 m64n64k8
// (N = 64: 32 tokens each), V_new^T = (v^T - P^T) Tb^T by mma.sync in split bf16 over the lower
// triangle (18 m16n8k16), O^T += V_new^T A_qk^T by mma.sync (10 m16n8k8), the decay, and the
// state update as two k16 steps of three m64n128k16, the output in its shadow. Per 16 tokens the
// tensor work is the C = 16 chunk's (P^T / O^T 256, update 192 clocks), the conversions, decay and
// waits half of it.
template <int kCompete = -1>
__global__ void __launch_bounds__(kCompete >= 0 ? 384 : 256, 1)
    chain32_kernel(int chunks, float* state_out, uint32_t* o_out, int /*not used*/) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  if (ran_prepare<32, kCompete>(chunks, o_out)) return;
  const auto [decay, small, desc] = bench_operands(smem);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  float S[64];
  bench_state(S, 0);
  float acc[32];  // token tiles 0-3 P^T, 4-7 O^T
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  uint32_t* o_dst = o_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  wgmma_fence_operands(S);
  for (int ch = 0; ch < chunks; ++ch) {
    if constexpr (kCompete >= 0)
      bar_sync(kCompeteFull + ch % 2, 256);
    else
      bar_sync(1, blockDim.x);  // stands for the hand-off wait (both warpgroups: lockstep)
    uint32_t af[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) tile_to_tf32(&S[4 * j], af[j]);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 16; ++j) wgmma_m64n64k8_tf32_rs(acc, af[j], desc + kStep * j, j > 0);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operands(acc);
    // V_new^T: k16 steps kk (source tokens 16 kk ..), output token tiles mr >= 2 kk.
    uint32_t xh[2][4], xl[2][4];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      float x[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int f = 0; f < 4; ++f) x[m][f] = 0.5f - acc[4 * (2 * kk + m) + f];
      fastkda::prefill_cuda::split_vnew(x, xh[kk], xl[kk]);
    }
    float vn[4][4];
#pragma unroll
    for (int mr = 0; mr < 4; ++mr) {
#pragma unroll
      for (int f = 0; f < 4; ++f) vn[mr][f] = 0.0f;
#pragma unroll
      for (int kk = 0; kk <= mr / 2; ++kk) {
        const uint4 b =
            *reinterpret_cast<const uint4*>(&small[4 * (8 * (8 * mr + g) + t) + 512 * kk]);
        mma_m16n8k16_bf16(vn[mr], xl[kk], b.x, b.y);
        mma_m16n8k16_bf16(vn[mr], xh[kk], b.z, b.w);
        mma_m16n8k16_bf16(vn[mr], xh[kk], b.x, b.y);
      }
    }
    bench_decay(S, decay, t, 0, 16);
    uint32_t vh[2][4], vl[2][4];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
      fastkda::prefill_cuda::split_vnew(*reinterpret_cast<const float(*)[2][4]>(&vn[2 * kk][0]),
                                        vh[kk], vl[kk]);
    wgmma_fence_operands(S);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      wgmma_m64n128k16_bf16_rs(S, vl[kk], desc + 32 * kk, true);
      wgmma_m64n128k16_bf16_rs(S, vh[kk], desc + 32 * kk + 16, true);
      wgmma_m64n128k16_bf16_rs(S, vh[kk], desc + 32 * kk, true);
    }
    wgmma_commit_group();
    // O^T += V_new^T A_qk^T over the lower triangle (10 m16n8k8), out: in the update's shadow.
    float* o = &acc[16];
    bench_intra_out<4>(o, vn, small, g, t);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o_dst[i] = pack_bf16x2(o[2 * i], o[2 * i + 1]) ^ pack_bf16x2(o[8 + 2 * i], o[9 + 2 * i]);
    wgmma_wait_group<0>();
    wgmma_fence_operands(S);
    if (kCompete >= 0 && ch + 2 < chunks) bar_arrive(kCompeteEmpty + ch % 2, 256);
  }
  float* dst = state_out + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i] + acc[i % 32];
}

// Per-instruction cost of the scan's wgmma shapes (session 24): kIters groups of 16 wgmma of one
// shape (kShape: 0 m64n16k8 tf32, 1 m64n32k8 tf32, 2 m64n64k8 tf32, 3 m64n128k16 bf16, 4
// m64n32k16 bf16; A from registers, B zeros in shared memory), one accumulator (each wgmma
// depends on the last) or kAccs rotating ones, each group waited for (kWait = 0) or one group
// kept in flight (kWait = 1). Thread 0 of each CTA writes its clock cycles.
template <int kShape, int kAccs, int kWait>
__global__ void __launch_bounds__(256, 1) wgmma_rate_kernel(int iters, long long* cycles,
                                                            float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  const SmemDesc desc = smem_desc_noswizzle(smem, kLbo, kSbo);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  constexpr int kN =
      kShape == 0 ? 16 : kShape == 1 ? 32 : kShape == 2 ? 64 : kShape == 3 ? 128 : 32;
  float acc[kAccs][kN / 2];
#pragma unroll
  for (int q = 0; q < kAccs; ++q)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[q][i] = 0.0f;
  uint32_t a[4] = {threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3};
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int q = 0; q < kAccs; ++q) wgmma_fence_operands(acc[q]);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      auto& d = acc[j % kAccs];
      const SmemDesc b = desc + kStep * (j % 8);
      if constexpr (kShape >= 3)
        bf16_rs<kN>(d, a, b, true);
      else
        tf32_rs<kN>(d, a, b, true);
    }
    wgmma_commit_group();
    wgmma_wait_group<kWait>();
  }
  wgmma_wait_group<0>();
#pragma unroll
  for (int q = 0; q < kAccs; ++q) wgmma_fence_operands(acc[q]);
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float x = 0.0f;
#pragma unroll
  for (int q = 0; q < kAccs; ++q)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) x += acc[q][i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

// Does mma.sync run beside an in-flight wgmma group? (session 24) Per iteration: one group of 16
// m64n32k8 tf32 (256 clocks at the measured rate), then (kMode) 0 nothing, 1 eight dependent
// mma.sync m16n8k16 bf16, 2 eight independent ones, 3 64 dependent FFMA, 4 eight dependent
// mma.sync with no wgmma before them; then the group is waited for. Clocks per iteration.
template <int kMode>
__global__ void __launch_bounds__(128, 1) overlap_kernel(int iters, long long* cycles,
                                                         float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  zero_smem(smem);
  const SmemDesc desc = smem_desc_noswizzle(smem, kLbo, kSbo);
  constexpr uint32_t kStep = 2 * kLbo / 16;
  float acc[16] = {};
  float h[8][4] = {};
  float f = float(threadIdx.x);
  uint32_t a[4] = {threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3};
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    if constexpr (kMode != 4) {
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < 16; ++j) wgmma_m64n32k8_tf32_rs(acc, a, desc + kStep * (j % 8), true);
      wgmma_commit_group();
    }
    if constexpr (kMode == 1 || kMode == 4) {
#pragma unroll
      for (int j = 0; j < 8; ++j) mma_m16n8k16_bf16(h[0], a, a[0], a[1]);
    } else if constexpr (kMode == 2) {
#pragma unroll
      for (int j = 0; j < 8; ++j) mma_m16n8k16_bf16(h[j], a, a[0], a[1]);
    } else if constexpr (kMode == 3) {
#pragma unroll
      for (int j = 0; j < 64; ++j) f = fmaf(f, 0.999f, 1e-3f);
    }
    if constexpr (kMode != 4) {
      wgmma_wait_group<0>();
      wgmma_fence_operands(acc);
    }
  }
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float x = f;
#pragma unroll
  for (int i = 0; i < 16; ++i) x += acc[i];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) x += h[j][i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
// Median over the CTAs (one per SM) of the clock cycles of `kernel` per iteration.
using ClockKernel = void (*)(int, long long*, float*);
double median_clocks(ClockKernel kernel, int threads, int sms, int iters) {
  fastkda_gpu_test::DeviceBuf cyc(size_t(sms) * 8), sink(size_t(sms) * threads * 4);
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
            cudaSuccess);
  for (int r = 0; r < 2; ++r)
    kernel<<<sms, threads, kSmemBytes>>>(iters, static_cast<long long*>(cyc.get()),
                                         static_cast<float*>(sink.get()));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<long long> c(sms);
  cudaMemcpy(c.data(), cyc.get(), size_t(sms) * 8, cudaMemcpyDeviceToHost);
  std::sort(c.begin(), c.end());
  return double(c[sms / 2]) / iters;
}
template <int kMode>
double overlap_cycles(int sms) {
  return median_clocks(overlap_kernel<kMode>, 128, sms, 512);
}

// Clock cycles per wgmma (16 per group).
template <int kShape, int kAccs, int kWait>
double wgmma_cycles(int warpgroups, int sms) {
  return median_clocks(wgmma_rate_kernel<kShape, kAccs, kWait>, 128 * warpgroups, sms, 512) / 16;
}

// Microseconds per 16 tokens of `kernel` (chunks of C tokens) on one CTA per SM.
using ChainKernel = void (*)(int, float*, uint32_t*, int);
template <int C>
float time_kernel(ChainKernel kernel, int warpgroups, int sms, int tokens, int desync = 0) {
  const int threads = 128 * warpgroups, chunks = tokens / C;
  fastkda_gpu_test::DeviceBuf state(size_t(sms) * threads * 64 * 4);
  fastkda_gpu_test::DeviceBuf o(size_t(sms) * threads * (C / 4) * 4);
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
            cudaSuccess);
  auto launch = [&] {
    kernel<<<sms, threads, kSmemBytes>>>(chunks, static_cast<float*>(state.get()),
                                         static_cast<uint32_t*>(o.get()), desync);
  };
  for (int i = 0; i < 2; ++i) launch();
  const float ms = fastkda_gpu_test::median_event_ms(launch, 9);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return ms * 1000.0f / float(tokens / 16);  // us per 16 tokens
}
template <int C>
float time_chain(int warpgroups, int sms, int tokens, int desync = 0) {
  return time_kernel<C>(scan_chain_kernel<C>, warpgroups, sms, tokens, desync);
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
  for (int wg = 1; wg <= 2; ++wg)
    std::printf("SCANCHAIN kVs=%d C16 us_per_16_tokens shipped_order %.3f lookahead %.3f\n",
                64 * wg, time_kernel<16>(chain16_kernel<false>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<true>, wg, sms, kTokens));
  for (int wg = 1; wg <= 2; ++wg)
    std::printf("SCANCHAIN kVs=%d C16 us_per_16_tokens phases P/O %.3f V_new+A_qk %.3f state %.3f "
                "P/O+state %.3f\n",
                64 * wg, time_kernel<16>(chain16_kernel<false, 1>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 2>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 4>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 5>, wg, sms, kTokens));
  for (int wg = 1; wg <= 2; ++wg)
    std::printf("SCANCHAIN kVs=%d C16 us_per_16_tokens state_only rs3 %.3f ss3 %.3f rs1 %.3f "
                "all_with_ss_state %.3f\n",
                64 * wg, time_kernel<16>(chain16_kernel<false, 4>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 4 | 8>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 4 | 16>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 7 | 8>, wg, sms, kTokens));
  for (int wg = 1; wg <= 2; ++wg)
    std::printf("SCANCHAIN kVs=%d C16 us_per_16_tokens P/O_one_group: P/O %.3f all %.3f\n", 64 * wg,
                time_kernel<16>(chain16_kernel<false, 1 | 32>, wg, sms, kTokens),
                time_kernel<16>(chain16_kernel<false, 7 | 32>, wg, sms, kTokens));
  std::printf("SCANCHAIN kVs=128 C16 us_per_16_tokens ping_pong %.3f (P/O one group %.3f)\n",
              time_kernel<16>(chain16_kernel<false, 7 | 64>, 2, sms, kTokens),
              time_kernel<16>(chain16_kernel<false, 7 | 32 | 64>, 2, sms, kTokens));
}

// Session 24: one warpgroup, one or two chains (64 / 128 value rows), against the shipped order
// with one / two warpgroups (chain16_kernel<false>). Measured (H200, us per 16 tokens): shipped
// 0.660-0.663 / 1.064-1.067, one chain 0.633-0.638, two chains 1.084-1.089, one chain with 2 / 4
// P^T / O^T accumulators 0.635-0.645 / 0.647-0.651, lookahead 0.730-0.734, lookahead interleaved
// by hand 0.717-0.721.
TEST(ScanChainBench, DISABLED_Interleaved) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  constexpr int kTokens = 8192;
  for (int rep = 0; rep < 2; ++rep)
    std::printf("SCANCHAIN interleaved us_per_16_tokens shipped_1wg(64) %.3f shipped_2wg(128) %.3f "
                "one_chain(64) %.3f two_chains(128) %.3f "
                "one_chain_split2 %.3f split4 %.3f lookahead %.3f lookahead_interleaved %.3f\n",
                time_kernel<16>(chain16_kernel<false>, 1, sms, kTokens),
                time_kernel<16>(chain16_kernel<false>, 2, sms, kTokens),
                time_kernel<16>(interleaved_kernel<1>, 1, sms, kTokens),
                time_kernel<16>(interleaved_kernel<2>, 1, sms, kTokens),
                time_kernel<16>(interleaved_kernel<1, 2>, 1, sms, kTokens),
                time_kernel<16>(interleaved_kernel<1, 4>, 1, sms, kTokens),
                time_kernel<16>(lookahead_kernel<0>, 1, sms, kTokens),
                time_kernel<16>(lookahead_kernel<1>, 1, sms, kTokens));
  for (int rep = 0; rep < 2; ++rep)
    std::printf("SCANCHAIN kernel-like us_per_16_tokens 1wg(64): C16 %.3f C32 %.3f  "
                "2wg(128): C16 %.3f C32 %.3f\n",
                time_kernel<16>(interleaved_kernel<1>, 1, sms, kTokens),
                time_kernel<32>(chain32_kernel<>, 1, sms, kTokens),
                time_kernel<16>(interleaved_kernel<1>, 2, sms, kTokens),
                time_kernel<32>(chain32_kernel<>, 2, sms, kTokens));
  std::printf("SCANCHAIN with two synthetic prepare groups, us_per_16_tokens C16 / C32 at 0 / 64 / "
              "128 / 256 / 560 FFMA per thread and 16 tokens: %.3f / %.3f, %.3f / %.3f, "
              "%.3f / %.3f, %.3f / %.3f, %.3f / %.3f\n",
              time_kernel<16>(interleaved_kernel<1, 1, 0>, 3, sms, kTokens),
              time_kernel<32>(chain32_kernel<0>, 3, sms, kTokens),
              time_kernel<16>(interleaved_kernel<1, 1, 64>, 3, sms, kTokens),
              time_kernel<32>(chain32_kernel<64>, 3, sms, kTokens),
              time_kernel<16>(interleaved_kernel<1, 1, 128>, 3, sms, kTokens),
              time_kernel<32>(chain32_kernel<128>, 3, sms, kTokens),
              time_kernel<16>(interleaved_kernel<1, 1, 256>, 3, sms, kTokens),
              time_kernel<32>(chain32_kernel<256>, 3, sms, kTokens),
              time_kernel<16>(interleaved_kernel<1, 1, 560>, 3, sms, kTokens),
              time_kernel<32>(chain32_kernel<560>, 3, sms, kTokens));
}

// Session 27: split T's pass-1 chunk with 2 or 4 scan warpgroups (transition_chain_kernel), us per
// 16 tokens; a CTA of 4 warpgroups does the work of two of 2. Measured (H200, two runs): shipped
// chunk 2 warpgroups 0.964-0.971 alone, 0.925-0.930 / 1.044-1.053 / 1.616-1.623 beside a prepare
// group of 0 / 280 / 560 FFMA; 4 warpgroups (128 registers, ptxas serialises) 1.818-1.837. Lean
// chunk, batch 2 / 4: 2 warpgroups 0.915-0.929 / 0.943-0.947, 4 warpgroups (not serialised)
// 1.614-1.622 / 1.656-1.662, 4 warpgroups beside a prepare group in 640 threads (56 / 104
// registers: serialised, spills) 1.84-2.35. So 256 rows in one CTA cost ~0.88x two CTAs of 128
// rows before any prepare, not the ~0.5x that the tensor pipe's rate would allow. Session 28, with
// the synthetic prepare shared with WyChunks (prep_synthetic; another machine): shipped chunk
// prep0 / 280 / 560 0.973 / 1.074 / 1.64, lean 4wg+prep 1.79-2.32, the rest within 1 %.
TEST(ScanChainBench, DISABLED_TransitionRows) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  constexpr int kTokens = 8192;
  for (int rep = 0; rep < 2; ++rep) {
    std::printf("TRANSCHAIN us_per_16_tokens shipped chunk: no_prep 2wg %.3f 4wg(512) %.3f | "
                "prep0 2wg %.3f | prep560 2wg %.3f | prep280 2wg %.3f\n",
                time_kernel<16>(transition_chain_kernel<256, -1>, 2, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<512, -1>, 4, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<384, 0>, 3, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<384, 560>, 3, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<384, 280>, 3, sms, kTokens));
    std::printf("TRANSCHAIN us_per_16_tokens lean chunk batch 2/4: no_prep 2wg %.3f/%.3f "
                "4wg(512) %.3f/%.3f | 4wg+prep(640, prep 56 / scan 104 registers) prep0 %.3f/%.3f "
                "prep280 %.3f/%.3f prep560 %.3f/%.3f\n",
                time_kernel<16>(transition_chain_kernel<256, -1, 2>, 2, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<256, -1, 4>, 2, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<512, -1, 2>, 4, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<512, -1, 4>, 4, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<640, 0, 2, 56, 104>, 5, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<640, 0, 4, 56, 104>, 5, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<640, 280, 2, 56, 104>, 5, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<640, 280, 4, 56, 104>, 5, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<640, 560, 2, 56, 104>, 5, sms, kTokens),
                time_kernel<16>(transition_chain_kernel<640, 560, 4, 56, 104>, 5, sms, kTokens));
  }
}

// Session 30: 256 rows (a segment's value and transition slices) per CTA as two m-blocks per scan
// warpgroup (pair_blocks_kernel), us per 16 tokens, against today's 128-row CTA (the shipped
// chunk in wy_chain_kernel's harness) beside the same synthetic prepare: per chunk and group
// kF FFMA per thread (~430 is the kernel's pass-1 prepare, session 28's calibration). The pair
// CTA runs one prepare per chunk for 256 rows: compare it with twice the 128-row time. Measured
// (H200, session 30, bench/results/2026-11-30_s30/pair_blocks.txt, with batches of 4 / 2 then):
// 128 rows 0.938 / 1.198; 256 rows without a prepare 1.62 / 1.53, with one group of 430 FFMA
// 1.83-1.86 (in the kernel, with the real prepare: ~2.05-2.08).
TEST(ScanChainBench, DISABLED_PairBlocks) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  constexpr int kTokens = 8192;
  for (int rep = 0; rep < 2; ++rep) {
    std::printf("PAIRBLOCKS us_per_16_tokens 128 rows (shipped, 2 groups) prep 0/430: %.3f / %.3f"
                " | 256 rows: no_prep %.3f | 1 group (88 / 208 regs, as Pass::kPairs) prep 0 / 430:"
                " %.3f / %.3f | 1 group (72 / 216) prep 0 / 430: %.3f / %.3f\n",
                time_kernel<16>(wy_chain_kernel<16, false, 8, 0, 0, true>, 4, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8, 430, 0, true>, 4, sms, kTokens),
                time_kernel<16>(pair_blocks_kernel<256, -1, 0, 0, 0>, 2, sms, kTokens),
                time_kernel<16>(pair_blocks_kernel<384, 0, 1, 88, 208>, 3, sms, kTokens),
                time_kernel<16>(pair_blocks_kernel<384, 430, 1, 88, 208>, 3, sms, kTokens),
                time_kernel<16>(pair_blocks_kernel<384, 0, 1, 72, 216>, 3, sms, kTokens),
                time_kernel<16>(pair_blocks_kernel<384, 430, 1, 72, 216>, 3, sms, kTokens));
  }
}

// Session 28: the WY-form chunk of split T's first pass (wy_chain_kernel), us per 16 tokens, two
// scan warpgroups (128 rows: a value or transition CTA of today's pass 1), alone and beside two
// synthetic prepare groups whose load per 16 tokens is kF FFMA per thread (calibrated on the
// shipped chunk, which takes ~1.2 us per chunk in the kernel's pass 1) and kM mma.sync per warp
// and C tokens (the WY prepare's products: per 64 tokens ~1.4 M MACs for transition rows, ~2.2 M
// for value rows, i.e. ~170 / ~270 m16n8k16 per prepare warp of the chunk's group).
// Measured (H200, two runs, bench/results/2026-11-30_s28): alone, shipped 0.926; WY transition
// C = 16 / 32 / 64 0.833 / 0.58 / 0.51-0.52, value 0.875 / 0.63 / 0.551 (one warpgroup: C = 16
// 0.51, C = 64 0.30). Beside the prepare groups at 0 / 200 / 400 / 600 / 800 FFMA: shipped 0.93 /
// 1.03 / 1.165 / 1.40 / 1.65 (the kernel's 1.2 us: ~430); WY C = 64 transition without products
// 0.53 / 0.61 / 0.84 / 1.04 / 1.23, with its 170 mma.sync 0.74 / 0.99 / 1.19 / 1.37 / 1.56; value
// C = 64 with 270 (200-800 FFMA) 1.13-1.82. With the products in its own prepare the WY chunk is
// no faster than the shipped one; without them (W made elsewhere) the prepare keeps ~83 % of its
// instructions (~355 FFMA here: ~0.8 us). Half of each prepare (215 FFMA, the two CTAs of a segment
// sharing it; call 4): WY C = 64 transition 0.878-0.881, value 0.975-0.978, C = 32 1.00 / 1.04,
// shipped 1.033-1.036 (before the cost of coupling the two CTAs, 4-8 % in session 22). Rerun
// after the bench's refactor on another machine (call 6): every value within -4 to +3 % of these.
template <int C, bool kValue, int kBatch, int kF, int kM>
float wy_time(int sms, int tokens) {
  return time_kernel<C>(wy_chain_kernel<C, kValue, kBatch, kF * C / 16, kM>, 4, sms, tokens);
}
TEST(ScanChainBench, DISABLED_WyChunks) {
  constexpr int kB64 = 4;  // batch 8 beside the prepare groups (144 registers): C7512
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  constexpr int kTokens = 8192;
  for (int rep = 0; rep < 2; ++rep) {
    std::printf("WYCHAIN alone 2wg us_per_16_tokens shipped %.3f | transition C16 %.3f C32 %.3f "
                "C64 %.3f C64b4 %.3f | value C16 %.3f C32 %.3f C64 %.3f | 1wg transition C16 "
                "%.3f C64 %.3f\n",
                time_kernel<16>(wy_chain_kernel<16, false, 8, -1, 0, true>, 2, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8>, 2, sms, kTokens),
                time_kernel<32>(wy_chain_kernel<32, false, 8>, 2, sms, kTokens),
                time_kernel<64>(wy_chain_kernel<64, false, 8>, 2, sms, kTokens),
                time_kernel<64>(wy_chain_kernel<64, false, 4>, 2, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, true, 8>, 2, sms, kTokens),
                time_kernel<32>(wy_chain_kernel<32, true, 8>, 2, sms, kTokens),
                time_kernel<64>(wy_chain_kernel<64, true, 8>, 2, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8>, 1, sms, kTokens),
                time_kernel<64>(wy_chain_kernel<64, false, 8>, 1, sms, kTokens));
    std::printf("WYCHAIN shipped 2wg beside 2 prep groups, FFMA per thread and 16 tokens "
                "0/200/400/600/800: %.3f %.3f %.3f %.3f %.3f\n",
                time_kernel<16>(wy_chain_kernel<16, false, 8, 0, 0, true>, 4, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8, 200, 0, true>, 4, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8, 400, 0, true>, 4, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8, 600, 0, true>, 4, sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8, 800, 0, true>, 4, sms, kTokens));
    std::printf("WYCHAIN transition C64 beside 2 prep groups, FFMA 0/200/400/600/800 per 16 "
                "tokens, mma 0: %.3f %.3f %.3f %.3f %.3f | mma 170: %.3f %.3f %.3f %.3f %.3f\n",
                wy_time<64, false, kB64, 0, 0>(sms, kTokens),
                wy_time<64, false, kB64, 200, 0>(sms, kTokens),
                wy_time<64, false, kB64, 400, 0>(sms, kTokens),
                wy_time<64, false, kB64, 600, 0>(sms, kTokens),
                wy_time<64, false, kB64, 800, 0>(sms, kTokens),
                wy_time<64, false, kB64, 0, 170>(sms, kTokens),
                wy_time<64, false, kB64, 200, 170>(sms, kTokens),
                wy_time<64, false, kB64, 400, 170>(sms, kTokens),
                wy_time<64, false, kB64, 600, 170>(sms, kTokens),
                wy_time<64, false, kB64, 800, 170>(sms, kTokens));
    std::printf("WYCHAIN value C64 beside 2 prep groups, mma 270, FFMA 200/400/600/800: %.3f %.3f "
                "%.3f %.3f | transition C32 mma 85, FFMA 200/400/600/800: %.3f %.3f %.3f %.3f\n",
                wy_time<64, true, kB64, 200, 270>(sms, kTokens),
                wy_time<64, true, kB64, 400, 270>(sms, kTokens),
                wy_time<64, true, kB64, 600, 270>(sms, kTokens),
                wy_time<64, true, kB64, 800, 270>(sms, kTokens),
                wy_time<32, false, 8, 200, 85>(sms, kTokens),
                wy_time<32, false, 8, 400, 85>(sms, kTokens),
                wy_time<32, false, 8, 600, 85>(sms, kTokens),
                wy_time<32, false, 8, 800, 85>(sms, kTokens));
    // Half of each prepare (a segment's two CTAs sharing it, every other chunk each): ~215 FFMA.
    std::printf("WYCHAIN half prepare (215 FFMA): transition C64 mma 85 %.3f, value C64 mma 135 "
                "%.3f, transition C32 mma 43 %.3f, value C32 mma 68 %.3f | shipped %.3f\n",
                wy_time<64, false, kB64, 215, 85>(sms, kTokens),
                wy_time<64, true, kB64, 215, 135>(sms, kTokens),
                wy_time<32, false, 8, 215, 43>(sms, kTokens),
                wy_time<32, true, 8, 215, 68>(sms, kTokens),
                time_kernel<16>(wy_chain_kernel<16, false, 8, 215, 0, true>, 4, sms, kTokens));
  }
}

// Session 24: clock cycles per wgmma instruction of the scan's shapes (see wgmma_rate_kernel).
// Measured (H200): one warpgroup, one group kept in flight: m64n16k8 tf32 13.0, m64n32k8 16.0,
// m64n64k8 32.0, m64n128k16 bf16 64.0, m64n32k16 bf16 16.0 (waiting for every group: +0.6 to +4);
// four rotating accumulators the same; two warpgroups twice each. OVERLAP (clocks per group of 16
// m64n32k8): alone 321, then 8 dependent mma.sync 565 (8 alone 192), 8 independent 389, 64
// dependent FFMA 514.
TEST(ScanChainBench, DISABLED_WgmmaRates) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  for (int wg = 1; wg <= 2; ++wg) {
    std::printf("WGMMARATE wg=%d dep_wait0: n16k8tf32 %.1f n32k8tf32 %.1f n64k8tf32 %.1f "
                "n128k16bf16 %.1f n32k16bf16 %.1f\n",
                wg, wgmma_cycles<0, 1, 0>(wg, sms), wgmma_cycles<1, 1, 0>(wg, sms),
                wgmma_cycles<2, 1, 0>(wg, sms), wgmma_cycles<3, 1, 0>(wg, sms),
                wgmma_cycles<4, 1, 0>(wg, sms));
    std::printf("WGMMARATE wg=%d dep_wait1: n16k8tf32 %.1f n32k8tf32 %.1f n64k8tf32 %.1f "
                "n128k16bf16 %.1f n32k16bf16 %.1f\n",
                wg, wgmma_cycles<0, 1, 1>(wg, sms), wgmma_cycles<1, 1, 1>(wg, sms),
                wgmma_cycles<2, 1, 1>(wg, sms), wgmma_cycles<3, 1, 1>(wg, sms),
                wgmma_cycles<4, 1, 1>(wg, sms));
    std::printf("WGMMARATE wg=%d 4accs_wait1: n16k8tf32 %.1f n32k8tf32 %.1f n64k8tf32 %.1f "
                "n32k16bf16 %.1f\n",
                wg, wgmma_cycles<0, 4, 1>(wg, sms), wgmma_cycles<1, 4, 1>(wg, sms),
                wgmma_cycles<2, 4, 1>(wg, sms), wgmma_cycles<4, 4, 1>(wg, sms));
  }
  std::printf("OVERLAP clocks_per_iter wgmma16 %.0f +8dep_mma %.0f +8indep_mma %.0f "
              "+64dep_ffma %.0f 8dep_mma_alone %.0f\n",
              overlap_cycles<0>(sms), overlap_cycles<1>(sms), overlap_cycles<2>(sms),
              overlap_cycles<3>(sms), overlap_cycles<4>(sms));
}

}  // namespace
