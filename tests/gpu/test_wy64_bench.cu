// The consumer of a 64-token WY scan fed from memory (session 38; docs/prefill.md, "What would
// close the missed rows"): what the scan costs per 16 tokens when every operand of a 64-token
// chunk arrives made, by bulk copy, from another kernel (a producer on other SMs, not built).
// Per chunk of C = 64 tokens and scan warpgroup (64 value rows x 128 keys of S^T in f32
// registers):
//   P^T = S^T W^T, O^T = S^T qs^T     8 + 8 wgmma m64n64k16 f16 (A = f16(S^T) from registers)
//   V_new^T = U^T - P^T               U^T from the stage, in P^T's fragment order
//   S^T = S^T diag(d) + V_new^T ke    64 FMUL + 4 k16 steps x 3 wgmma m64n128k16 bf16 (split)
//   O^T += V_new^T A_qk^T             4 wgmma m64n64k16 f16
//   out <- bf16(O^T)                  stmatrix to a staging buffer, 16-byte stores by 3 warps
// The stage of one chunk as the producer would write it: [W; qs] f16 (32 KiB), ke hi / lo bf16
// (32 KiB), A_qk f16 (8 KiB), the decays (512 B): 74240 B per (chunk, head), then U^T (16 KiB)
// per value half; two stages. Warp 0's lane 0 brings a stage in two bulk copies on an mbarrier,
// the scan warpgroups release it on another. kWgs = 1: a CTA per (head, value half), 256 threads;
// kWgs = 2: a CTA per head, 384 threads (setmaxnreg 56 / 224). The values are constants that
// keep S^T bounded (wgmma's time does not depend on them); the math is the chunk's in shape only.
// No WarpScale upkeep (the shipped f16 scan's), no boundary states.
// Measured (session 38, H200, BENCHMARKS.md): 0.34-0.40 us per 16 tokens at one warpgroup per CTA
// (H32 T4096 / T16384 / T65536: 0.103 / 0.361 / 1.39 ms), 0.50-0.61 at two (0.155 / 0.531 /
// 2.04 ms); the chain alone (no O^T, no output) 0.24 / 0.35.
//   fastkda_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.*'
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "cuda/device/wgmma.cuh"
#include "gpu_buffers.h"

namespace {

using namespace fastkda::device;

// D(64 x 64) (+)= A(64 x 16, f16, registers) * B(16 x 64, f16, smem K-major).
__device__ __forceinline__ void wgmma_m64n64k16_f16_rs(float (&d)[32], const uint32_t (&a)[4],
                                                       SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %38, 0;\nmov.b64 desc, {%36, %37};\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* m) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(m)) : "memory");
}
constexpr int kChunk = 64;
constexpr uint32_t kPqBytes = 32768;  // [W; qs]: 8 k16 steps x 2 k cores x 16 n cores x 128 B
constexpr uint32_t kKeBytes = 32768;  // ke: 4 k16 steps x (hi, lo) x 2 k cores x 16 n cores
constexpr uint32_t kAqBytes = 8192;   // A_qk: 4 k16 steps x 2 k cores x 8 n cores
constexpr uint32_t kDecayBytes = 512;
constexpr uint32_t kKeOff = kPqBytes, kAqOff = kKeOff + kKeBytes, kDecayOff = kAqOff + kAqBytes;
constexpr uint32_t kImgBytes = kDecayOff + kDecayBytes;  // per (chunk, head): both halves read it
constexpr uint32_t kUBytes = 16384;                      // per (chunk, head, value half)

// The shared memory of a CTA with kWgs scan warpgroups (value rows 64 w .. 64 w + 63 each): two
// stages (the chunk image, then U^T per warpgroup), the output staging (rows of 64 kWgs bf16
// values, 16-byte pieces XOR-swizzled by row: stmatrix and the row reads both conflict-free; two
// buffers at kWgs = 1, one at 2), the mbarriers.
template <int kWgs>
struct Layout {
  static constexpr uint32_t kStage = kImgBytes + kWgs * kUBytes;
  static constexpr int kOutBufs = kWgs == 1 ? 2 : 1;
  static constexpr uint32_t kOutRow = 128 * kWgs, kOutBuf = kChunk * kOutRow;
  static constexpr uint32_t kOutOff = 2 * kStage, kBarOff = kOutOff + kOutBufs * kOutBuf;
  static constexpr uint32_t kSmem = kBarOff + 64;
  static_assert(kSmem <= 227 * 1024, "two stages, the output staging, the barriers");
};
__device__ __forceinline__ uint32_t out_piece(int row, int piece) {
  return uint32_t(piece ^ (row & 7)) * 16;
}

struct Bars {
  uint64_t full[2], empty[2], ofull[2], oempty[2];
};

// kOut: O^T products and their staging; kStore: the staged outputs stored to `out`; kHot: every
// chunk reads the head's first two chunk images (L2-resident) instead of its own (HBM). Grid:
// heads x 2 / kWgs CTAs of 128 + 128 kWgs threads (warp 0: loader, warps 1-3: storers).
template <int kWgs, bool kOut, bool kHot, bool kStore = kOut>
__global__ void __launch_bounds__(128 + 128 * kWgs, 1)
    wy64_consumer_kernel(int chunks, const unsigned char* img, const unsigned char* uimg,
                         uint16_t* out, float* state_out) {
  using L = Layout<kWgs>;
  constexpr int kNb = L::kOutBufs;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto& bars = *reinterpret_cast<Bars*>(smem + L::kBarOff);
  const int per_head = 2 / kWgs, heads = int(gridDim.x) / per_head;
  const int h = int(blockIdx.x) / per_head, hv0 = (int(blockIdx.x) % per_head) * kWgs;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      mbarrier_init(&bars.full[i], 1);
      mbarrier_init(&bars.empty[i], 128 * kWgs);
      mbarrier_init(&bars.ofull[i], 128 * kWgs);
      mbarrier_init(&bars.oempty[i], 1);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 128) {
    if constexpr (kWgs == 2) setmaxnreg_dec<56>();  // 384 x 168 registers: 128 x 56 + 256 x 224
    if (threadIdx.x < 32) {                         // loader: warp 0, lane 0
      if (lane == 0)
        for (int c = 0; c < chunks; ++c) {
          const int s = c & 1, src = kHot ? s : c;
          if (c >= 2) mbarrier_wait(&bars.empty[s], ((c >> 1) - 1) & 1);
          unsigned char* st = smem + s * L::kStage;
          mbarrier_arrive_expect_tx(&bars.full[s], L::kStage);
          bulk_load(st, img + (size_t(h) * chunks + src) * kImgBytes, kImgBytes, &bars.full[s]);
          // U^T of value halves hv0 .. hv0 + kWgs - 1: contiguous per (head, chunk).
          bulk_load(st + kImgBytes, uimg + ((size_t(h) * chunks + src) * 2 + hv0) * kUBytes,
                    kWgs * kUBytes, &bars.full[s]);
        }
      return;
    }
    // storers: warps 1-3, 16-byte pieces of the staged rows
    if (kOut)
      for (int cc = 0; cc < chunks; ++cc) {
        const int ob = cc % kNb;
        mbarrier_wait(&bars.ofull[ob], (cc / kNb) & 1);
        const unsigned char* os = smem + L::kOutOff + ob * L::kOutBuf;
        if (kStore)
          for (int i = int(threadIdx.x) - 32; i < kChunk * 8 * kWgs; i += 96) {
            const int r = i / (8 * kWgs), piece = i % (8 * kWgs);
            const uint4 x =
                *reinterpret_cast<const uint4*>(os + r * L::kOutRow + out_piece(r, piece));
            *reinterpret_cast<uint4*>(out + ((size_t(cc) * kChunk + r) * heads + h) * 128 +
                                      64 * hv0 + 8 * piece) = x;
          }
        bar_sync(1, 96);
        if (threadIdx.x == 32) mbar_arrive(&bars.oempty[ob]);
      }
    return;
  }
  if constexpr (kWgs == 2) setmaxnreg_inc<224>();
  const int tid = int(threadIdx.x) - 128, wg = tid / 128, warp = (tid / 32) % 4, t = lane & 3;
  const int wt = tid % 128;  // thread in its warpgroup
  float S[64], O[32];
#pragma unroll
  for (int i = 0; i < 64; ++i) S[i] = 0.01f * float((tid + i) % 7);
#pragma unroll
  for (int i = 0; i < 32; ++i) O[i] = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const int s = c & 1;
    const unsigned char* st = smem + s * L::kStage;
    mbarrier_wait(&bars.full[s], (c >> 1) & 1);
    // A = f16(S^T) for 8 k16 steps over the keys (accumulator tiles 2 kk, 2 kk + 1).
    uint32_t a[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) a[kk][r] = pack_f16x2(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
    const SmemDesc dw = smem_desc_noswizzle(st, 2048, 128);  // W: tokens 0-63, qs: + 1024 B
    float P[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) wgmma_m64n64k16_f16_rs(P, a[kk], dw + 256 * kk, kk > 0);
    wgmma_commit_group();
    if constexpr (kOut) {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) wgmma_m64n64k16_f16_rs(O, a[kk], dw + 64 + 256 * kk, kk > 0);
      wgmma_commit_group();
      wgmma_wait_group<1>();
    } else {
      wgmma_wait_group<0>();
    }
    wgmma_fence_operands(P);
    const float4* u = reinterpret_cast<const float4*>(st + kImgBytes + wg * kUBytes);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 x = u[i * 128 + wt];
      P[4 * i + 0] = x.x - P[4 * i + 0];
      P[4 * i + 1] = x.y - P[4 * i + 1];
      P[4 * i + 2] = x.z - P[4 * i + 2];
      P[4 * i + 3] = x.w - P[4 * i + 3];
    }
    const float* dec = reinterpret_cast<const float*>(st + kDecayOff);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(&dec[8 * j + 2 * t]);
      S[4 * j + 0] *= d.x;
      S[4 * j + 1] *= d.y;
      S[4 * j + 2] *= d.x;
      S[4 * j + 3] *= d.y;
    }
    uint32_t vh[4][4], vl[4][4], vf[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        split_bf16x2(P[8 * kk + 2 * r], P[8 * kk + 2 * r + 1], vh[kk][r], vl[kk][r]);
        if constexpr (kOut) vf[kk][r] = pack_f16x2(P[8 * kk + 2 * r], P[8 * kk + 2 * r + 1]);
      }
    const SmemDesc dk = smem_desc_noswizzle(st + kKeOff, 2048, 128);  // + 8 KiB per k16 step
    const SmemDesc dq = smem_desc_noswizzle(st + kAqOff, 1024, 128);  // + 2 KiB per k16 step
    wgmma_fence_operands(S);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_m64n128k16_bf16_rs(S, vl[kk], dk + 512 * kk, true);
      wgmma_m64n128k16_bf16_rs(S, vh[kk], dk + 512 * kk + 256, true);
      wgmma_m64n128k16_bf16_rs(S, vh[kk], dk + 512 * kk, true);
    }
    if constexpr (kOut) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_f16_rs(O, vf[kk], dq + 128 * kk, true);
    }
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operands(S);
    mbar_arrive(&bars.empty[s]);
    if constexpr (kOut) {
      wgmma_fence_operands(O);
      const int ob = c % kNb;
      if (c >= kNb) mbarrier_wait(&bars.oempty[ob], (c / kNb - 1) & 1);
      unsigned char* os = smem + L::kOutOff + ob * L::kOutBuf;
      // matrix m = lane / 8: token tile i + m / 2, value rows 8 (m % 2) of the warp's 16; lane
      // 8 m + j gives the address of its token row j (one 16-byte piece of 8 values).
      const int m = lane / 8, j = lane % 8, piece = 8 * wg + 2 * warp + (m % 2);
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        const int row = 8 * (i + m / 2) + j;
        stmatrix_x4_trans(
            os + row * L::kOutRow + out_piece(row, piece), pack_bf16x2(O[4 * i + 0], O[4 * i + 1]),
            pack_bf16x2(O[4 * i + 2], O[4 * i + 3]), pack_bf16x2(O[4 * i + 4], O[4 * i + 5]),
            pack_bf16x2(O[4 * i + 6], O[4 * i + 7]));
      }
      mbar_arrive(&bars.ofull[ob]);
    }
  }
  float* dst = state_out + (size_t(blockIdx.x) * 128 * kWgs + tid) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i];
}

// Stage images: f16 0.01 in [W; qs] and A_qk, bf16 0.01 in ke's hi and lo, decays 0.9, U 0.5.
__global__ void fill_images(uint32_t* img, size_t img_words, uint32_t* uimg, size_t u_words) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < img_words; i += stride) {
    const uint32_t off = uint32_t(i % (kImgBytes / 4)) * 4;
    img[i] = off >= kDecayOff ? __float_as_uint(0.9f)
             : off >= kAqOff  ? 0x211f211fu
             : off >= kKeOff  ? 0x3c243c24u
                              : 0x211f211fu;
  }
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < u_words; i += stride)
    uimg[i] = __float_as_uint(0.5f);
}

struct Timing {
  float us_per_16;  // per 16 tokens of one CTA's chain
  float ms;
  double stage_bytes;  // read by all CTAs
};

template <int kWgs, bool kOut, bool kHot, bool kStore = kOut>
Timing time_consumer(int heads, int tokens) {
  using L = Layout<kWgs>;
  const int chunks = tokens / kChunk;
  const size_t img_bytes = size_t(heads) * chunks * kImgBytes;
  const size_t u_bytes = size_t(heads) * 2 * chunks * kUBytes;
  fastkda_gpu_test::DeviceBuf img(img_bytes), uimg(u_bytes);
  fastkda_gpu_test::DeviceBuf out(size_t(tokens) * heads * 128 * 2);
  fastkda_gpu_test::DeviceBuf state(size_t(heads) * 2 * 128 * 64 * 4);
  EXPECT_TRUE(img.get() && uimg.get() && out.get() && state.get());
  fill_images<<<1024, 256>>>(static_cast<uint32_t*>(img.get()), img_bytes / 4,
                             static_cast<uint32_t*>(uimg.get()), u_bytes / 4);
  auto kernel = wy64_consumer_kernel<kWgs, kOut, kHot, kStore>;
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem),
            cudaSuccess);
  auto launch = [&] {
    kernel<<<2 * heads / kWgs, 128 + 128 * kWgs, L::kSmem>>>(
        chunks, static_cast<const unsigned char*>(img.get()),
        static_cast<const unsigned char*>(uimg.get()), static_cast<uint16_t*>(out.get()),
        static_cast<float*>(state.get()));
  };
  launch();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const float ms = fastkda_gpu_test::median_event_ms(launch, 9);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // Finite end state: the stages were read (0.01 products keep S^T bounded).
  std::vector<float> s(size_t(heads) * 2 * 128 * 64);
  cudaMemcpy(s.data(), state.get(), s.size() * 4, cudaMemcpyDeviceToHost);
  for (float x : s) EXPECT_TRUE(std::isfinite(x) && x != 0.0f) << x;
  return {ms * 1000.0f / float(tokens / 16), ms, double(2 * heads / kWgs) * chunks * L::kStage};
}

TEST(Wy64Bench, DISABLED_Consumer) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no GPU";
  struct Row {
    const char* name;
    int heads, tokens;
    Timing (*fn)(int, int);
  };
  const Row rows[] = {
      {"H32 T4096 out, HBM", 32, 4096, time_consumer<1, true, false>},
      {"H32 T16384 out, HBM", 32, 16384, time_consumer<1, true, false>},
      {"H32 T65536 out, HBM", 32, 65536, time_consumer<1, true, false>},
      {"H32 T65536 out, L2", 32, 65536, time_consumer<1, true, true>},
      {"H32 T65536 O, no store, L2", 32, 65536, time_consumer<1, true, true, false>},
      {"H32 T65536 chain, HBM", 32, 65536, time_consumer<1, false, false>},
      {"H32 T65536 chain, L2", 32, 65536, time_consumer<1, false, true>},
      {"H64 T8192 out, HBM", 64, 8192, time_consumer<1, true, false>},
      {"H8 T65536 out, HBM", 8, 65536, time_consumer<1, true, false>},
      {"vs1 H32 T4096 out, HBM", 32, 4096, time_consumer<2, true, false>},
      {"vs1 H32 T16384 out, HBM", 32, 16384, time_consumer<2, true, false>},
      {"vs1 H32 T65536 out, HBM", 32, 65536, time_consumer<2, true, false>},
      {"vs1 H32 T65536 out, L2", 32, 65536, time_consumer<2, true, true>},
      {"vs1 H32 T65536 chain, L2", 32, 65536, time_consumer<2, false, true>},
      {"vs1 H96 T8192 out, HBM", 96, 8192, time_consumer<2, true, false>},
  };
  std::printf("%-28s %8s %10s %10s\n", "case (vs1: 1 CTA per head)", "ms", "us/16 tok",
              "stage GB/s");
  for (const Row& r : rows) {
    const Timing tm = r.fn(r.heads, r.tokens);
    std::printf("%-28s %8.4f %10.4f %10.0f\n", r.name, tm.ms, tm.us_per_16,
                tm.stage_bytes / (tm.ms * 1e-3) / 1e9);
    std::fflush(stdout);
  }
}

}  // namespace
