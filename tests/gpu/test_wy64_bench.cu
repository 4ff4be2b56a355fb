// The consumer of a 64-token WY scan fed from memory (session 38; docs/prefill.md, "What would
// close the missed rows"): what the scan costs per 16 tokens when every operand of a 64-token
// chunk arrives made, by bulk copy, from another kernel (a producer on other SMs: below).
// Per chunk of C = 64 tokens and scan warpgroup (64 value rows x 128 keys of S^T in f32
// registers):
//   V_new^T = v^T Tb^T + S^T (-W)^T   4 k16 steps x 2 wgmma m64n64k16 bf16 (v^T by ldmatrix.trans,
//                                     Tb split) + 8 m64n64k16 f16 (A = f16(S^T) from registers)
//   O^T = S^T qs^T                    8 wgmma m64n64k16 f16
//   S^T = S^T diag(d) + V_new^T ke    64 FMUL + 4 k16 steps x 3 wgmma m64n128k16 bf16 (split)
//   O^T += V_new^T A_qk^T             4 wgmma m64n64k16 f16
//   out <- bf16(O^T)                  stmatrix to a staging buffer, 16-byte stores by 3 warps
// The stage of one chunk: v of the CTA's value halves (TMA from the input, 64 tokens x 64 values
// each, 128-byte swizzle), Tb hi / lo bf16 (16 KiB), then the producer's image: [-W; qs] f16
// (32 KiB), ke hi / lo bf16 (32 KiB), A_qk f16 (8 KiB), the decays (512 B); two stages, each in
// two parts (v, Tb, [-W; qs] | the rest) with their own mbarriers: the first part is loaded again
// as soon as the products with S^T are done (session 41). Warp 0's lane 0 brings the stages in,
// the scan warpgroups release them. kWgs = 1: a CTA per (head, value half), 256 threads; kWgs = 2:
// a CTA per head, 384 threads (setmaxnreg 56 / 224). No WarpScale upkeep (the shipped f16
// scan's), no boundary states.
// Measured (H200, BENCHMARKS.md): session 38, U^T made by the producer: 0.34-0.40 us per 16 tokens
// at one warpgroup per CTA (H32 T4096 / T16384 / T65536: 0.103 / 0.361 / 1.39 ms), 0.50-0.61 at
// two (0.155 / 0.531 / 2.04 ms); session 41, U^T here: two warpgroups 0.165 / 0.572 / 2.20 ms.
// Below it, the producer of those images (namespace prod: persistent CTAs of 256 threads, two per
// SM, a (chunk, head) item at a time; bounded gate, fixed length), checked field by field against
// a host fp64 evaluation (ProducerFields) and through the consumer against the fp64 oracle
// (ProducerConsumerMatchOracle: out 1.70e-3), and timed alone, after and beside the consumer with
// ready flags (Producer, session 41: 7.7-8.7 SM-us per chunk and head; the two-warpgroup consumer
// launched behind it by PDL H32 0.202 / 0.660-0.661 / 2.477-2.496 ms, BENCHMARKS.md "Session 41").
//   fastkda_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='Wy64Bench.*'
// (WY64_QUICK=1: Producer's H32 rows only: the producer alone, the scan alone, the two together,
// with the scan's clock, waits and timeline from its probes.)
#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's signature (found at run time)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>
#include <vector>

#include "cuda/device/ptx.cuh"
#include "cuda/device/wgmma.cuh"
#include "gpu_buffers.h"
#include "gpu_test_util.h"

namespace {

using namespace fastkda::device;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
constexpr int kChunk = 64;
constexpr uint32_t kPqBytes = 32768;  // [-W; qs]: 8 k16 steps x 2 k cores x 16 n cores x 128 B
constexpr uint32_t kKeBytes = 32768;  // ke: 4 k16 steps x (hi, lo) x 2 k cores x 16 n cores
constexpr uint32_t kAqBytes = 8192;   // A_qk: 4 k16 steps x 2 k cores x 8 n cores
constexpr uint32_t kDecayBytes = 512;
constexpr uint32_t kKeOff = kPqBytes, kAqOff = kKeOff + kKeBytes, kDecayOff = kAqOff + kAqBytes;
constexpr uint32_t kImgBytes = kDecayOff + kDecayBytes;  // per (chunk, head): both halves read it
constexpr uint32_t kTbBytes = 16384;  // Tb per (chunk, head): hi, then lo (8 KiB each)
constexpr uint32_t kVBytes = 8192;    // v of a value half: 64 tokens x 128 B, 128-byte swizzle

// The shared memory of a CTA with kWgs scan warpgroups (value rows 64 w .. 64 w + 63 each): two
// stages (v of the CTA's value halves, Tb, the chunk image; 1024-byte aligned for the swizzled v
// boxes), the output staging (rows of 64 kWgs bf16 values, 16-byte pieces XOR-swizzled by row:
// stmatrix and the row reads both conflict-free; two buffers at kWgs = 1, one at 2), the
// mbarriers.
template <int kWgs>
struct Layout {
  static constexpr uint32_t kTbOff = kWgs * kVBytes, kImgOff = kTbOff + kTbBytes;
  static constexpr uint32_t kLoad = kImgOff + kImgBytes;  // bytes per stage and chunk
  static constexpr uint32_t kStage = (kLoad + 1023) / 1024 * 1024;
  static constexpr int kOutBufs = kWgs == 1 ? 2 : 1;
  static constexpr uint32_t kOutRow = 128 * kWgs, kOutBuf = kChunk * kOutRow;
  static constexpr uint32_t kOutOff = 2 * kStage, kBarOff = kOutOff + kOutBufs * kOutBuf;
  static constexpr uint32_t kSmem = kBarOff + 128;
  static_assert(kSmem <= 227 * 1024, "two stages, the output staging, the barriers");
};
__device__ __forceinline__ uint32_t out_piece(int row, int piece) {
  return uint32_t(piece ^ (row & 7)) * 16;
}

// A stage in two parts, each with its own full / empty barriers: part 0 (v, Tb, [-W; qs]) is read
// by the products with S^T and free once they are done, part 1 (ke, A_qk, the decays) at the
// chunk's end.
struct Bars {
  uint64_t full[2][2], empty[2][2], ofull[2], oempty[2];  // [stage][part]
};

// kOut: O^T products and their staging; kStore: the staged outputs stored to `out`; kHot: every
// chunk reads the head's first two chunk images and v boxes (L2-resident) instead of its own
// (HBM). Grid: heads x 2 / kWgs CTAs of 128 + 128 kWgs threads (warp 0: loader, warps 1-3:
// storers). tm_v: v as [tokens][heads x 128] bf16 in boxes of 64 tokens x 64 values, 128-byte
// swizzle.
__device__ __forceinline__ long long globaltimer() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Probes (kProbe, per CTA, 8 values): globaltimer and clock64 at the scan's start and end, the
// cycles scan thread 0 waits for full stages, the cycles the loader waits for ready flags.
template <int kWgs, bool kOut, bool kHot, bool kStore = kOut, bool kProbe = false>
__global__ void __launch_bounds__(128 + 128 * kWgs, 1)
    wy64_consumer_kernel(int chunks, const unsigned char* img, const unsigned char* tbimg,
                         const __grid_constant__ CUtensorMap tm_v, uint16_t* out, float* state_out,
                         int zero_state, const uint32_t* ready, long long* probe) {
  using L = Layout<kWgs>;
  constexpr int kNb = L::kOutBufs;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto& bars = *reinterpret_cast<Bars*>(smem + L::kBarOff);
  const int per_head = 2 / kWgs, heads = int(gridDim.x) / per_head;
  const int h = int(blockIdx.x) / per_head, hv0 = (int(blockIdx.x) % per_head) * kWgs;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      for (int part = 0; part < 2; ++part) {
        mbarrier_init(&bars.full[i][part], 1);
        mbarrier_init(&bars.empty[i][part], 128 * kWgs);
      }
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
          const int s = c & 1, src = kHot ? s : c, par = ((c >> 1) - 1) & 1;
          if (c >= 2) mbarrier_wait(&bars.empty[s][0], par);
          unsigned char* st = smem + s * L::kStage;
          mbarrier_arrive_expect_tx(&bars.full[s][0], L::kImgOff + kPqBytes);
          // v (an input: from HBM) first, the image (just made: from L2) once it is ready.
#pragma unroll
          for (int w = 0; w < kWgs; ++w)
            tma_load_2d(st + w * kVBytes, &tm_v, 128 * h + 64 * (hv0 + w), kChunk * src,
                        &bars.full[s][0]);
          if (ready) {  // the producer's image of (h, c) complete (a producer running beside)
            long long t0 = 0;
            if constexpr (kProbe) t0 = clock64();
            while (ld_acquire(&ready[size_t(h) * chunks + c]) == 0) {
            }
            if constexpr (kProbe) probe[8 * blockIdx.x + 5] += clock64() - t0;
            fence_proxy_async_global();
          }
          const size_t item = size_t(h) * chunks + src;
          bulk_load(st + L::kTbOff, tbimg + item * kTbBytes, kTbBytes, &bars.full[s][0]);
          bulk_load(st + L::kImgOff, img + item * kImgBytes, kPqBytes, &bars.full[s][0]);
          if (c >= 2) mbarrier_wait(&bars.empty[s][1], par);
          mbarrier_arrive_expect_tx(&bars.full[s][1], kImgBytes - kPqBytes);
          bulk_load(st + L::kImgOff + kPqBytes, img + item * kImgBytes + kPqBytes,
                    kImgBytes - kPqBytes, &bars.full[s][1]);
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
        if (threadIdx.x == 32) mbarrier_arrive(&bars.oempty[ob]);
      }
    return;
  }
  if constexpr (kWgs == 2) setmaxnreg_inc<224>();
  const int tid = int(threadIdx.x) - 128, wg = tid / 128, warp = (tid / 32) % 4, t = lane & 3;
  float S[64], O[32];
#pragma unroll
  for (int i = 0; i < 64; ++i) S[i] = zero_state ? 0.0f : 0.01f * float((tid + i) % 7);
#pragma unroll
  for (int i = 0; i < 32; ++i) O[i] = 0.0f;
  long long full_wait = 0;
  if (kProbe && tid == 0)
    probe[8 * blockIdx.x] = globaltimer(), probe[8 * blockIdx.x + 2] = clock64();
  // v^T's A fragments by ldmatrix.trans from the swizzled box: matrix mi = lane / 8 holds values
  // + 8 (mi % 2) of the warp's 16, tokens + 8 (mi / 2) of the k16 step; lane gives token row
  // lane % 8 of it (16-byte piece 2 warp + mi % 2 of the row, XOR the row's index mod 8).
  const uint32_t v_lane = uint32_t((8 * (lane / 16) + lane % 8) * 128 +
                                   16 * ((2 * warp + (lane / 8) % 2) ^ (lane % 8)));
  for (int c = 0; c < chunks; ++c) {
    const int s = c & 1;
    const unsigned char* st = smem + s * L::kStage;
    long long t0 = 0;
    if constexpr (kProbe) t0 = clock64();
    mbarrier_wait(&bars.full[s][0], (c >> 1) & 1);
    if constexpr (kProbe) full_wait += clock64() - t0;
    // A = f16(S^T) for 8 k16 steps over the keys (accumulator tiles 2 kk, 2 kk + 1).
    uint32_t a[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) a[kk][r] = pack_f16x2(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
    uint32_t av[4][4];
#pragma unroll
    for (int J = 0; J < 4; ++J) ldmatrix_x4_trans(st + wg * kVBytes + v_lane + 2048 * J, av[J]);
    const SmemDesc dt = smem_desc_noswizzle(st + L::kTbOff, 1024, 128);   // lo + 8 KiB
    const SmemDesc dw = smem_desc_noswizzle(st + L::kImgOff, 2048, 128);  // -W; qs: + 1024 B
    // V_new^T = U^T - P^T = v^T Tb^T + S^T (-W)^T: split Tb (v is exact in bf16), f16 S^T and W.
    float P[32];
    wgmma_fence();
#pragma unroll
    for (int J = 0; J < 4; ++J) {
      wgmma_m64n64k16_rs<true>(P, av[J], dt + 512 + 128 * J, J > 0);
      wgmma_m64n64k16_rs<true>(P, av[J], dt + 128 * J, true);
    }
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) wgmma_m64n64k16_rs<false>(P, a[kk], dw + 256 * kk, true);
    wgmma_commit_group();
    if constexpr (kOut) {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
        wgmma_m64n64k16_rs<false>(O, a[kk], dw + 64 + 256 * kk, kk > 0);
      wgmma_commit_group();
      wgmma_wait_group<1>();
    } else {
      wgmma_wait_group<0>();
    }
    wgmma_fence_operands(P);
    if constexpr (kProbe) t0 = clock64();
    mbarrier_wait(&bars.full[s][1], (c >> 1) & 1);
    if constexpr (kProbe) full_wait += clock64() - t0;
    const float* dec = reinterpret_cast<const float*>(st + L::kImgOff + kDecayOff);
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
    const SmemDesc dk = smem_desc_noswizzle(st + L::kImgOff + kKeOff, 2048, 128);  // 8 KiB / k16
    const SmemDesc dq = smem_desc_noswizzle(st + L::kImgOff + kAqOff, 1024, 128);  // 2 KiB / k16
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
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_rs<false>(O, vf[kk], dq + 128 * kk, true);
    }
    wgmma_commit_group();
    wgmma_wait_group<1>();  // the products with S^T (part 0's readers) are done
    mbarrier_arrive(&bars.empty[s][0]);
    wgmma_wait_group<0>();
    wgmma_fence_operands(S);
    mbarrier_arrive(&bars.empty[s][1]);
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
      mbarrier_arrive(&bars.ofull[ob]);
    }
  }
  if (kProbe && tid == 0) {
    probe[8 * blockIdx.x + 1] = globaltimer(), probe[8 * blockIdx.x + 3] = clock64();
    probe[8 * blockIdx.x + 4] = full_wait;
  }
  float* dst = state_out + (size_t(blockIdx.x) * 128 * kWgs + tid) * 64;
#pragma unroll
  for (int i = 0; i < 64; ++i) dst[i] = S[i];
}

// Stage images: f16 0.01 in [-W; qs] and A_qk, bf16 0.01 in ke's and Tb's hi and lo, decays 0.9.
__global__ void fill_images(uint32_t* img, size_t img_words, uint32_t* tbimg, size_t tb_words) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < img_words; i += stride) {
    const uint32_t off = uint32_t(i % (kImgBytes / 4)) * 4;
    img[i] = off >= kDecayOff ? __float_as_uint(0.9f)
             : off >= kAqOff  ? 0x211f211fu
             : off >= kKeOff  ? 0x3c243c24u
                              : 0x211f211fu;
  }
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < tb_words; i += stride)
    tbimg[i] = 0x3c243c24u;
}

// ---- The producer (session 38 probe): one 64-token chunk of one head per CTA ------------------
// Makes the consumer's stage image from q, k, v, g, beta (bf16; bounded gate with A_log and
// dt_bias, l2norm, sigmoid beta; T a multiple of 64, H = HV) by the CPU chunked path's algorithm
// (src/cpu/chunked.cpp), G in log2 and f32:
//   F_r = 2^(G_r - Ga_I), H_s = 2^(Gend_J - G_s) for rows r of 16-row block I, s of block J, with
//   Ga_I = G at the row before block I (0 for I = 0), Gend_J = G at block J's last row: both in
//   [2^-116, 1] for the bounded gate (>= -7.22 per token in log2).
//   A'[r][s] = sum_c (k^_r F_r)(k^_s H_s 2^(Ga_I - Gend_J)), A_qk likewise with q^_r F_r (s <= r):
//   for J < I the column factor is <= 1, for J = I it is 2^(Ga_I - Gend_I) <= 2^116; tf32 MMA.
//   N = diag(beta) A' (strictly lower), X = (I + N)^-1 by 16 x 16 blocks (f32), Tb = X diag(beta)
//   W = Tb kw (kw = k^ F 2^Ga): split bf16 wgmma (warpgroup 0), stored negated (f16); Tb itself
//   (split bf16) for the scan's U^T = v^T Tb^T; qs = scale q^ F 2^Ga (f16), ke = k^ H
//   2^(G_63 - Gend) (split bf16), decays 2^G_63.
// Shared memory 113408 B: two CTAs per SM.
namespace prod {

constexpr int kR = 64, kCols = 128, kThreads = 256;
// f32 [64][128] tiles, XOR-swizzled by row so that mma fragment loads (8 rows x 4 columns) and
// column-wise writes are conflict-free.
__device__ __forceinline__ int sw(int r, int c) { return r * kCols + (c ^ ((r & 7) << 2)); }

struct Smem {
  float kf[kR * kCols];  // k^ F: A' rows, kw / 2^Ga; then Tb and the next item's g rows
  float qf[kR * kCols];  // q^ F: A_qk rows; then kw (split bf16, wgmma B layout); next q rows
  float kh[kR * kCols];  // k^ H: A' / A_qk columns; then X below the diagonal, v; next k rows
  float nb[10][16][16];  // N by 16 x 16 blocks (I, J <= I) at I (I + 1) / 2 + J; then X
  // Rows 0-3: the blocks' gate totals (step 2); then the column factors of A''s pairs other than
  // (I, I - 1) (kPairs' third entry): 2^(Ga_I - Gend_J) per key.
  float cf[7][kCols];
  float pe[4][kCols];  // kw's factors 2^Ga_I / kCompHalf; first the norms' partial sums (8 x 32)
  float rq[kR], rk[kR], beta[kR];
  int next_item;  // taken from Args::counter
  int pending;    // the previous item's ready flag, released in this item's step 2
};
static_assert(sizeof(Smem) <= 115712, "two CTAs per SM");
// A' / A_qk take raw f32 bits as tf32 operands (truncation); the row norms of q and k carry
// sqrt(1 + 2 kTruncBias), so that every product of two operands is compensated for both
// truncations (the factors of kw, qs and ke take it out again).
constexpr float kCompHalf = 1.00035216f;  // sqrt(1 + 2 x 3.5223e-4)
constexpr float kUncomp = 1.0f / kCompHalf;

struct Args {
  const uint16_t *q, *k, *v, *g, *beta;  // [T][H][128] bf16 rows at the strides below, beta [T][H]
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride;  // elements per token
  const float *A_log, *dt_bias;                                 // [H], [H][128]
  float lower_bound_log2, scale;
  int H, chunks;
  unsigned char *img, *tbimg;
  long long* probe;          // optional: clock64 per CTA at each step's end (8 per CTA)
  unsigned long long* span;  // optional: globaltimer's min at CTA start, max at CTA end
  uint32_t* ready;           // optional: [H][chunks] flags set once the chunk's image is complete
  int hot_mode;              // timing probes (below)
  int stage;  // persistent CTAs: the next item's q, k, g rows staged in shared memory
  // Persistent CTAs, items taken in order from *counter (zeroed before the launch) when non-null:
  // the CTAs on SMs < early_sms take none past early_items, none at all when it is 0 (a scan
  // launched behind the producer then takes those SMs).
  uint32_t* counter;
  int early_sms, early_items;
};

__device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ int nb_index(int I, int J) { return I * (I + 1) / 2 + J; }
// Off-diagonal blocks (I > J) of X: (1,0) (2,0) (2,1) (3,0) (3,1) (3,2).
__host__ __device__ __forceinline__ int off_index(int I, int J) { return (I - 1) * I / 2 + J; }
// One step of a butterfly reduce-scatter of 32 values over a warp: lanes with bit kOff keep the
// upper kOff of the first 2 kOff values, the others the lower, each adding its partner's copy.
template <int kOff>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[32], int lane) {
  const bool upper = lane & kOff;
#pragma unroll
  for (int j = 0; j < kOff; ++j) {
    const float send = upper ? v[j] : v[j + kOff];
    const float keep = upper ? v[j + kOff] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
  }
}
// Step 3's (row block, column block, cf row) per warp, I < 0: none. The diagonal pairs on warps 0-3
// (warps 0 and 2 then invert two each; warps 1 and 3 take one more pair), the others one per warp.
// cf row: I for (I, I), 4 (2, 0), 5 (3, 1), 6 (3, 0); -1: (I, I - 1), whose factor is 1.
__constant__ int8_t kPairs[8][2][3] = {{{0, 0, 0}, {-1, 0, 0}},  {{1, 1, 1}, {3, 0, 6}},
                                       {{2, 2, 2}, {-1, 0, 0}},  {{3, 3, 3}, {2, 0, 4}},
                                       {{1, 0, -1}, {-1, 0, 0}}, {{3, 1, 5}, {-1, 0, 0}},
                                       {{2, 1, -1}, {-1, 0, 0}}, {{3, 2, -1}, {-1, 0, 0}}};

// -W (f16) at token r, keys key, key + 1 of the image; Tb's hi element (r, s) of the Tb image
// (lo 8 KiB on).
__host__ __device__ __forceinline__ uint32_t w_offset(int r, int key) {
  return (key / 16) * 4096 + ((key % 16) / 8) * 2048 + (r / 8) * 128 + (r % 8) * 16 + (key % 8) * 2;
}
__host__ __device__ __forceinline__ uint32_t tb_offset(int r, int s) {
  return (s / 8) * 1024 + (r / 8) * 128 + (r % 8) * 16 + (s % 8) * 2;
}

// The next item's raw q, k, g rows (tensor 0, 1, 2; 64 rows of 256 B each) staged in shared memory
// while this item's W runs, where nothing is read any more: k in kh's first 14 KiB (rows 56-63
// in nb's first 2 KiB), g in k^ F's upper half (Tb holds the lower), q in qf's first 16 KiB once
// W has read kw.
__device__ __forceinline__ unsigned char* staged_row(Smem& sm, int tensor, int r) {
  unsigned char* kf = reinterpret_cast<unsigned char*>(sm.kf);
  unsigned char* kh = reinterpret_cast<unsigned char*>(sm.kh);
  unsigned char* nb = reinterpret_cast<unsigned char*>(sm.nb);
  unsigned char* qf = reinterpret_cast<unsigned char*>(sm.qf);
  return tensor == 0   ? qf + 256 * r
         : tensor == 1 ? (r < 56 ? kh + 256 * r : nb + 256 * (r - 56))
                       : kf + 16384 + 256 * r;
}
// Rows r0, r0 + step, ... (n of them) of tensor `tensor` of the item at chunk nc, head nh, 16-byte
// piece ch of each, by cp.async.
__device__ __forceinline__ void stage_rows(const Args& a, Smem& sm, int nc, int nh, int tensor,
                                           int r0, int step, int n, int ch) {
  const int64_t stride = tensor == 0 ? a.q_stride : (tensor == 1 ? a.k_stride : a.g_stride);
  const uint16_t* src = (tensor == 0 ? a.q : (tensor == 1 ? a.k : a.g)) +
                        (int64_t(nc) * kR + r0) * stride + nh * kCols + 8 * ch;
#pragma unroll
  for (int i = 0; i < n; ++i, src += step * stride)
    cp_async_cg_16(staged_row(sm, tensor, r0 + i * step) + 16 * ch, src, 16);
}

__global__ void __launch_bounds__(kThreads, 2) producer_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane / 4, t = lane & 3;
  __builtin_assume(tid >= 0 && tid < kThreads);  // no sign fix-ups in the index arithmetic
  // Items (chunk, head) b, b + grid, ...: persistent CTAs (a grid of what the SMs hold at once: the
  // scan's CTAs wait for items), each staging its next item's q, k, g rows in shared memory during
  // W / U (Args::stage), or one item per CTA. Session 39, H32 T16384: one item per CTA 0.581 ms,
  // persistent 0.599 (0.593 with the next item's rows prefetched into L2 before step 3 instead),
  // staged 0.553.
  const int items = a.chunks * a.H;
  // Static items b, b + G, ... (G = grid), or taken from a.counter in order.
  uint32_t smid;
  asm("mov.u32 %0, %%smid;" : "=r"(smid));
  const bool early = a.counter && int(smid) < a.early_sms;
  auto take = [&]() {  // one thread
    const int it = int(atomicAdd(a.counter, 1u));
    return it < items ? it : -1;
  };
  if (a.counter) {
    if (tid == 0) sm.next_item = early && a.early_items == 0 ? -1 : take();
    __syncthreads();
  }
  griddep_launch_dependents();  // a scan launched behind it by PDL may start
  if (a.span && tid == 0) atomicMin(&a.span[0], (unsigned long long)globaltimer());
  const int grid = int(gridDim.x);
  int next = a.counter ? sm.next_item : (int(blockIdx.x) < items ? int(blockIdx.x) : -1);
#pragma unroll 1
  for (int round = 0, item = next; item >= 0; item = next, ++round) {
    __builtin_assume(item >= 0 && a.H > 0);
    const int c = item / a.H, h = item % a.H;  // chunk-major order
    // Timing probes: every item reads item 0's inputs (hot_mode & 1) / writes item 0's image (& 2).
    const bool hot_in = a.hot_mode & 1, hot_out = a.hot_mode & 2;
    const int64_t tok0 = hot_in ? 0 : int64_t(c) * kR;
    const int hin = hot_in ? 0 : h;
    const size_t out_item = hot_out ? 0 : size_t(h) * a.chunks + c;
    unsigned char* img = a.img + out_item * kImgBytes;
    unsigned char* tbimg = a.tbimg + out_item * kTbBytes;

    if (a.probe && tid == 0) a.probe[item * 8] = clock64();
    // 1. Thread (column pair cp, row block qb) loads its 16 rows of q, k, g (columns 2 cp,
    // 2 cp + 1) from shared memory, where the previous item staged them (stage_next), or else
    // this item stages them now (one load path: fewer live registers).
    const int cp = tid % 64, qb = tid / 64;
    if (!(a.stage && round > 0)) {
      stage_rows(a, sm, c, h, 1, tid / 16, 16, 4, tid % 16);
      stage_rows(a, sm, c, h, 2, tid / 16, 16, 4, tid % 16);
      stage_rows(a, sm, c, h, 0, tid / 16, 8, 8, tid % 16);
      cp_async_commit_group();
      cp_async_wait_group<0>();
      __syncthreads();
    }
    uint32_t k2s[16], q2s[16], g2s[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int row = 16 * qb + i;
      k2s[i] = *reinterpret_cast<const uint32_t*>(staged_row(sm, 1, row) + 4 * cp);
      q2s[i] = *reinterpret_cast<const uint32_t*>(staged_row(sm, 0, row) + 4 * cp);
      g2s[i] = *reinterpret_cast<const uint32_t*>(staged_row(sm, 2, row) + 4 * cp);
    }
    if (tid < kR) {
      const float b = bf(a.beta[(tok0 + tid) * a.beta_stride + hin]);
      sm.beta[tid] = rcp_approx(1.0f + ex2_approx(-b * 1.4426950408889634f));
    }
    // Row norms: the warp's sums of squares over its 64 columns for its 16 q and 16 k rows, by a
    // butterfly reduce-scatter (lane l ends with value l: q rows 0-15, k rows 0-15 of the block),
    // the two warps of a block added through pe's space.
    {
      float v[32];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float q0 = bf(q2s[i] & 0xffff), q1 = bf(q2s[i] >> 16);
        const float k0 = bf(k2s[i] & 0xffff), k1 = bf(k2s[i] >> 16);
        v[i] = q0 * q0 + q1 * q1;
        v[16 + i] = k0 * k0 + k1 * k1;
      }
      reduce_scatter_step<16>(v, lane);
      reduce_scatter_step<8>(v, lane);
      reduce_scatter_step<4>(v, lane);
      reduce_scatter_step<2>(v, lane);
      reduce_scatter_step<1>(v, lane);
      (&sm.pe[0][0])[warp * 32 + lane] = v[0];
    }
    // 2. The gate's cumulative sum G (log2) down each key column: thread (cp, qb) sums the 16 rows
    // of block qb from 0; the blocks' totals then give each block its start Ga.
    float G[16][2];
    {
      const float A = ex2_approx(a.A_log[h] * 1.4426950408889634f);
      const float cc = -A * 1.4426950408889634f;
      const float2 dtb = *reinterpret_cast<const float2*>(&a.dt_bias[h * kCols + 2 * cp]);
      const float bc0 = dtb.x * cc, bc1 = dtb.y * cc;
      float run0 = 0.0f, run1 = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        run0 = fmaf(rcp_approx(1.0f + ex2_approx(fmaf(bf(g2s[i] & 0xffff), cc, bc0))),
                    a.lower_bound_log2, run0);
        run1 = fmaf(rcp_approx(1.0f + ex2_approx(fmaf(bf(g2s[i] >> 16), cc, bc1))),
                    a.lower_bound_log2, run1);
        G[i][0] = run0, G[i][1] = run1;
      }
      *reinterpret_cast<float2*>(&sm.cf[qb][2 * cp]) = make_float2(run0, run1);  // block totals
    }
    __syncthreads();
    // The previous item's flag, released here (warp 7 has no row below): its image stores have
    // drained during steps 1-2, so the release's fence finds none in flight (released at the
    // item's end, its fence cost the producer 5-7 %).
    if (a.ready && round > 0 && tid == 7 * 32) red_release_add(&a.ready[sm.pending], 1u);
    if (tid < 2 * kR) {  // row tid % 64 of q (tid < 64) or k: its block's two warp partials
      const int r = tid % kR, idx = r % 16 + (tid < kR ? 0 : 16), w0 = 2 * (r / 16);
      const float ss = (&sm.pe[0][0])[w0 * 32 + idx] + (&sm.pe[0][0])[(w0 + 1) * 32 + idx];
      (tid < kR ? sm.rq : sm.rk)[r] =
          rsqrt_approx(ss + 1e-6f) * (tid < kR ? a.scale : 1.0f) * kCompHalf;
    }
    float ga0 = 0.0f, ga1 = 0.0f, gl0 = 0.0f, gl1 = 0.0f;  // Ga of this block; G_63
    float t12_0 = 0.0f, t12_1 = 0.0f;                      // the totals of blocks 1 and 2
#pragma unroll
    for (int I = 0; I < 4; ++I) {
      const float2 tot = *reinterpret_cast<const float2*>(&sm.cf[I][2 * cp]);
      if (I < qb) ga0 += tot.x, ga1 += tot.y;
      if (I == 1 || I == 2) t12_0 += tot.x, t12_1 += tot.y;
      gl0 += tot.x, gl1 += tot.y;
    }
    const float pa0 = ex2_approx(ga0), pa1 = ex2_approx(ga1);  // 2^Ga
    __syncthreads();
    if (a.probe && tid == 0) a.probe[item * 8 + 1] = clock64();
    {
      // The operands of A' / A_qk / W in shared memory, and straight to the image: qs (f16 pairs of
      // keys 2 cp, 2 cp + 1) = scale q^ F 2^Ga, ke (bf16 hi / lo, 8 tokens of a key per 16 bytes)
      // = k^ H 2^(G_63 - Gend). Both row norms carry kCompHalf: the factors take it out.
      // (Session 40: kw = k^ F 2^Ga made here too, stored in the item's U^T space and copied back
      // for W: +40 %; ke by 8-byte stores: +2-4 %.)
      const float ge0 = G[15][0], ge1 = G[15][1];          // Gend - Ga
      const float p0 = kUncomp * pa0, p1 = kUncomp * pa1;  // the scale is in rq
      const float e0 = kUncomp * ex2_approx(gl0 - ga0 - ge0);
      const float e1 = kUncomp * ex2_approx(gl1 - ga1 - ge1);
      unsigned char* qs_base = img + w_offset(64 + 16 * qb, 2 * cp);
      const uint32_t kb_off = qb * 8192 + (cp / 4) * 128 + (cp % 4) * 32;
      uint32_t kh0[4], kl0[4], kh1[4], kl1[4];  // ke of 8 tokens, keys 2 cp / 2 cp + 1
      float kp0 = 0.0f, kp1 = 0.0f;             // ke of the previous (even) row
      float4 rk4, rq4;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int r = 16 * qb + i;
        if (i % 4 == 0) {
          rk4 = *reinterpret_cast<const float4*>(&sm.rk[r]);
          rq4 = *reinterpret_cast<const float4*>(&sm.rq[r]);
        }
        const float rk = i % 4 == 0 ? rk4.x : (i % 4 == 1 ? rk4.y : (i % 4 == 2 ? rk4.z : rk4.w));
        const float rq = i % 4 == 0 ? rq4.x : (i % 4 == 1 ? rq4.y : (i % 4 == 2 ? rq4.z : rq4.w));
        const float F0 = ex2_approx(G[i][0]), F1 = ex2_approx(G[i][1]);
        const float H0 = ex2_approx(ge0 - G[i][0]), H1 = ex2_approx(ge1 - G[i][1]);
        const uint32_t k2 = k2s[i], q2 = q2s[i];
        const float k0 = bf(k2 & 0xffff) * rk, k1 = bf(k2 >> 16) * rk;
        const float q0 = bf(q2 & 0xffff) * rq * F0, q1 = bf(q2 >> 16) * rq * F1;
        const float kh0v = k0 * H0, kh1v = k1 * H1, kf0 = k0 * F0, kf1 = k1 * F1;
        const int o = sw(r, 2 * cp);
        *reinterpret_cast<float2*>(&sm.kf[o]) = make_float2(kf0, kf1);
        *reinterpret_cast<float2*>(&sm.qf[o]) = make_float2(q0, q1);
        *reinterpret_cast<float2*>(&sm.kh[o]) = make_float2(kh0v, kh1v);
        *reinterpret_cast<uint32_t*>(qs_base + (i / 8) * 128 + (i % 8) * 16) =
            pack_f16x2(q0 * p0, q1 * p1);
        if (i % 2 == 0) {
          kp0 = kh0v * e0, kp1 = kh1v * e1;
        } else {
          const int j = (i % 8) / 2;
          split_bf16x2(kp0, kh0v * e0, kh0[j], kl0[j]);
          split_bf16x2(kp1, kh1v * e1, kh1[j], kl1[j]);
          if (i % 8 == 7) {  // tokens 16 qb + i - 7 .. 16 qb + i of keys 2 cp, 2 cp + 1
            unsigned char* b = img + kKeOff + kb_off + (i / 8) * 2048;
            *reinterpret_cast<uint4*>(b) = make_uint4(kh0[0], kh0[1], kh0[2], kh0[3]);
            *reinterpret_cast<uint4*>(b + 4096) = make_uint4(kl0[0], kl0[1], kl0[2], kl0[3]);
            *reinterpret_cast<uint4*>(b + 16) = make_uint4(kh1[0], kh1[1], kh1[2], kh1[3]);
            *reinterpret_cast<uint4*>(b + 4096 + 16) = make_uint4(kl1[0], kl1[1], kl1[2], kl1[3]);
          }
        }
      }
    }
    // Every block's total read: cf becomes A''s column factors (tot_I = Gend_I - Ga_I <= 0):
    // 2^-tot_I for (I, I), 2^tot_1 for (2, 0), 2^tot_2 for (3, 1), 2^(tot_1 + tot_2) for (3, 0).
    // Then 2^Ga (kw's column factors) and the decays 2^G_63.
    __syncthreads();
    {
      *reinterpret_cast<float2*>(&sm.pe[qb][2 * cp]) = make_float2(pa0 * kUncomp, pa1 * kUncomp);
      auto put = [&](int row, float x0, float x1) {
        *reinterpret_cast<float2*>(&sm.cf[row][2 * cp]) = make_float2(x0, x1);
      };
      put(qb, ex2_approx(-G[15][0]), ex2_approx(-G[15][1]));
      if (qb == 1 || qb == 2) put(3 + qb, ex2_approx(G[15][0]), ex2_approx(G[15][1]));
      if (qb == 3) put(6, ex2_approx(t12_0), ex2_approx(t12_1));
      if (qb == 0)
        *reinterpret_cast<float2*>(img + kDecayOff + 8 * cp) =
            make_float2(ex2_approx(gl0), ex2_approx(gl1));
    }
    __syncthreads();
    if (a.probe && tid == 0) a.probe[item * 8 + 2] = clock64();
    // 3. A' and A_qk by (row block I, column block J <= I) pairs, both n8 tiles at once (one A
    // fragment for both); operands as raw f32 bits (tf32 truncation), the column operand k^ H
    // times the pair's column factor from cf (none for (I, I - 1)).
    {
#pragma unroll 1
      for (int jb = 0; jb < 2; ++jb) {
        const int I = kPairs[warp][jb][0], J = kPairs[warp][jb][1], row = kPairs[warp][jb][2];
        if (I < 0) break;
        float ap[2][4] = {}, aq[2][4] = {};
        const int ra = 16 * I + g, rb = ra + 8;
        // ldmatrix rows: lane l addresses row l % 8 of matrix l / 8. A (kf, qf): matrices (rows
        // 0-7 | 8-15) x (keys 0-3 | 4-7) give a0..a3; B (kh): (n8 tile 0 | 1) x (keys 0-3 | 4-7).
        const int mi = lane / 8, arow = 16 * I + 8 * (mi % 2) + lane % 8;
        const int brow = 16 * J + 8 * (mi / 2) + lane % 8;
        auto products = [&](auto scaled) {
          const float* cfr = sm.cf[scaled ? row : 0] + t;
#pragma unroll 16  // (4: 3-4 % slower, session 40)
          for (int kk = 0; kk < 16; ++kk) {
            uint32_t ak[4], aqf[4], b[4];
            ldmatrix_x4(&sm.kf[sw(arow, 8 * kk + 4 * (mi / 2))], ak);
            ldmatrix_x4(&sm.qf[sw(arow, 8 * kk + 4 * (mi / 2))], aqf);
            ldmatrix_x4(&sm.kh[sw(brow, 8 * kk + 4 * (mi % 2))], b);
            if constexpr (decltype(scaled)::value) {
              const float c0 = cfr[8 * kk], c1 = cfr[8 * kk + 4];
#pragma unroll
              for (int n = 0; n < 2; ++n) {
                b[2 * n] = __float_as_uint(__uint_as_float(b[2 * n]) * c0);
                b[2 * n + 1] = __float_as_uint(__uint_as_float(b[2 * n + 1]) * c1);
              }
            }
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              mma_m16n8k8_tf32(ap[n], ak, b[2 * n], b[2 * n + 1]);
              mma_m16n8k8_tf32(aq[n], aqf, b[2 * n], b[2 * n + 1]);
            }
          }
        };
        if (row >= 0)
          products(std::true_type{});
        else
          products(std::false_type{});
        // Elements (rows g + 8 e, columns 8 n + 2 t, + 1 of the block): below the diagonal (N)
        // where 8 (n - e) < g - 2 t (always for J < I), on or below it (A_qk) where <=. A_qk's
        // scale is in q's row norms.
        float* nbl = &sm.nb[nb_index(I, J)][0][0];
        float* nbp = nbl + g * 16 + 2 * t;
        unsigned char* aqp = img + kAqOff + J * 2048 + I * 256 + g * 16 + 4 * t;
        const int dr = I == J ? g - 2 * t : 16;
        const float bet[2] = {sm.beta[ra], sm.beta[rb]};
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int lim = 8 * (n - e);
            const float x0 = lim < dr ? bet[e] * ap[n][2 * e] : 0.0f;
            const float x1 = lim + 1 < dr ? bet[e] * ap[n][2 * e + 1] : 0.0f;
            *reinterpret_cast<float2*>(nbp + e * 128 + n * 8) = make_float2(x0, x1);
            const float q0 = lim <= dr ? aq[n][2 * e] : 0.0f;
            const float q1 = lim + 1 <= dr ? aq[n][2 * e + 1] : 0.0f;
            *reinterpret_cast<uint32_t*>(aqp + n * 1024 + e * 128) = pack_f16x2(q0, q1);
          }
        }
        // X_II = (I + N_II)^-1 in place, by forward substitution, two blocks per warp: warp 0
        // inverts blocks 0 and 1, warp 2 blocks 2 and 3 (lane l: block warp + l / 16, column l %
        // 16), once warps 1 / 3 have made N_11 / N_33 (a barrier per warp pair); those go on to a
        // second pair.
        if (I == J) {  // ids as constants: ptxas reserves every barrier for a register id
          if (warp < 2)
            bar_sync(1, 64);
          else
            bar_sync(2, 64);
        }
        if (I == J && warp % 2 == 0) {
          const float* nbi = &sm.nb[nb_index(warp + lane / 16, warp + lane / 16)][0][0];
          const int col = lane % 16;
          float x[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) {  // two partial sums: half the dependent chain
            float acc0 = i == col ? 1.0f : 0.0f, acc1 = 0.0f;
#pragma unroll
            for (int s2 = 0; s2 < i; ++s2) {
              if (s2 % 2 == 0)
                acc0 = fmaf(-nbi[i * 16 + s2], x[s2], acc0);
              else
                acc1 = fmaf(-nbi[i * 16 + s2], x[s2], acc1);
            }
            x[i] = acc0 + acc1;
          }
          __syncwarp();
          float* nbo = const_cast<float*>(nbi) + col;
#pragma unroll
          for (int i = 0; i < 16; ++i) nbo[i * 16] = x[i];
        }
      }
    }
    // A_qk's blocks above the diagonal (I < J): zeros. Block (I, J)'s rows in each 8-column half
    // are 256 contiguous bytes at J * 2048 + half * 1024 + I * 256; 16-byte stores, one per thread.
    if (tid < 6 * 32) {
      const int b = tid / 32, I = b < 3 ? 0 : (b < 5 ? 1 : 2),
                J = b < 3 ? b + 1 : (b < 5 ? b - 1 : 3);
      *reinterpret_cast<uint4*>(img + kAqOff + J * 2048 + ((tid / 16) % 2) * 1024 + I * 256 +
                                (tid % 16) * 16) = make_uint4(0u, 0u, 0u, 0u);
    }
    __syncthreads();
    if (a.probe && tid == 0) a.probe[item * 8 + 3] = clock64();
    // 4. kw = k^ F 2^Ga in split bf16 into qf's space, as wgmma's B operand of W = Tb kw (K =
    // tokens, N = keys, K-major: the image's ke layout): per 16-token step 8 KiB, hi then lo.
    // Thread: key tid % 128, tokens 8 (tid / 128) + 16 J + (0..7) for J = 0..3; the swizzled
    // column of each of the 8 rows once (rows 8 (tid / 128) + j have j = r % 8).
    unsigned char* kwb = reinterpret_cast<unsigned char*>(sm.qf);
    {
      const int key = tid % kCols, half = tid / kCols;
      const float* kcol = sm.kf + sw(8 * half, key);
      unsigned char* kwd = kwb + half * 2048 + (key / 8) * 128 + (key % 8) * 16;
      int xo[8];  // sw(8 half + j, key) - sw(8 half, key)
#pragma unroll
      for (int j = 0; j < 8; ++j) xo[j] = j * kCols + ((key ^ (j << 2)) - key);
#pragma unroll
      for (int J = 0; J < 4; ++J) {
        const float p = sm.pe[J][key];
        const float* kc = kcol + J * 16 * kCols;
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          split_bf16x2(kc[xo[2 * j]] * p, kc[xo[2 * j + 1]] * p, hi[j], lo[j]);
        *reinterpret_cast<uint4*>(kwd + J * 8192) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(kwd + J * 8192 + 4096) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
    }
    fence_proxy_async_shared();  // the wgmma of step 6 reads kw (a barrier follows in step 5)
    if (a.probe && tid == 0) a.probe[item * 8 + 4] = clock64();
    // 5. The blocks of X below its diagonal (the diagonal ones were inverted in step 3), in two
    // waves of warp-local targets X_IJ = -X_II sum_{J <= M < I} N_IM X_MJ: (1,0) (2,1) (3,2), then
    // (2,0) (3,1) and (3,0) (below); off-diagonal X in kh's space (N stays for wave 2). Transposed,
    // on mma.sync in split bf16 (hi hi + hi lo + lo hi): Y^T = sum X_MJ^T N_IM^T, whose
    // accumulators are the A fragments of X_IJ^T = -Y^T X_II^T.
    float* xoff = sm.kh;  // 6 blocks of 16 x 16 at off_index(I, J), X_30's second term after them
    {
      auto xblock = [&](int I, int J) -> const float* {
        return I == J ? &sm.nb[nb_index(I, I)][0][0] : xoff + off_index(I, J) * 256;
      };
      auto mma3 = [&](float(&d)[4], const uint32_t(&ah)[4], const uint32_t(&al)[4],
                      const float* brow) {  // B (k 2t.., n g) = brow[2t], brow[2t + 1], + 8
        const float2 p0 = *reinterpret_cast<const float2*>(brow + 2 * t);
        const float2 p1 = *reinterpret_cast<const float2*>(brow + 2 * t + 8);
        uint32_t bh0, bl0, bh1, bl1;
        split_bf16x2(p0.x, p0.y, bh0, bl0);
        split_bf16x2(p1.x, p1.y, bh1, bl1);
        mma_m16n8k16_bf16(d, al, bh0, bh1);
        mma_m16n8k16_bf16(d, ah, bl0, bl1);
        mma_m16n8k16_bf16(d, ah, bh0, bh1);
      };
      float y[2][4] = {};  // Y^T: rows j (X_IJ's columns), n8 tiles of i (its rows)
      auto acc = [&](int I, int M, int J) {  // Y += N_IM X_MJ
        const float* x = xblock(M, J);       // A = X_MJ^T: (j, k) = X_MJ[k][j]
        uint32_t ah[4], al[4];
        split_bf16x2(x[2 * t * 16 + g], x[(2 * t + 1) * 16 + g], ah[0], al[0]);
        split_bf16x2(x[2 * t * 16 + g + 8], x[(2 * t + 1) * 16 + g + 8], ah[1], al[1]);
        split_bf16x2(x[(2 * t + 8) * 16 + g], x[(2 * t + 9) * 16 + g], ah[2], al[2]);
        split_bf16x2(x[(2 * t + 8) * 16 + g + 8], x[(2 * t + 9) * 16 + g + 8], ah[3], al[3]);
        const float* nm = &sm.nb[nb_index(I, M)][0][0];  // B = N_IM^T: (k, i) = N_IM[i][k]
#pragma unroll
        for (int n = 0; n < 2; ++n) mma3(y[n], ah, al, nm + (8 * n + g) * 16);
      };
      // dst = -xl Y (xl: X_II, or X_32 for one of X_30's two terms)
      auto fin_to = [&](const float* xl, float* dst) {
        uint32_t ah[4], al[4];  // Y^T's accumulators as A fragments
        split_bf16x2(y[0][0], y[0][1], ah[0], al[0]);
        split_bf16x2(y[0][2], y[0][3], ah[1], al[1]);
        split_bf16x2(y[1][0], y[1][1], ah[2], al[2]);
        split_bf16x2(y[1][2], y[1][3], ah[3], al[3]);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          float z[4] = {};
          mma3(z, ah, al, xl + (8 * n + g) * 16);  // B = xl^T
          // z: (j g, i 8 n + 2 t), (g, + 1), (g + 8, 8 n + 2 t), (g + 8, + 1) of X_IJ^T
          const int i0 = 8 * n + 2 * t;
          dst[i0 * 16 + g] = -z[0], dst[(i0 + 1) * 16 + g] = -z[1];
          dst[i0 * 16 + g + 8] = -z[2], dst[(i0 + 1) * 16 + g + 8] = -z[3];
        }
      };
      auto fin = [&](int I, int J) {  // X_IJ = -X_II Y
        fin_to(&sm.nb[nb_index(I, I)][0][0], xoff + off_index(I, J) * 256);
      };
      // Each product of Y as early as its X_MJ exists (warps 3-6 keep their Y across the waves).
      // Wave 1: X_10, X_21, X_32 and the terms N_20 X_00 (twice), N_31 X_11, N_30 X_00. Wave 2:
      // X_20 = -X_22 (N_20 X_00 + N_21 X_10), X_31, and X_30 in two terms (the inverse of the
      // two 32 x 32 diagonal blocks' product): -X_32 (N_20 X_00 + N_21 X_10) in X_30's place and
      // -X_33 (N_30 X_00 + N_31 X_10) in a seventh block, which step 6 adds.
      if (warp < 3) acc(warp + 1, warp, warp), fin(warp + 1, warp);
      if (warp == 3 || warp == 5) acc(2, 0, 0);
      if (warp == 4) acc(3, 1, 1);
      if (warp == 6) acc(3, 0, 0);
      __syncthreads();
      if (warp == 3) acc(2, 1, 0), fin(2, 0);
      if (warp == 4) acc(3, 2, 1), fin(3, 1);
      if (warp == 5) acc(2, 1, 0), fin_to(xblock(3, 2), xoff + off_index(3, 0) * 256);
      if (warp == 6) acc(3, 1, 0), fin_to(xblock(3, 3), xoff + 6 * 256);
      // Warp 7 has no target: it takes the next item (the atomic's latency off the other warps'
      // path; read after step 6's barrier).
      if (warp == 7 && lane == 0 && a.counter)
        sm.next_item = early && item >= a.early_items ? -1 : take();
    }
    __syncthreads();
    if (a.probe && tid == 0) a.probe[item * 8 + 5] = clock64();
    // 6. Tb = X diag(beta) in split bf16 into k^ F's space (hi, then lo 8 KiB on), K-major: row r,
    // columns s .. s + 7 at (s / 8) 1024 + (r / 8) 128 + (r % 8) 16, zeros above the diagonal
    // blocks. It is A of W = Tb kw here and, read as Tb^T, B of U^T = v^T Tb^T in the scan (the
    // image's copy).
    unsigned char* tb = reinterpret_cast<unsigned char*>(sm.kf);
#pragma unroll
    for (int it = tid; it < 512; it += kThreads) {  // (row, 8 columns): 8 lanes per 128 bytes
      const int r = it % 8 + 8 * ((it / 8) % 8), s8 = it / 64, I = r / 16, J = s8 / 2;
      uint4 hi = make_uint4(0u, 0u, 0u, 0u), lo = hi;
      if (J <= I) {
        const float* x = (I == J ? &sm.nb[nb_index(I, I)][0][0] : xoff + off_index(I, J) * 256) +
                         (r % 16) * 16 + (s8 % 2) * 8;
        float4 x0 = *reinterpret_cast<const float4*>(x);
        float4 x1 = *reinterpret_cast<const float4*>(x + 4);
        if (I == 3 && J == 0) {  // X_30's second term (step 5)
          const float4 y0 = *reinterpret_cast<const float4*>(x + (6 - off_index(3, 0)) * 256);
          const float4 y1 = *reinterpret_cast<const float4*>(x + (6 - off_index(3, 0)) * 256 + 4);
          x0.x += y0.x, x0.y += y0.y, x0.z += y0.z, x0.w += y0.w;
          x1.x += y1.x, x1.y += y1.y, x1.z += y1.z, x1.w += y1.w;
        }
        const float4 b0 = *reinterpret_cast<const float4*>(&sm.beta[8 * s8]);
        const float4 b1 = *reinterpret_cast<const float4*>(&sm.beta[8 * s8 + 4]);
        split_bf16x2(x0.x * b0.x, x0.y * b0.y, hi.x, lo.x);
        split_bf16x2(x0.z * b0.z, x0.w * b0.w, hi.y, lo.y);
        split_bf16x2(x1.x * b1.x, x1.y * b1.y, hi.z, lo.z);
        split_bf16x2(x1.z * b1.z, x1.w * b1.w, hi.w, lo.w);
      }
      const int off = s8 * 1024 + (r / 8) * 128 + (r % 8) * 16;
      *reinterpret_cast<uint4*>(tb + off) = hi;
      *reinterpret_cast<uint4*>(tb + 8192 + off) = lo;
      *reinterpret_cast<uint4*>(tbimg + off) = hi;
      *reinterpret_cast<uint4*>(tbimg + 8192 + off) = lo;
    }
    fence_proxy_async_shared();  // Tb is read by wgmma
    __syncthreads();
    // With the counter, warp 7 took it in step 5.
    next = a.counter ? sm.next_item : (item + grid < items ? item + grid : -1);
    const bool stage_next = a.stage && next >= 0;
    const int nc = stage_next ? next / a.H : 0, nh = stage_next ? next - nc * a.H : 0;
    if (stage_next) {  // k, g: rows tid / 16 + 16 i of both by every thread
      stage_rows(a, sm, nc, nh, 1, tid / 16, 16, 4, tid % 16);
      stage_rows(a, sm, nc, nh, 2, tid / 16, 16, 4, tid % 16);
      cp_async_commit_group();
    }
    // W = Tb kw on wgmma by warpgroup 0 (4 token steps x 3 m64n128k16, both operands in shared
    // memory), stored negated as f16. (Session 41: split between the two warpgroups, 3 m64n64k16
    // per step each, the producer alone 3 % slower.)
    const SmemDesc dt = smem_desc_noswizzle(tb, 1024, 128);   // + 2 KiB per token step, lo + 8 KiB
    const SmemDesc dk = smem_desc_noswizzle(kwb, 2048, 128);  // + 8 KiB per token step, lo + 4 KiB
    if (warp < 4) {
      float aw[64];
      wgmma_fence();
#pragma unroll
      for (int J = 0; J < 4; ++J) {
        wgmma_m64n128k16_bf16_ss(aw, dt + 512 + 128 * J, dk + 512 * J, J > 0);
        wgmma_m64n128k16_bf16_ss(aw, dt + 128 * J, dk + 512 * J + 256, true);
        wgmma_m64n128k16_bf16_ss(aw, dt + 128 * J, dk + 512 * J, true);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      wgmma_fence_operands(aw);
      if (stage_next) {  // q over kw, now read: rows tid / 16 + 8 i
        stage_rows(a, sm, nc, nh, 0, tid / 16, 8, 8, tid % 16);
        cp_async_commit_group();
      }
      // -W (f16 pairs): rows 16 w + g (+ 8), keys 8 j + 2 t of n8 tile j.
      unsigned char* wb = img + 2 * warp * 128 + g * 16 + 4 * t;
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          *reinterpret_cast<uint32_t*>(wb + (j / 2) * 4096 + (j % 2) * 2048 + e * 128) =
              pack_f16x2(-aw[4 * j + 2 * e], -aw[4 * j + 2 * e + 1]);
    }
    if (stage_next) cp_async_wait_group<0>();
    __syncthreads();  // the next item's step 2 writes over kw and Tb; its rows have landed
    {
      if (tid == 0 && a.probe) a.probe[item * 8 + 6] = clock64();
      if (tid == 0 && a.ready) {  // the last item's flag at once, the others in the next item
        const int flag = h * a.chunks + c;
        if (next >= 0)
          sm.pending = flag;
        else
          red_release_add(&a.ready[flag], 1u);
      }
    }
  }
  if (a.span && tid == 0) atomicMax(&a.span[1], (unsigned long long)globaltimer());
}

}  // namespace prod

// Pseudo-random bf16 inputs on the device (timing shapes): q, k, v ~ uniform [-1.7, 1.7], g
// ~ uniform [-2, 2], beta logits ~ uniform [-2, 2].
__global__ void fill_bf16(uint16_t* x, size_t n, uint32_t salt, float amp) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ salt;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float u = float(h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    x[i] = uint16_t(__float_as_uint(amp * u) >> 16);
  }
}

struct Timing {
  float us_per_16;  // per 16 tokens of one CTA's chain
  float ms;
  double stage_bytes;  // read by all CTAs
};

// v as [tokens][heads x 128] bf16 (`stride` elements per token) in boxes of 64 tokens x 64
// values with the 128-byte swizzle: the consumer's loads (cuTensorMapEncodeTiled from the driver
// through the runtime, as src/cuda/prefill/launch.cu does).
CUtensorMap v_map(const void* v, int64_t tokens, int heads, int64_t stride) {
  using Encode =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                     &found);
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<Encode>(f) : nullptr;
  }();
  CUtensorMap m{};
  EXPECT_NE(encode, nullptr);
  if (!encode) return m;
  const cuuint64_t dims[2] = {cuuint64_t(heads) * 128, cuuint64_t(tokens)};
  const cuuint64_t strides[1] = {cuuint64_t(stride) * 2};
  const cuuint32_t box[2] = {64, kChunk}, steps[2] = {1, 1};
  const CUresult r =
      encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(v), dims, strides, box,
             steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  EXPECT_EQ(r, CUDA_SUCCESS);
  return m;
}

// The consumer with kWgs warpgroups per CTA over `chunks` images of `heads` heads.
template <int kWgs, bool kOut, bool kHot, bool kStore = kOut>
void launch_consumer(int heads, int chunks, const void* img, const void* tbimg,
                     const CUtensorMap& tm_v, void* out, void* state, bool zero_state,
                     const uint32_t* ready = nullptr, cudaStream_t stream = nullptr,
                     long long* probe = nullptr, bool pdl = false) {
  using L = Layout<kWgs>;
  auto kernel = probe ? wy64_consumer_kernel<kWgs, kOut, kHot, kStore, true>
                      : wy64_consumer_kernel<kWgs, kOut, kHot, kStore, false>;
  // Once per kernel: between two launches timed together, the host call delayed the second
  // (session 41).
  static const bool attributes_set = [] {
    for (auto k : {wy64_consumer_kernel<kWgs, kOut, kHot, kStore, true>,
                   wy64_consumer_kernel<kWgs, kOut, kHot, kStore, false>})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem);
    return true;
  }();
  (void)attributes_set;
  // pdl: programmatic stream serialization behind the producer (which allows it at its start).
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(2 * heads / kWgs));
  config.blockDim = dim3(unsigned(128 + 128 * kWgs));
  config.dynamicSmemBytes = L::kSmem;
  config.stream = stream;
  cudaLaunchAttribute serialization{};
  serialization.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  serialization.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &serialization;
  config.numAttrs = pdl ? 1 : 0;
  EXPECT_EQ(cudaLaunchKernelEx(&config, kernel, chunks, static_cast<const unsigned char*>(img),
                               static_cast<const unsigned char*>(tbimg), tm_v,
                               static_cast<uint16_t*>(out), static_cast<float*>(state),
                               int(zero_state ? 1 : 0), ready, probe),
            cudaSuccess);
}

template <int kWgs, bool kOut, bool kHot, bool kStore = kOut>
Timing time_consumer(int heads, int tokens) {
  using L = Layout<kWgs>;
  const int chunks = tokens / kChunk;
  const size_t img_bytes = size_t(heads) * chunks * kImgBytes;
  const size_t tb_bytes = size_t(heads) * chunks * kTbBytes;
  const size_t n = size_t(tokens) * heads * 128;
  fastkda_gpu_test::DeviceBuf img(img_bytes), tbimg(tb_bytes), v(n * 2);
  fastkda_gpu_test::DeviceBuf out(size_t(tokens) * heads * 128 * 2);
  fastkda_gpu_test::DeviceBuf state(size_t(heads) * 2 * 128 * 64 * 4);
  EXPECT_TRUE(img.get() && tbimg.get() && v.get() && out.get() && state.get());
  fill_images<<<1024, 256>>>(static_cast<uint32_t*>(img.get()), img_bytes / 4,
                             static_cast<uint32_t*>(tbimg.get()), tb_bytes / 4);
  fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(v.get()), n, 3u, 1.7f);
  const CUtensorMap tm_v = v_map(v.get(), tokens, heads, int64_t(heads) * 128);
  auto launch = [&] {
    launch_consumer<kWgs, kOut, kHot, kStore>(heads, chunks, img.get(), tbimg.get(), tm_v,
                                              out.get(), state.get(), false);
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

prod::Args producer_args(const void* q, const void* k, const void* v, const void* g,
                         const void* beta, const float* A_log, const float* dt_bias,
                         float lower_bound, int H, int T, void* img, void* tbimg) {
  prod::Args a{};
  a.q = static_cast<const uint16_t*>(q), a.k = static_cast<const uint16_t*>(k);
  a.v = static_cast<const uint16_t*>(v), a.g = static_cast<const uint16_t*>(g);
  a.beta = static_cast<const uint16_t*>(beta);
  a.A_log = A_log, a.dt_bias = dt_bias;
  a.lower_bound_log2 = lower_bound * 1.4426950408889634f;
  a.scale = 1.0f / std::sqrt(128.0f);
  a.H = H, a.chunks = T / kChunk;
  a.q_stride = a.k_stride = a.v_stride = a.g_stride = int64_t(H) * 128, a.beta_stride = H;
  a.img = static_cast<unsigned char*>(img), a.tbimg = static_cast<unsigned char*>(tbimg);
  a.stage = 1;
  return a;
}

// A test problem's inputs (its strides) as producer arguments.
prod::Args problem_args(const fastkda_prefill_test::Problem& p,
                        const fastkda_prefill_test::DeviceInputs& d, void* img, void* tbimg) {
  prod::Args a = producer_args(d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(),
                               static_cast<const float*>(d.A_log.get()),
                               static_cast<const float*>(d.dt_bias.get()), p.c.lower_bound, p.c.H,
                               int(p.c.T), img, tbimg);
  a.q_stride = p.q_stride, a.k_stride = p.k_stride, a.v_stride = p.v_stride;
  a.g_stride = p.g_stride, a.beta_stride = p.beta_stride;
  return a;
}

// Two CTAs per SM on `sms` SMs (all when 0): the SMs a scan launched first leaves free.
void launch_producer(const prod::Args& a, cudaStream_t stream = nullptr, int sms = 0,
                     bool persistent = true) {
  const int smem = int(sizeof(prod::Smem));
  static const int device_sms = [&] {  // once (see launch_consumer)
    cudaFuncSetAttribute(prod::producer_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
    return n;
  }();
  if (sms == 0) sms = device_sms;
  const int grid = persistent ? std::min(a.chunks * a.H, 2 * sms) : a.chunks * a.H;
  prod::producer_kernel<<<grid, prod::kThreads, smem, stream>>>(a);
}

// A test problem (bounded gate, bf16 g and beta, no start state) and the producer's images of it.
struct Produced {
  fastkda_prefill_test::Problem p;
  fastkda_prefill_test::DeviceInputs d;
  int chunks;
  fastkda_gpu_test::DeviceBuf img, tbimg, counter;
  // staged: persistent CTAs on 2 SMs (four CTAs, several items each), the next item's rows staged,
  // the items taken from a counter when `counted`.
  Produced(int T, int H, bool staged = false, bool counted = false)
      : p(problem_case(T, H)),
        d(p),
        chunks(T / kChunk),
        img(size_t(H) * chunks * kImgBytes),
        tbimg(size_t(H) * chunks * kTbBytes),
        counter(4) {
    prod::Args a = problem_args(p, d, img.get(), tbimg.get());
    a.stage = staged;
    cudaMemset(counter.get(), 0, 4);
    if (counted) a.counter = static_cast<uint32_t*>(counter.get());
    launch_producer(a, nullptr, staged ? 2 : 0, staged);
  }
  static fastkda_prefill_test::Case problem_case(int T, int H) {
    fastkda_prefill_test::Case cs;
    cs.T = T, cs.H = cs.HV = H;
    cs.g_dtype = cs.beta_dtype = fastkda::DType::kBF16;
    cs.init = fastkda_prefill_test::InitState::kNone;
    return cs;
  }
};

// The producer's images through the consumer (one warpgroup per value half, zero start state)
// against the fp64 oracle: out within the prefill bound when every field is right.
TEST(Wy64Bench, DISABLED_ProducerConsumerMatchOracle) {
  using namespace fastkda_prefill_test;
  FASTKDA_REQUIRE_GPU();
  // One item per CTA; persistent, rows staged; the same with the items taken from a counter.
  for (const int mode : {0, 1, 2}) {
    const bool staged = mode > 0;
    Produced w(1024, 4, staged, mode == 2);
    const Problem& p = w.p;
    fastkda_gpu_test::DeviceBuf out(p.out_elems() * 2), state(size_t(p.c.H) * 2 * 128 * 64 * 4);
    const CUtensorMap tm_v = v_map(w.d.v.get(), p.c.T, p.c.H, p.v_stride);
    launch_consumer<1, true, false>(p.c.H, w.chunks, w.img.get(), w.tbimg.get(), tm_v, out.get(),
                                    state.get(), true);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostBuf got(DType::kBF16, p.out_elems());
    cudaMemcpy(got.data(), out.get(), got.bytes(), cudaMemcpyDeviceToHost);
    const Result ref = run_oracle(p);
    const Err e = compare(got, ref.out);
    std::printf("producer (mode %d) -> consumer vs oracle (T %d, H %d): out %s\n", mode, int(p.c.T),
                p.c.H, ::testing::PrintToString(e.rms_rel).c_str());
    EXPECT_EQ(e.nonfinite, 0u) << p.describe();
    EXPECT_LT(e.rms_rel, 2.0e-3) << e << " " << p.describe();
  }
}

float half_to_float(uint16_t hb) {
  const uint32_t sign = uint32_t(hb >> 15) << 31, e = (hb >> 10) & 31, m = hb & 1023;
  float f;
  if (e == 0)
    f = std::ldexp(float(m), -24);
  else if (e == 31)
    f = m ? NAN : INFINITY;
  else
    f = std::ldexp(float(m | 1024), int(e) - 25);
  return sign ? -f : f;
}

// Each field of the producer's image against a host fp64 evaluation of the same formulas.
TEST(Wy64Bench, DISABLED_ProducerFields) {
  using namespace fastkda_prefill_test;
  FASTKDA_REQUIRE_GPU();
  for (const bool staged : {false, true}) {  // one item per CTA; persistent, rows staged
    Produced w(256, 2, staged);
    const Problem& p = w.p;
    const Case& cs = p.c;
    const int chunks = w.chunks, H = cs.H;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<unsigned char> im(size_t(H) * chunks * kImgBytes),
        tm(size_t(H) * chunks * kTbBytes);
    cudaMemcpy(im.data(), w.img.get(), im.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(tm.data(), w.tbimg.get(), tm.size(), cudaMemcpyDeviceToHost);
    const double scale = 1.0 / std::sqrt(128.0), l2e = 1.4426950408889634;
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < chunks; ++c) {
        const unsigned char* ib = im.data() + (size_t(h) * chunks + c) * kImgBytes;
        const unsigned char* tbb = tm.data() + (size_t(h) * chunks + c) * kTbBytes;
        auto at = [&](const HostBuf& x, int64_t stride, int r, int col) {
          return double(x.get(size_t((int64_t(c) * 64 + r) * stride + h * 128 + col)));
        };
        std::vector<double> qn(64 * 128), kn(64 * 128), G(64 * 128), beta(64);
        for (int r = 0; r < 64; ++r) {
          double sq = 0, sk = 0;
          for (int j = 0; j < 128; ++j) {
            sq += at(p.q, p.q_stride, r, j) * at(p.q, p.q_stride, r, j);
            sk += at(p.k, p.k_stride, r, j) * at(p.k, p.k_stride, r, j);
          }
          for (int j = 0; j < 128; ++j) {
            qn[r * 128 + j] = at(p.q, p.q_stride, r, j) / std::sqrt(sq + 1e-6);
            kn[r * 128 + j] = at(p.k, p.k_stride, r, j) / std::sqrt(sk + 1e-6);
            const double A = std::exp(double(p.A_log[size_t(h)]));
            const double x = at(p.g, p.g_stride, r, j) + p.dt_bias[size_t(h * 128 + j)];
            const double a2 = cs.lower_bound * l2e / (1 + std::exp(-A * x));
            G[r * 128 + j] = (r ? G[(r - 1) * 128 + j] : 0.0) + a2;
          }
          beta[r] = 1 / (1 + std::exp(-double(
                                 p.beta.get(size_t((int64_t(c) * 64 + r) * p.beta_stride + h)))));
        }
        std::vector<double> N(64 * 64, 0), Aqk(64 * 64, 0);
        for (int r = 0; r < 64; ++r)
          for (int s2 = 0; s2 <= r; ++s2) {
            double ap = 0, aq = 0;
            for (int j = 0; j < 128; ++j) {
              const double f = std::exp2(G[r * 128 + j] - G[s2 * 128 + j]);
              ap += kn[r * 128 + j] * kn[s2 * 128 + j] * f;
              aq += qn[r * 128 + j] * kn[s2 * 128 + j] * f;
            }
            if (s2 < r) N[r * 64 + s2] = beta[r] * ap;
            Aqk[r * 64 + s2] = scale * aq;
          }
        std::vector<double> X(64 * 64, 0);  // (I + N)^-1, column by column
        for (int j = 0; j < 64; ++j)
          for (int i = 0; i < 64; ++i) {
            double acc = i == j;
            for (int s2 = 0; s2 < i; ++s2) acc -= N[i * 64 + s2] * X[s2 * 64 + j];
            X[i * 64 + j] = acc;
          }
        double ew = 0, nw = 0, et = 0, nt = 0, eq = 0, nq = 0, ek = 0, nk = 0, ea = 0, na = 0,
               ed = 0, nd = 0;
        for (int r = 0; r < 64; ++r)  // Tb = X diag(beta), zeros above the diagonal
          for (int s2 = 0; s2 < 64; ++s2) {
            const double tb = s2 <= r ? X[r * 64 + s2] * beta[s2] : 0.0;
            const unsigned char* e = tbb + prod::tb_offset(r, s2);
            const double gt = fastkda::bf16_to_float(*reinterpret_cast<const uint16_t*>(e)) +
                              fastkda::bf16_to_float(*reinterpret_cast<const uint16_t*>(e + 8192));
            et += (gt - tb) * (gt - tb), nt += tb * tb;
          }
        for (int r = 0; r < 64; ++r)
          for (int j = 0; j < 128; ++j) {
            double w = 0;
            for (int s2 = 0; s2 <= r; ++s2)
              w += X[r * 64 + s2] * beta[s2] * kn[s2 * 128 + j] * std::exp2(G[s2 * 128 + j]);
            const double gw =  // stored negated
                -half_to_float(*reinterpret_cast<const uint16_t*>(ib + prod::w_offset(r, j)));
            const double gq =
                half_to_float(*reinterpret_cast<const uint16_t*>(ib + prod::w_offset(64 + r, j)));
            const size_t ko = kKeOff + (r / 16) * 8192 + ((r % 16) / 8) * 2048 + (j / 8) * 128 +
                              (j % 8) * 16 + (r % 8) * 2;
            const double gk =
                fastkda::bf16_to_float(*reinterpret_cast<const uint16_t*>(ib + ko)) +
                fastkda::bf16_to_float(*reinterpret_cast<const uint16_t*>(ib + ko + 4096));
            const double qs = scale * qn[r * 128 + j] * std::exp2(G[r * 128 + j]);
            const double ke = kn[r * 128 + j] * std::exp2(G[63 * 128 + j] - G[r * 128 + j]);
            ew += (gw - w) * (gw - w), nw += w * w;
            eq += (gq - qs) * (gq - qs), nq += qs * qs;
            ek += (gk - ke) * (gk - ke), nk += ke * ke;
          }
        for (int t2 = 0; t2 < 64; ++t2)
          for (int s2 = 0; s2 < 64; ++s2) {
            const size_t ao = kAqOff + (s2 / 16) * 2048 + ((s2 % 16) / 8) * 1024 + (t2 / 8) * 128 +
                              (t2 % 8) * 16 + (s2 % 8) * 2;
            const double ga = half_to_float(*reinterpret_cast<const uint16_t*>(ib + ao));
            ea += (ga - Aqk[t2 * 64 + s2]) * (ga - Aqk[t2 * 64 + s2]),
                na += Aqk[t2 * 64 + s2] * Aqk[t2 * 64 + s2];
          }
        for (int j = 0; j < 128; ++j) {
          const double dd = std::exp2(G[63 * 128 + j]);
          const double gd = reinterpret_cast<const float*>(ib + kDecayOff)[j];
          ed += (gd - dd) * (gd - dd), nd += dd * dd;
        }
        auto rel = [](double e, double n) { return std::sqrt(e / std::max(n, 1e-300)); };
        std::printf(
            "staged %d h %d chunk %d: W %.2e Tb %.2e qs %.2e ke %.2e A_qk %.2e decay %.2e\n",
            int(staged), h, c, rel(ew, nw), rel(et, nt), rel(eq, nq), rel(ek, nk), rel(ea, na),
            rel(ed, nd));
        EXPECT_LT(rel(et, nt), 1e-4);
        EXPECT_LT(rel(ew, nw), 2e-3);
        EXPECT_LT(rel(eq, nq), 2e-3);
        EXPECT_LT(rel(ek, nk), 1e-4);
        EXPECT_LT(rel(ea, na), 2e-3);
      }
  }
}

// The producer alone: ms and SM-us per chunk of 64 tokens and head (grid of chunks x H CTAs, two
// per SM), then producer and consumer one after the other (not overlapped: no ready counters).
TEST(Wy64Bench, DISABLED_Producer) {
  if (!fastkda_gpu_test::have_gpu()) GTEST_SKIP() << "no GPU";
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::printf("%-16s %9s %14s %12s %12s %14s %14s %14s\n", "shape", "prod ms", "SM-us/chunk",
              "cons ms", "sum ms", "beside 1wg ms", "beside 2wg ms", "2wg behind ms");
  cudaStream_t s1, s2;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  // WY64_QUICK=1: the H32 rows only: the producer alone, the two-warpgroup scan alone (cons ms)
  // and the scan behind the producer.
  const char* quick_env = std::getenv("WY64_QUICK");
  const bool quick = quick_env && quick_env[0] == '1';
  const int shapes[][2] = {{32, 4096}, {32, 16384}, {32, 65536}, {8, 65536}, {96, 8192}};
  for (const auto& sh : shapes) {
    const int H = sh[0], T = sh[1], chunks = T / kChunk;
    if (quick && H != 32) continue;
    const size_t n = size_t(T) * H * 128;
    fastkda_gpu_test::DeviceBuf q(n * 2), k(n * 2), v(n * 2), g(n * 2), beta(size_t(T) * H * 2);
    std::vector<float> A_log(size_t(H), 1.0f), dt_bias(size_t(H) * 128, -4.0f);
    fastkda_gpu_test::DeviceBuf dA(A_log.data(), A_log.size() * 4),
        ddt(dt_bias.data(), dt_bias.size() * 4);
    fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(q.get()), n, 1u, 1.7f);
    fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(k.get()), n, 2u, 1.7f);
    fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(v.get()), n, 3u, 1.7f);
    fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(g.get()), n, 4u, 2.0f);
    fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(beta.get()), size_t(T) * H, 5u, 2.0f);
    fastkda_gpu_test::DeviceBuf img(size_t(H) * chunks * kImgBytes);
    fastkda_gpu_test::DeviceBuf tbimg(size_t(H) * chunks * kTbBytes);
    const CUtensorMap tm_v = v_map(v.get(), T, H, int64_t(H) * 128);
    fastkda_gpu_test::DeviceBuf out(n * 2), state(size_t(H) * 2 * 128 * 64 * 4);
    const prod::Args a = producer_args(
        q.get(), k.get(), v.get(), g.get(), beta.get(), static_cast<const float*>(dA.get()),
        static_cast<const float*>(ddt.get()), -5.0f, H, T, img.get(), tbimg.get());
    launch_producer(a);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const float pms = fastkda_gpu_test::median_event_ms([&] { launch_producer(a); }, 9);
    auto run_consumer = [&] {
      launch_consumer<1, true, false>(H, chunks, img.get(), tbimg.get(), tm_v, out.get(),
                                      state.get(), true);
    };
    const float cms = fastkda_gpu_test::median_event_ms(quick ? std::function<void()>([&] {
                                                          launch_consumer<2, true, false>(
                                                              H, chunks, img.get(), tbimg.get(),
                                                              tm_v, out.get(), state.get(), true);
                                                        })
                                                              : std::function<void()>(run_consumer),
                                                        9);
    const float both = quick ? NAN
                             : fastkda_gpu_test::median_event_ms(
                                   [&] {
                                     launch_producer(a);
                                     run_consumer();
                                   },
                                   9);
    // Producer and consumer at once (two streams): the consumer launched first takes 2 H / kWgs
    // SMs and waits for each image's ready flag; the producer runs on the other SMs.
    fastkda_gpu_test::DeviceBuf ready(size_t(H) * chunks * 4);
    prod::Args ar = a;
    ar.ready = static_cast<uint32_t*>(ready.get());
    fastkda_gpu_test::DeviceBuf counter(4);
    // Median of `reps`: the flags (and the counter) reset and `first` launched on stream a,
    // `second` on stream b right behind it; the time until both are done.
    auto at_once = [&](cudaStream_t sa, cudaStream_t sb, auto first, auto second, int reps = 7) {
      cudaEvent_t e0, e1, e2;
      cudaEventCreate(&e0), cudaEventCreate(&e1), cudaEventCreate(&e2);
      std::vector<float> ms;
      for (int r = 0; r < reps; ++r) {
        cudaMemsetAsync(ready.get(), 0, size_t(H) * chunks * 4, sa);
        cudaMemsetAsync(counter.get(), 0, 4, sa);
        cudaEventRecord(e0, sa);
        first(sa);
        cudaStreamWaitEvent(sb, e0);
        second(sb);
        cudaEventRecord(e2, sb);
        cudaStreamWaitEvent(sa, e2);
        cudaEventRecord(e1, sa);
        cudaEventSynchronize(e1);
        float t = 0.0f;
        cudaEventElapsedTime(&t, e0, e1);
        ms.push_back(t);
      }
      cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    auto beside = [&](auto launch_cons, int cons_ctas) {  // the scan first, on cons_ctas SMs
      return at_once(s1, s2, launch_cons,
                     [&](cudaStream_t st) { launch_producer(ar, st, sms - cons_ctas); });
    };
    // Only where the consumer leaves SMs to the producer (its CTAs wait for the producer's).
    const float b1 =
        quick || 2 * H > sms - 8
            ? NAN
            : beside(
                  [&](cudaStream_t st) {
                    launch_consumer<1, true, false>(H, chunks, img.get(), tbimg.get(), tm_v,
                                                    out.get(), state.get(), true, ar.ready, st);
                  },
                  2 * H);
    const float b2 = quick || H > sms - 8 ? NAN
                                          : beside(
                                                [&](cudaStream_t st) {
                                                  launch_consumer<2, true, false>(
                                                      H, chunks, img.get(), tbimg.get(), tm_v,
                                                      out.get(), state.get(), true, ar.ready, st);
                                                },
                                                H);
    // The producer first on every SM (items taken in order from a counter), the two-warpgroup
    // scan launched behind it: the producer's CTAs on SMs < H stop taking items after a fraction
    // f of them, and the scan's CTAs take those SMs with that much of a lead.
    auto delayed = [&](float f, long long* probe = nullptr, unsigned long long* span = nullptr) {
      prod::Args ad = ar;
      ad.span = span;
      ad.counter = static_cast<uint32_t*>(counter.get());
      ad.early_sms = H;
      ad.early_items = int(std::lround(f * chunks * H));
      return at_once(
          s2, s1, [&](cudaStream_t st) { launch_producer(ad, st); },
          [&](cudaStream_t st) {
            launch_consumer<2, true, false>(H, chunks, img.get(), tbimg.get(), tm_v, out.get(),
                                            state.get(), true, ad.ready, st, probe);
          },
          probe ? 1 : 7);  // the probes of one run
    };
    // Session 39, H32: f = 0 the fastest; a lead (f = 0.1 .. 0.35) costs 1-20 %: the images made
    // ahead have left L2 when the scan reads them.
    const float b3 = H > sms - 8 ? NAN : delayed(0.0f);
    // The same on one stream, the scan launched behind the producer by PDL (as a library call
    // would): median of 7, the flags and the counter reset before each (not timed).
    if (quick && H <= sms - 8) {
      prod::Args ad = ar;
      ad.counter = static_cast<uint32_t*>(counter.get());
      ad.early_sms = H;
      ad.early_items = 0;
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0), cudaEventCreate(&e1);
      std::vector<float> ms;
      for (int r = 0; r < 7; ++r) {
        cudaMemsetAsync(ready.get(), 0, size_t(H) * chunks * 4, s1);
        cudaMemsetAsync(counter.get(), 0, 4, s1);
        cudaEventRecord(e0, s1);
        launch_producer(ad, s1);
        launch_consumer<2, true, false>(H, chunks, img.get(), tbimg.get(), tm_v, out.get(),
                                        state.get(), true, ad.ready, s1, nullptr, true);
        cudaEventRecord(e1, s1);
        cudaEventSynchronize(e1);
        float t = 0.0f;
        cudaEventElapsedTime(&t, e0, e1);
        ms.push_back(t);
      }
      cudaEventDestroy(e0), cudaEventDestroy(e1);
      std::sort(ms.begin(), ms.end());
      std::printf("  producer + scan on one stream (PDL): %.4f ms\n", ms[ms.size() / 2]);
    }
    // The producer alone with its items from the counter (a memset in each run), without and
    // with the ready flags.
    for (int flags = 0; quick && flags < 2; ++flags) {
      prod::Args ad = ar;
      ad.ready = flags ? ar.ready : nullptr;
      ad.counter = static_cast<uint32_t*>(counter.get());
      const float ms = fastkda_gpu_test::median_event_ms(
          [&] {
            cudaMemsetAsync(counter.get(), 0, 4);
            launch_producer(ad);
          },
          9);
      std::printf("  producer alone, items from the counter%s: %.4f ms, %.3f SM-us per chunk\n",
                  flags ? ", ready flags" : "", ms, ms * 1000.0 * sms / (double(chunks) * H));
    }
    if (quick) {  // the scan's clock and waits, alone and behind the producer (probe build)
      fastkda_gpu_test::DeviceBuf pr(size_t(H) * 8 * 8);
      for (const bool behind : {false, true}) {
        cudaMemset(pr.get(), 0, size_t(H) * 8 * 8);
        long long* pp = static_cast<long long*>(pr.get());
        std::vector<unsigned long long> sp = {~0ull, 0ull};
        fastkda_gpu_test::DeviceBuf span(sp.data(), 16);
        if (behind)
          delayed(0.0f, pp, static_cast<unsigned long long*>(span.get()));
        else
          launch_consumer<2, true, false>(H, chunks, img.get(), tbimg.get(), tm_v, out.get(),
                                          state.get(), true, nullptr, nullptr, pp);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<long long> c(size_t(H) * 8);
        cudaMemcpy(c.data(), pr.get(), c.size() * 8, cudaMemcpyDeviceToHost);
        double mhz = 0, full = 0, rdy = 0, ns = 0;
        for (int b = 0; b < H; ++b) {
          const double cyc = double(c[8 * b + 3] - c[8 * b + 2]);
          const double dt = double(c[8 * b + 1] - c[8 * b]);
          mhz += cyc / dt * 1000.0 / H, ns += dt / H;
          full += double(c[8 * b + 4]) / cyc / H, rdy += double(c[8 * b + 5]) / cyc / H;
        }
        std::printf("  scan %s: %.4f ms per CTA, %.0f MHz, waits: full %.1f %%, ready %.1f %%\n",
                    behind ? "behind the producer" : "alone", ns * 1e-6, mhz, 100 * full,
                    100 * rdy);
        if (behind) {  // us from the producer's first CTA start
          cudaMemcpy(sp.data(), span.get(), 16, cudaMemcpyDeviceToHost);
          long long s0 = c[0], s1 = c[0], e0 = c[1], e1 = c[1];
          for (int b = 0; b < H; ++b)
            s0 = std::min(s0, c[8 * b]), s1 = std::max(s1, c[8 * b]),
            e0 = std::min(e0, c[8 * b + 1]), e1 = std::max(e1, c[8 * b + 1]);
          const double p0 = double(sp[0]);
          std::printf("  timeline (us): producer end %.1f, scan starts %.1f-%.1f, ends %.1f-%.1f\n",
                      (double(sp[1]) - p0) * 1e-3, (s0 - p0) * 1e-3, (s1 - p0) * 1e-3,
                      (e0 - p0) * 1e-3, (e1 - p0) * 1e-3);
        }
      }
    }
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    if (!quick && H == 32 && T == 16384) {  // mean cycles per step over the CTAs
      fastkda_gpu_test::DeviceBuf pr(size_t(chunks) * H * 8 * 8);
      prod::Args ap = a;
      ap.probe = static_cast<long long*>(pr.get());
      launch_producer(ap);
      std::vector<long long> c(size_t(chunks) * H * 8);
      cudaMemcpy(c.data(), pr.get(), c.size() * 8, cudaMemcpyDeviceToHost);
      double sum[8] = {};
      for (size_t b = 0; b < c.size() / 8; ++b)
        for (int i = 1; i < 7; ++i) sum[i] += double(c[b * 8 + i] - c[b * 8 + i - 1]);
      std::printf(
          "cycles per CTA: loads, norms, gate %.0f, F/H, qs, ke %.0f, A'/A_qk, inverses %.0f, kw "
          "%.0f, "
          "solve + v %.0f, Tb, W / U %.0f\n",
          sum[1] / (c.size() / 8), sum[2] / (c.size() / 8), sum[3] / (c.size() / 8),
          sum[4] / (c.size() / 8), sum[5] / (c.size() / 8), sum[6] / (c.size() / 8));
    }
    if (!quick && H == 32 &&
        T == 16384) {  // variants: one item per CTA / persistent (+ rows staged)
      for (int v = 0; v < 3; ++v) {
        prod::Args av = a;
        av.stage = v == 2;
        const float ms =
            fastkda_gpu_test::median_event_ms([&] { launch_producer(av, nullptr, 0, v >= 1); }, 9);
        std::printf("variant %s: %.4f ms\n",
                    v == 0 ? "item per CTA" : (v == 1 ? "persistent" : "persistent, staged"), ms);
      }
      prod::Args av = a;
      av.hot_mode = 1, av.stage = 0;
      std::printf(
          "variant item per CTA, inputs hot in L2: %.4f ms\n",
          fastkda_gpu_test::median_event_ms([&] { launch_producer(av, nullptr, 0, false); }, 9));
    }
    char name[32];
    std::snprintf(name, sizeof name, "H%d T%d", H, T);
    std::printf("%-16s %9.4f %14.3f %12.4f %12.4f %14.4f %14.4f %14.4f\n", name, pms,
                pms * 1000.0 * sms / (double(chunks) * H), cms, both, b1, b2, b3);
    std::fflush(stdout);
  }
  cudaStreamDestroy(s1), cudaStreamDestroy(s2);
}

}  // namespace
