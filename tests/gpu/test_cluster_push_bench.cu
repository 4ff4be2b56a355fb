// Cluster push microbenchmark (session 25): could one SM prepare the scan stages of another SM's
// scan and push them through distributed shared memory (DSMEM) as fast as the chain consumes them?
// Session 25's 32-token scan probe (bench/results/2026-11-30_s25/pair_probe.patch,
// docs/prefill_history.md "Session 25") ran the chain at ~1.2 us per 32-token step once the
// prepare's math was taken off the SM, and at ~2.5 us with it; a producer CTA on a second SM would
// have to deliver one ~60 KiB stage per ~1.1 us (~55 GB/s per SM pair, ~3.5 TB/s over 64 pairs).
//
// Clusters of two CTAs: rank 0 (producer) pushes kStageBytes per step from its shared memory into
// one of the consumer's kBufs buffers with cp.async.bulk shared::cluster copies completing on the
// consumer's Full mbarrier (or, kPieces = 0, with st.shared::cluster stores by all 128 producer
// threads and a remote arrive); rank 1 (consumer) waits for Full, reads every 16-byte word of the
// stage once over its 128 threads, spins `work` clock cycles (the chain's time per step), and
// releases the buffer with a remote arrive on the producer's Empty mbarrier. Prints microseconds
// per step for 1 and 64 pairs with and without consumer work.
// Measured (session 25, BENCHMARKS.md): ~41 GB/s per SM pair (1.46-1.56 us per 60 KiB stage) for
// every variant and pair count: slower than the 32-token chain it would feed.
//   fastkda_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='ClusterPushBench.*'
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "gpu_buffers.h"

namespace {

using namespace fastkda::device;

constexpr int kStageBytes = 60 * 1024;  // one 32-token scan stage at kVs = 64 (the probe's)
constexpr int kThreads = 128;
// kBufs stage buffers of the consumer, then the mbarriers.
template <int kBufs>
constexpr int smem_bytes() {
  return kBufs * kStageBytes + 128;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The same shared-memory offset in CTA `rank` of the cluster (shared::cluster address).
__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
// `bytes` from this CTA's shared memory to a shared::cluster address, completing on an mbarrier
// there.
__device__ __forceinline__ void push_bulk(uint32_t dst, uint32_t src, uint32_t bytes,
                                          uint32_t mbar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, "
      "[%3];\n" ::"r"(dst),
      "r"(src), "r"(bytes), "r"(mbar)
      : "memory");
}
__device__ __forceinline__ void store_remote(uint32_t dst, uint4 v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void remote_arrive(uint32_t mbar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(mbar)
               : "memory");
}
__device__ __forceinline__ void wait_cluster(uint32_t mbar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
        "%2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(mbar), "r"(parity)
        : "memory");
  } while (!done);
}

template <int kPieces, int kBufs>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1)
    push_kernel(int steps, int work, float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBufs * kStageBytes);
  uint64_t* empty = full + kBufs;
  const uint32_t rank = cluster_rank();
  if (threadIdx.x == 0) {
    for (int b = 0; b < kBufs; ++b) {
      mbarrier_init(&full[b], 1);
      mbarrier_init(&empty[b], 1);
    }
    fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < kBufs * kStageBytes / 4; i += kThreads)
    reinterpret_cast<float*>(smem)[i] = float(i % 7);
  fence_proxy_async_shared();
  cluster_sync();
  constexpr uint32_t kPiece = kStageBytes / (kPieces > 0 ? kPieces : 1);
  static_assert(kPiece % 16 == 0, "bulk copies of 16-byte multiples");
  float acc = 0.0f;
  if (rank == 0 && kPieces == 0) {  // producer: every thread stores 16-byte words remotely
    for (int s = 0; s < steps; ++s) {
      const int b = s % kBufs;
      if (s >= kBufs) wait_cluster(smem_addr(&empty[b]), uint32_t(s / kBufs - 1) & 1u);
      const uint32_t dst = map_rank(smem_addr(smem + b * kStageBytes), 1);
      const uint4* src = reinterpret_cast<const uint4*>(smem);
      for (int i = threadIdx.x; i < kStageBytes / 16; i += kThreads)
        store_remote(dst + 16 * i, src[i]);
      bar_sync(1, kThreads);  // every thread's stores before thread 0's release
      if (threadIdx.x == 0) remote_arrive(map_rank(smem_addr(&full[b]), 1));
    }
  } else if (rank == 0) {  // producer: thread 0 issues the copies
    if (threadIdx.x == 0) {
      for (int s = 0; s < steps; ++s) {
        const int b = s % kBufs;
        if (s >= kBufs) wait_cluster(smem_addr(&empty[b]), uint32_t(s / kBufs - 1) & 1u);
        const uint32_t dst = map_rank(smem_addr(smem + b * kStageBytes), 1);
        const uint32_t mbar = map_rank(smem_addr(&full[b]), 1);
        for (int p = 0; p < kPieces; ++p)
          push_bulk(dst + p * kPiece, smem_addr(smem + p * kPiece), kPiece, mbar);
      }
    }
  } else {  // consumer
    for (int s = 0; s < steps; ++s) {
      const int b = s % kBufs;
      if (threadIdx.x == 0 && kPieces > 0) mbarrier_arrive_expect_tx(&full[b], kStageBytes);
      if (kPieces > 0)
        mbarrier_wait(&full[b], uint32_t(s / kBufs) & 1u);
      else  // the producer's stores, released at cluster scope
        wait_cluster(smem_addr(&full[b]), uint32_t(s / kBufs) & 1u);
      const float4* st = reinterpret_cast<const float4*>(smem + b * kStageBytes);
      for (int i = threadIdx.x; i < kStageBytes / 16; i += kThreads) {
        const float4 v = st[i];
        acc += v.x + v.y + v.z + v.w;
      }
      const long long t0 = clock64();
      while (clock64() - t0 < work) {
      }
      bar_sync(1, kThreads);  // every thread's reads done before the release
      if (threadIdx.x == 0 && s + kBufs < steps) remote_arrive(map_rank(smem_addr(&empty[b]), 0));
    }
  }
  cluster_sync();  // the producer's shared memory stays until the last copy landed
  sink[blockIdx.x * kThreads + threadIdx.x] = acc;
}

// Microseconds per step with `pairs` clusters (median of 7 launches).
template <int kPieces, int kBufs>
float us_per_step(int pairs, int work, int steps) {
  constexpr int kSmemBytes = smem_bytes<kBufs>();
  auto* kernel = push_kernel<kPieces, kBufs>;
  fastkda_gpu_test::DeviceBuf sink(size_t(2 * pairs) * kThreads * 4);
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
            cudaSuccess);
  auto launch = [&] {
    kernel<<<2 * pairs, kThreads, kSmemBytes>>>(steps, work, static_cast<float*>(sink.get()));
  };
  launch();
  const float ms = fastkda_gpu_test::median_event_ms(launch, 7);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return ms * 1000.0f / float(steps);
}

TEST(ClusterPushBench, DISABLED_StagePush) {
  constexpr int kSteps = 4096;
  std::printf("PUSH stage %d KiB; us per step (GB/s per pair)\n", kStageBytes / 1024);
  for (const int work : {0, 2000}) {
    for (const int pairs : {1, 64}) {
      const float u1 = us_per_step<1, 2>(pairs, work, kSteps);
      const float u4 = us_per_step<4, 2>(pairs, work, kSteps);
      const float u3 = us_per_step<4, 3>(pairs, work, kSteps);
      const float us = us_per_step<0, 2>(pairs, work, kSteps);
      std::printf(
          "PUSH work %4d clk pairs %3d: 2 buffers, 1 copy %.3f us (%.1f GB/s), 4 copies "
          "%.3f us (%.1f GB/s); 3 buffers, 4 copies %.3f us (%.1f GB/s); 2 buffers, "
          "st.shared::cluster %.3f us (%.1f GB/s)\n",
          work, pairs, u1, kStageBytes / u1 / 1e3, u4, kStageBytes / u4 / 1e3, u3,
          kStageBytes / u3 / 1e3, us, kStageBytes / us / 1e3);
    }
  }
}

}  // namespace
