// The 64-token WY pipeline of the prefill (Plan::wy64; docs/prefill.md "What would close the
// missed rows", sessions 38-42): a producer kernel makes, for every (chunk of 64 tokens, sequence,
// head), the chunk's operands in WY form (an "image" in the workspace), and a scan kernel launched
// behind it by PDL walks each (sequence, head) through its chunks, reading each image as soon as
// its ready flag is set. Fixed-length batches (T a multiple of 64), HV = H, bf16 g, l2norm'd q / k,
// beta sigmoid or 2 sigmoid, the bounded gate (Plan::wy64 is chosen only for those; plan.cu).
//
// Per chunk of C = 64 tokens (t, s: tokens; G the gate's cumulative log2 decay; F = 2^G,
// H = 2^(G_63 - G); k^, q^ the l2norm'd rows, beta the activated beta):
//   X = (I + N)^-1, N strictly lower: N_ts = beta_t (k^_t F_t) . (k^_s / F_s)
//   Tb = X diag(beta)                     (split bf16, 16 KiB: the Tb image)
//   -W = -Tb (k^ F)                       (f16)
//   qs = scale q^ F (f16), A_qk (t >= s) = scale (q^_t F_t) . (k^_s / F_s)   (split bf16)
//   ke = k^ H                             (split bf16), the decays 2^G_63
// and the scan, per warpgroup of 64 value rows of S^T (f32 registers, chunk to chunk):
//   V_new^T = v^T Tb^T + S^T (-W)^T       4 k16 steps kk x 2 wgmma m64n(64 - 16 kk)k16 bf16 (v^T
//                                         by ldmatrix.trans) + 8 m64n64k16 f16 (A = f16(S^T))
//   O^T = S^T qs^T + V_new^T A_qk^T       8 wgmma m64n64k16 f16 + 4 k16 steps kk x 3
//                                         m64n(64 - 16 kk)k16 bf16 (split)
//   S^T = S^T diag(2^G_63) + V_new^T ke   64 FMUL + 4 k16 steps x 3 wgmma m64n128k16 bf16 (split)
// S^T is kept multiplied by a per-warp power of two (Scale64), so that its f16 products stay in
// f16's range for any input. V_new^T meets A_qk in split bf16 (f32's range), not f16: its size
// depends on the chunk's v, and a scale chosen from the chunk's rows would make a row's rounding
// depend on the rows after it (session 42: A_qk in f16 with such a scale, 11 % faster with the
// scale computed per chunk on the chain, was not causal bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/device/ptx.cuh"
#include "cuda/device/wgmma.cuh"
#include "cuda/prefill/args.h"
#include "cuda/prefill/common.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/scan.cuh"

namespace fastkda::prefill_cuda::wy64 {

using namespace fastkda::device;

constexpr int kChunk = 64;
// The image of one (chunk, sequence, head), in the scan's shared-memory layouts (wgmma's no-swizzle
// K-major core matrices): [-W; qs] f16 (8 k16 steps x 2 k cores x 16 n cores x 128 B), ke bf16 hi
// / lo (4 k16 steps x (hi, lo) x 2 k cores x 16 n cores), A_qk bf16 (triangular, below), the
// decays 2^G_63 (f32 per key); Tb bf16 (triangular), in its own array. Where the tokens t are
// wgmma's N (-W, qs, Tb^T, A_qk^T: P^T's and O^T's columns), their 16-token blocks are in
// reverse order (n core (t / 8) ^ 6): the k16 steps of the triangular Tb^T and A_qk^T then
// multiply only their nonzero blocks, t >= 16 kk, as the leading columns of P^T / O^T, and the
// image holds only those (session 44: the blocks above the diagonal, 3 of 8 m64n64k16 for U^T
// and 4.5 of 12 for the A_qk part, are neither made, stored, loaded nor multiplied).
// Triangular layout: k16 step kk (s in 16 kk ..) holds token blocks 3 .. kk (n cores 0 ..
// 7 - 2 kk, 128 B each) from tri_base(kk), its second k core 1024 B on as in the full layout:
// steps 0, 1, 3, 2 at 0, 2048, 2816, 4096 (a 512-byte gap at 4608); hi, then lo kTriBytes on.
// (Packed without gaps, the steps' k cores 768, 512, 256 B apart: the scan 6 % slower, s44.)
__host__ __device__ constexpr uint32_t tri_base(int kk) {
  return kk == 0 ? 0 : (kk == 1 ? 2048 : (kk == 2 ? 4096 : 2816));
}
constexpr uint32_t kTriBytes = 5632;  // 10 of 16 blocks of 16 x 16
constexpr uint32_t kPqBytes = 32768, kKeBytes = 32768, kAqBytes = 2 * kTriBytes;
constexpr uint32_t kDecayBytes = 512;
constexpr uint32_t kKeOff = kPqBytes, kAqOff = kKeOff + kKeBytes, kDecayOff = kAqOff + kAqBytes;
constexpr uint32_t kImgBytes = kDecayOff + kDecayBytes;
constexpr uint32_t kTbBytes = 2 * kTriBytes;
static_assert(kImgBytes + kTbBytes == kWy64ItemBytes, "config.h: the plan's size per item");
constexpr uint32_t kVBytes = 8192;  // v of a value half: 64 tokens x 128 B, 128-byte swizzle

// The scan CTA's shared memory (two warpgroups, value rows 64 w .. 64 w + 63 each): two stages,
// each in two parts with their own full / empty mbarriers: part 0 (v of both value halves, Tb,
// [-W; qs]; 1024-byte aligned for the swizzled v boxes), read by the products with S^T and free
// once they are done, and part 1 (ke, A_qk, the decays), free at the chunk's end; then the output
// buffer (one chunk's two 64 x 64 boxes, 1024-byte aligned) and the barriers: 222 KiB.
struct Layout {
  static constexpr uint32_t kTbOff = 2 * kVBytes, kPqOff = kTbOff + kTbBytes;  // in part 0
  static constexpr uint32_t kPart0 = kPqOff + kPqBytes;                        // 58 KiB
  static constexpr uint32_t kPart1Bytes = kImgBytes - kPqBytes;                // ke, A_qk, decays
  static constexpr uint32_t kPart1 = (kPart1Bytes + 1023) / 1024 * 1024;
  static constexpr uint32_t kPart1Off = 2 * kPart0, kOutOff = kPart1Off + 2 * kPart1;
  static constexpr uint32_t kBarOff = kOutOff + 2 * kVBytes;  // the outputs: one 16 KiB box pair
  static constexpr uint32_t kSmem = kBarOff + 128;
  static_assert(kSmem <= 227 * 1024, "two stages, the barriers");
  static_assert(kPart0 % 1024 == 0 && kPart1 % 1024 == 0, "the swizzled v and output boxes");
};
// Warp 0: the loader (lane 0), warps 1-3: idle (setmaxnreg moves registers by whole warpgroups;
// a 288-thread CTA gets 168 per thread, session 42), warps 4-11: the two scan warpgroups.
constexpr int kScanThreads = 384;
struct Bars {
  uint64_t full0[2], empty0[2], full1[2], empty1[2];
  uint64_t staged[2];  // the chunk's outputs staged (every scan thread)
  uint64_t out_free;   // the output buffer read by its TMA stores (the loader)
};

// ---- the producer ---------------------------------------------------------------------------

namespace producer {

constexpr int kR = 64, kCols = 128, kThreads = 256;
// f32 [64][128] tiles, XOR-swizzled by row so that mma fragment loads (8 rows x 4 columns) and
// column-wise writes are conflict-free.
__device__ __forceinline__ int sw(int r, int c) { return r * kCols + (c ^ ((r & 7) << 2)); }

struct Smem {
  float kf[kR * kCols];  // k^ F: A' rows, kw / 2^Ga; then Tb and the next item's g rows
  float qf[kR * kCols];  // q^ F: A_qk rows; then kw (split bf16, wgmma B layout)
  float kh[kR * kCols];  // k^ / F: A' / A_qk columns; then X below the diagonal, next k, q rows
  float nb[10][16][16];  // N by 16 x 16 blocks (I, J <= I) at I (I + 1) / 2 + J; then X
  // Rows 0-3: the blocks' gate totals (step 2); then the column factors of A''s pairs other than
  // (I, I) (kPairs' third entry): 2^(Ga_I - Ga_J) per key.
  float cf[7][kCols];
  float pe[4][kCols];  // kw's factors 2^Ga_I / kCompHalf; first the norms' partial sums (8 x 32)
  float rq[kR], rk[kR], beta[kR];
  int next_item;  // taken from PrefillArgs::wy_counter (in step 5: the item after the next)
  int after;      // at the start: the second item
  int pending;    // the previous item's ready flag, released in this item's step 2
};
static_assert(sizeof(Smem) <= 115712, "two CTAs per SM");
// A' / A_qk take raw f32 bits as tf32 operands (truncation); the row norms of q and k carry
// sqrt(1 + 2 kTruncBias), so that every product of two operands is compensated for both
// truncations (the factors of kw, qs and ke take it out again).
constexpr float kCompHalf = 1.00035216f;  // sqrt(1 + 2 x 3.5223e-4)
constexpr float kUncomp = 1.0f / kCompHalf;

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
// cf row: I for (I, I - 1), 4 (2, 0), 5 (3, 1), 6 (3, 0); -1: (I, I), whose factor is 1.
static __constant__ int8_t kPairs[8][2][3] = {{{0, 0, -1}, {-1, 0, 0}}, {{1, 1, -1}, {3, 0, 6}},
                                              {{2, 2, -1}, {-1, 0, 0}}, {{3, 3, -1}, {2, 0, 4}},
                                              {{1, 0, 1}, {-1, 0, 0}},  {{3, 1, 5}, {-1, 0, 0}},
                                              {{2, 1, 2}, {-1, 0, 0}},  {{3, 2, 3}, {-1, 0, 0}}};

// -W (f16) at token r, keys key, key + 1 of the image (qs: r + 64; token blocks reversed).
__host__ __device__ __forceinline__ uint32_t w_offset(int r, int key) {
  return (key / 16) * 4096 + ((key % 16) / 8) * 2048 + ((r / 8) ^ 6) * 128 + (r % 8) * 16 +
         (key % 8) * 2;
}

// The next item's raw q, k, g rows (tensor 0, 1, 2; 64 rows of 256 B each) staged in shared memory
// during this item, each as soon as its space is read no more: q in kh's upper half after step 3
// (A''s columns read), g in k^ F's upper half after step 4 (kw made; Tb takes the lower half),
// k in kh's first 14 KiB (rows 56-63 in nb's first 2 KiB) after step 6 (X read).
__device__ __forceinline__ unsigned char* staged_row(Smem& sm, int tensor, int r) {
  unsigned char* kf = reinterpret_cast<unsigned char*>(sm.kf);
  unsigned char* kh = reinterpret_cast<unsigned char*>(sm.kh);
  unsigned char* nb = reinterpret_cast<unsigned char*>(sm.nb);
  return tensor == 0   ? kh + 16384 + 256 * r
         : tensor == 1 ? (r < 56 ? kh + 256 * r : nb + 256 * (r - 56))
                       : kf + 16384 + 256 * r;
}
// Rows r0, r0 + step, ... (n of them) of tensor `tensor` (q, k, g: bf16) of the item at token
// tok0, head h, 16-byte piece ch of each, by cp.async.
__device__ __forceinline__ void stage_rows(const PrefillArgs& a, Smem& sm, int64_t tok0, int h,
                                           int tensor, int r0, int step, int n, int ch) {
  const int64_t stride = tensor == 0 ? a.q_stride : (tensor == 1 ? a.k_stride : a.g_stride);
  const uint16_t* base =
      tensor == 0 ? a.q : (tensor == 1 ? a.k : static_cast<const uint16_t*>(a.g));
  const uint16_t* src = base + (tok0 + r0) * stride + h * kCols + 8 * ch;
#pragma unroll
  for (int i = 0; i < n; ++i, src += step * stride)
    cp_async_cg_16(staged_row(sm, tensor, r0 + i * step) + 16 * ch, src, 16);
}

__global__ void __launch_bounds__(kThreads, 2)
    producer_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane / 4, t = lane & 3;
  __builtin_assume(tid >= 0 && tid < kThreads);  // no sign fix-ups in the index arithmetic
  // Items (chunk, sequence, head), chunk-major, taken in order from a.wy_counter by persistent
  // CTAs (a grid of what the SMs hold at once), each staging its next item's q, k, g rows in
  // shared memory during the item (session 39, H32 T16384: one item per CTA 0.581 ms,
  // persistent 0.599, staged 0.553; session 44: each as soon as its space is free, below). The CTAs on SMs < a.wy_idle_sms take none: the scan, launched behind this
  // kernel, takes those SMs (session 41). Unless every CTA of the grid landed there (another
  // kernel holding the other SMs; wy_counter[1] counts them): then the last one makes every item,
  // since the scan waits for them and the producer must never wait for the scan.
  const int heads = int(a.num_seq) * a.H, items = a.wy_chunks * heads;  // <= 2^31 - 1 (host)
  auto take = [&]() {                                                   // one thread
    const int it = int(atomicAdd(a.wy_counter, 1u));
    return it < items ? it : -1;
  };
  if (tid == 0) {
    const bool idle = int(sm_id()) < a.wy_idle_sms &&
                      atomicAdd(a.wy_counter + 1, 1u) + 1 < gridDim.x;  // not the last idle one
    const int first = idle ? -1 : take();
    sm.next_item = first;
    sm.after = first >= 0 ? take() : -1;
  }
  __syncthreads();
  griddep_launch_dependents();  // the scan launched behind it by PDL may start
  // This item and the next (whose rows this item stages); warp 7 takes the one after in step 5.
  int next = sm.after;
#pragma unroll 1
  for (int round = 0, item = sm.next_item; item >= 0; ++round) {
    __builtin_assume(item >= 0 && a.H > 0 && heads > 0);
    const int c = item / heads, bh = item - c * heads, h = bh % a.H;
    const int64_t tok0 = int64_t(bh / a.H) * a.T + int64_t(c) * kR;
    const int flag = bh * a.wy_chunks + c;  // the item's image, Tb and ready flag
    unsigned char* img = a.wy_img + size_t(flag) * kImgBytes;
    unsigned char* tbimg = a.wy_tb + size_t(flag) * kTbBytes;
    const bool stage_next = next >= 0;
    const int nc = stage_next ? next / heads : 0, nbh = stage_next ? next - nc * heads : 0;
    const int nh = nbh % a.H;
    const int64_t ntok0 = int64_t(nbh / a.H) * a.T + int64_t(nc) * kR;

    // 1. Thread (column pair cp, row block qb) loads its 16 rows of q, k, g (columns 2 cp,
    // 2 cp + 1) from shared memory, where the previous item staged them (stage_next), or else
    // this item stages them now (one load path: fewer live registers).
    const int cp = tid % 64, qb = tid / 64;
    if (round == 0) {
      stage_rows(a, sm, tok0, h, 1, tid / 16, 16, 4, tid % 16);
      stage_rows(a, sm, tok0, h, 2, tid / 16, 16, 4, tid % 16);
      stage_rows(a, sm, tok0, h, 0, tid / 16, 16, 4, tid % 16);
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
    if (tid < kR) sm.beta[tid] = beta_activation(a, load_beta_raw(a, tok0, tid, kR, h));
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
      const float cc = -gate_A(a, h) * kLog2e;
      const float* dtb = a.dt_bias ? a.dt_bias + int64_t(h) * kCols + 2 * cp : nullptr;
      const float bc0 = dtb ? dtb[0] * cc : 0.0f, bc1 = dtb ? dtb[1] * cc : 0.0f;
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
    if (round > 0 && tid == 7 * 32) red_release_add(&a.wy_ready[sm.pending], 1u);
    if (tid < 2 * kR) {  // row tid % 64 of q (tid < 64) or k: its block's two warp partials
      const int r = tid % kR, idx = r % 16 + (tid < kR ? 0 : 16), w0 = 2 * (r / 16);
      const float ss = (&sm.pe[0][0])[w0 * 32 + idx] + (&sm.pe[0][0])[(w0 + 1) * 32 + idx];
      (tid < kR ? sm.rq : sm.rk)[r] =
          rsqrt_approx(ss + 1e-6f) * (tid < kR ? a.scale : 1.0f) * kCompHalf;
    }
    float ga0 = 0.0f, ga1 = 0.0f, gl0 = 0.0f, gl1 = 0.0f;  // Ga of this block; G_63
    float2 tot[3];                                         // the totals of blocks 0-2
#pragma unroll
    for (int I = 0; I < 4; ++I) {
      const float2 ti = *reinterpret_cast<const float2*>(&sm.cf[I][2 * cp]);
      if (I < 3) tot[I] = ti;
      if (I < qb) ga0 += ti.x, ga1 += ti.y;
      gl0 += ti.x, gl1 += ti.y;
    }
    const float pa0 = ex2_approx(ga0), pa1 = ex2_approx(ga1);  // 2^Ga
    __syncthreads();
    {
      // The operands of A' / A_qk / W in shared memory, and straight to the image: qs (f16 pairs of
      // keys 2 cp, 2 cp + 1) = scale q^ F 2^Ga, ke (bf16 hi / lo, 8 tokens of a key per 16 bytes)
      // = k^ H 2^(G_63 - Gend). Both row norms carry kCompHalf: the factors take it out. A''s
      // column operand is k^ / F (<= 2^115 with the bounded gate's 16 rows of >= -5 each), not
      // k^ H: H anchors at the block's end, and A''s rows before t would round with the gates of
      // the rows after them (session 42: not causal bit for bit).
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
        const float R0 = ex2_approx(-G[i][0]), R1 = ex2_approx(-G[i][1]);  // 1 / F
        const uint32_t k2 = k2s[i], q2 = q2s[i];
        const float k0 = bf(k2 & 0xffff) * rk, k1 = bf(k2 >> 16) * rk;
        const float q0 = bf(q2 & 0xffff) * rq * F0, q1 = bf(q2 >> 16) * rq * F1;
        const float kh0v = k0 * H0, kh1v = k1 * H1, kf0 = k0 * F0, kf1 = k1 * F1;
        const int o = sw(r, 2 * cp);
        *reinterpret_cast<float2*>(&sm.kf[o]) = make_float2(kf0, kf1);
        *reinterpret_cast<float2*>(&sm.qf[o]) = make_float2(q0, q1);
        *reinterpret_cast<float2*>(&sm.kh[o]) = make_float2(k0 * R0, k1 * R1);
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
    // Every block's total read: cf becomes A''s column factors 2^(Ga_I - Ga_J) (tot_I = Gend_I -
    // Ga_I <= 0): 2^tot_{I-1} for (I, I - 1), 2^(tot_0 + tot_1) for (2, 0), 2^(tot_1 + tot_2) for
    // (3, 1), 2^(tot_0 + tot_1 + tot_2) for (3, 0): the gates before block I only. Then 2^Ga
    // (kw's column factors) and the decays 2^G_63.
    __syncthreads();
    {
      *reinterpret_cast<float2*>(&sm.pe[qb][2 * cp]) = make_float2(pa0 * kUncomp, pa1 * kUncomp);
      auto put = [&](int row, float x0, float x1) {
        *reinterpret_cast<float2*>(&sm.cf[row][2 * cp]) = make_float2(x0, x1);
      };
      if (qb < 3) put(qb + 1, ex2_approx(G[15][0]), ex2_approx(G[15][1]));  // tot_qb
      if (qb == 0) put(4, ex2_approx(tot[0].x + tot[1].x), ex2_approx(tot[0].y + tot[1].y));
      if (qb == 1) put(5, ex2_approx(tot[1].x + tot[2].x), ex2_approx(tot[1].y + tot[2].y));
      if (qb == 2)
        put(6, ex2_approx(tot[0].x + tot[1].x + tot[2].x),
            ex2_approx(tot[0].y + tot[1].y + tot[2].y));
      if (qb == 0)
        *reinterpret_cast<float2*>(img + kDecayOff + 8 * cp) =
            make_float2(ex2_approx(gl0), ex2_approx(gl1));
    }
    __syncthreads();
    // 3. A' and A_qk by (row block I, column block J <= I) pairs, both n8 tiles at once (one A
    // fragment for both); operands as raw f32 bits (tf32 truncation), the column operand k^ / F
    // times the pair's column factor from cf (none for (I, I)).
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
        unsigned char* aqp = img + kAqOff + tri_base(J) + (3 - I) * 256 + g * 16 + 4 * t;
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
            uint32_t hi, lo;
            split_bf16x2(q0, q1, hi, lo);
            *reinterpret_cast<uint32_t*>(aqp + n * 1024 + e * 128) = hi;
            *reinterpret_cast<uint32_t*>(aqp + kTriBytes + n * 1024 + e * 128) = lo;
          }
        }
        // X_II = (I + N_II)^-1 in place, by forward substitution, two blocks per warp: warp 0
        // inverts blocks 0 and 1, warp 2 blocks 2 and 3 (lane l: block warp + l / 16, column l %
        // 16), once warps 1 / 3 have made N_11 / N_33 (a CTA barrier after every warp's first
        // pair; session 42: a named barrier per warp pair, which compute-sanitizer's racecheck
        // did not follow, reported hazards across the later __syncthreads); warps 1 / 3 go on to a
        // second pair.
        if (jb == 0) __syncthreads();  // every warp's first pair: the diagonal N blocks made
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
    // (A_qk's blocks above the diagonal, I < J, are not written: the scan skips them.)
    __syncthreads();
    if (stage_next) {  // the next item's q rows over A''s columns (read)
      stage_rows(a, sm, ntok0, nh, 0, tid / 16, 16, 4, tid % 16);
      cp_async_commit_group();
    }
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
      if (stage_next) {  // the next item's g rows over k^ F's upper half (kw made)
        stage_rows(a, sm, ntok0, nh, 2, tid / 16, 16, 4, tid % 16);
        cp_async_commit_group();
      }
      if (warp == 3) acc(2, 1, 0), fin(2, 0);
      if (warp == 4) acc(3, 2, 1), fin(3, 1);
      if (warp == 5) acc(2, 1, 0), fin_to(xblock(3, 2), xoff + off_index(3, 0) * 256);
      if (warp == 6) acc(3, 1, 0), fin_to(xblock(3, 3), xoff + 6 * 256);
      // Warp 7 has no target: it takes the item after the next (the atomic's latency off the
      // other warps' path; read after step 6's barrier).
      if (warp == 7 && lane == 0) sm.next_item = take();
    }
    __syncthreads();
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
      if (J <= I) {  // the image: triangular, token blocks reversed
        const uint32_t img_off = tri_base(J) + (s8 % 2) * 1024 + ((r / 8) ^ 6) * 128 + (r % 8) * 16;
        *reinterpret_cast<uint4*>(tbimg + img_off) = hi;
        *reinterpret_cast<uint4*>(tbimg + kTriBytes + img_off) = lo;
      }
    }
    fence_proxy_async_shared();  // Tb is read by wgmma
    __syncthreads();
    const int after = sm.next_item;  // taken by warp 7 in step 5
    if (stage_next) {                // the next item's k rows over X (read)
      stage_rows(a, sm, ntok0, nh, 1, tid / 16, 16, 4, tid % 16);
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
      // -W (f16 pairs): rows 16 w + g (+ 8), keys 8 j + 2 t of n8 tile j.
      unsigned char* wb = img + (3 - warp) * 256 + g * 16 + 4 * t;
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          *reinterpret_cast<uint32_t*>(wb + (j / 2) * 4096 + (j % 2) * 2048 + e * 128) =
              pack_f16x2(-aw[4 * j + 2 * e], -aw[4 * j + 2 * e + 1]);
    }
    if (stage_next) cp_async_wait_group<0>();
    __syncthreads();  // the next item's step 2 writes over kw and Tb; its rows have landed
    if (tid == 0) {   // the last item's flag at once, the others in the next item's step 2
      if (next >= 0)
        sm.pending = flag;
      else
        red_release_add(&a.wy_ready[flag], 1u);
    }
    item = next, next = after;
  }
}

}  // namespace producer

// x * y for two bf16 pairs (rounded to nearest: exact for a power-of-two y in bf16's range).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t x, uint32_t y) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(x), "r"(y));
  return d;
}
// Warp max of |x| over this lane's n values (n = 32 or 64; a tree: log2 levels of latency).
template <int n>
__device__ __forceinline__ float warp_absmax(const float (&x)[n]) {
  float m[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    m[j] = fmaxf(fmaxf(fabsf(x[4 * j]), fabsf(x[4 * j + 1])),
                 fmaxf(fabsf(x[4 * j + 2]), fabsf(x[4 * j + 3])));
    if constexpr (n == 64)
      m[j] = fmaxf(m[j], fmaxf(fmaxf(fabsf(x[32 + 4 * j]), fabsf(x[33 + 4 * j])),
                               fmaxf(fabsf(x[34 + 4 * j]), fabsf(x[35 + 4 * j]))));
  }
  const float m4 = fmaxf(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])),
                         fmaxf(fmaxf(m[4], m[5]), fmaxf(m[6], m[7])));
  return __uint_as_float(redux_max_u32(__float_as_uint(m4)));  // NaN: the largest bits
}

// The f16 operands' scale (per warp, its 16 value rows of S^T): the warp keeps S'^T = S^T 2^sigma
// in its registers and a bound >= ||s'_j|| for its rows j; f16(S'^T) is exact to f16's precision
// while the bound stays in [2^-4, 2^14] (every element below 2^14, f16's largest is 65504). v
// enters as v 2^sigma (exact: a power of two, bf16 has f32's range), so V_new'^T, the state
// update and O'^T all carry 2^sigma (the output is scaled back). The bound is updated once per
// chunk from max |S'^T| at its start (x sqrt(128)) and the chunk's growth (<= 64 max |V_new'^T|:
// unit keys, decays <= 1); when it leaves the window, S'^T is rescaled before the next chunk's
// products (sigma in [-60, 60], 60 for a zero state). A function of the rows before each chunk:
// causal bit for bit.
struct Scale64 {
  int sigma = 0;
  float up = 1.0f, down = 1.0f;
  // The bound for the next chunk, in the current scale; move S'^T when it left the window.
  __device__ __forceinline__ void update(float bound, float (&S)[64]) {
    if (bound >= 0x1p-4f && bound <= 0x1p14f) return;  // warp-uniform (NaN: moves, stays NaN)
    const int e = int((__float_as_uint(bound) >> 23) & 0xffu) - 127;  // floor(log2), -127 for 0
    const int target = min(60, max(-60, sigma + 12 - e));
    const int d = target - sigma;  // |d| <= 120: two factors of 2^(d / 2)
    const float f1 = exp2i(d / 2), f2 = exp2i(d - d / 2);
#pragma unroll
    for (int i = 0; i < 64; ++i) S[i] = S[i] * f1 * f2;
    sigma = target, up = exp2i(sigma), down = exp2i(-sigma);
  }
};

// Grid: num_seq x H CTAs of kScanThreads (warp 0: loader and output store, warps 4-11: the two
// scan warpgroups). tm_v: v as [B T][H 128] bf16 in boxes of 64 tokens x 64 values, 128-byte
// swizzle; tm_out: out in the same boxes. The caller's start and final states as the other
// scans (state_indices: a slot, an invalid one neither).
__global__ void __launch_bounds__(kScanThreads, 1)
    scan_kernel(const __grid_constant__ PrefillArgs a) {
  using L = Layout;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto& bars = *reinterpret_cast<Bars*>(smem + L::kBarOff);
  const int bh = int(blockIdx.x), n = bh / a.H, h = bh % a.H, chunks = a.wy_chunks;
  const int64_t tok_base = int64_t(n) * a.T;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      mbarrier_init(&bars.full0[i], 1), mbarrier_init(&bars.empty0[i], 256);
      mbarrier_init(&bars.full1[i], 1), mbarrier_init(&bars.empty1[i], 256);
      mbarrier_init(&bars.staged[i], 256);
    }
    mbarrier_init(&bars.out_free, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 128) {
    setmaxnreg_dec<56>();    // 384 x 168 registers: 128 x 56 + 256 x 224
    if (threadIdx.x < 32) {  // loader (and output store): warp 0, lane 0
      // Chunk c's outputs, staged in the output buffer: two TMA stores; the buffer is free again
      // once they have read it.
      auto store_outputs = [&](int c) {
        mbarrier_wait(&bars.staged[c & 1], (c >> 1) & 1);
#pragma unroll
        for (int w = 0; w < 2; ++w)
          tma_store_2d(&a.tm_out, 128 * h + 64 * w, int(tok_base + kChunk * c),
                       smem + L::kOutOff + w * kVBytes);
        bulk_commit_group();
        bulk_wait_group_read<0>();
        mbarrier_arrive(&bars.out_free);
      };
      if (lane == 0) {
        for (int c = 0; c < chunks; ++c) {
          const int s = c & 1, par = ((c >> 1) - 1) & 1;
          // The image's part 0 (just made: from L2) once it is ready, with v (an input, prefetched
          // into L2 a stage ahead: chunks 0 and 1 at the start, then chunk c + 1); part 1; then
          // chunk c - 2's outputs (staged once chunk c - 1's products are issued).
          if (c >= 2) mbarrier_wait(&bars.empty0[s], par);
          unsigned char* p0 = smem + s * L::kPart0;
          mbarrier_arrive_expect_tx(&bars.full0[s], L::kPart0);
          for (int cc = c == 0 ? 0 : c + 1; cc <= c + 1 && cc < chunks; ++cc)  // v into L2
#pragma unroll
            for (int w = 0; w < 2; ++w)
              tma_prefetch_2d(&a.tm_v, 128 * h + 64 * w, int(tok_base + kChunk * cc));
          const int item = bh * chunks + c;
          while (ld_acquire(&a.wy_ready[item]) == 0) {
          }
          fence_proxy_async_global();
          const unsigned char* img = a.wy_img + size_t(item) * kImgBytes;
          bulk_load(p0 + L::kTbOff, a.wy_tb + size_t(item) * kTbBytes, kTbBytes, &bars.full0[s]);
          bulk_load(p0 + L::kPqOff, img, kPqBytes, &bars.full0[s]);
#pragma unroll
          for (int w = 0; w < 2; ++w)
            tma_load_2d(p0 + w * kVBytes, &a.tm_v, 128 * h + 64 * w, int(tok_base + kChunk * c),
                        &bars.full0[s]);
          if (c >= 2) mbarrier_wait(&bars.empty1[s], par);
          mbarrier_arrive_expect_tx(&bars.full1[s], L::kPart1Bytes);
          bulk_load(smem + L::kPart1Off + s * L::kPart1, img + kKeOff, L::kPart1Bytes,
                    &bars.full1[s]);
          // The next chunk's image into L2 if it is made already (the producer runs ahead and
          // its images leave L2): session 43, H32 -1.8 / -3.7 / -4.6 % at T4096 / 16384 / 65536.
          if (c + 1 < chunks && ld_acquire(&a.wy_ready[item + 1]) != 0) {
            bulk_prefetch_l2(img + kImgBytes, kImgBytes);
            bulk_prefetch_l2(a.wy_tb + size_t(item + 1) * kTbBytes, kTbBytes);
          }
          if (c >= 2) store_outputs(c - 2);
        }
        for (int c = max(chunks - 2, 0); c < chunks; ++c) store_outputs(c);
        bulk_wait_group<0>();
      }
    }
    return;
  }
  setmaxnreg_inc<224>();
  const int tid = int(threadIdx.x) - 128, wg = tid / 128, warp = (tid / 32) % 4, t = lane & 3;
  const int row0 = 64 * wg + 16 * warp;  // this warp's first value row of S^T
  const UserStates user = user_states(a, n, h);  // the caller's start and final states
  const StateRef init = user.init, fin = user.final;
  float S[64], O[32];  // S'^T = S^T 2^sigma (sc), O'^T (token blocks reversed: O[8 J..] 3 - J)
  {
    float s4[16][4];
    load_state<16>(init, false, row0, 0, s4);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int f = 0; f < 4; ++f) S[4 * j + f] = s4[j][f];
  }
  Scale64 sc;
  sc.update(11.32f * warp_absmax<64>(S), S);
  // v^T's A fragments by ldmatrix.trans from the swizzled box: matrix mi = lane / 8 holds values
  // + 8 (mi % 2) of the warp's 16, tokens + 8 (mi / 2) of the k16 step; lane gives token row
  // lane % 8 of it (16-byte piece 2 warp + mi % 2 of the row, XOR the row's index mod 8).
  const uint32_t v_lane = uint32_t((8 * (lane / 16) + lane % 8) * 128 +
                                   16 * ((2 * warp + (lane / 8) % 2) ^ (lane % 8)));
  // out <- bf16(O'^T 2^-sigma) of chunk c: staged by stmatrix in this warpgroup's half of the
  // output buffer (transposed: token rows of 64 values, the TMA box's 128-byte swizzle, the
  // addresses of v's ldmatrix), then stored by the loader thread (two TMA stores). (Session 42
  // stored 4 bytes per lane straight from the accumulators, 16 stores per warp and chunk over 8
  // token rows each; session 43: staged, H32 -3.6 to -4.3 %, over the v half of the chunk's
  // stage, whose next v then waited for the stores; session 44: a buffer of its own, v loaded with
  // the image's part 0, ~1.5 chunks ahead.) The stores are released to the loader
  // (release_out: the proxy fence, then the staged barrier) once the next chunk's products are
  // issued: the fence waits for the stmatrix to land, off the chain between the two chunks.
  auto stage_out = [&](const float(&o)[32], int c) {
    if (c > 0) mbarrier_wait(&bars.out_free, (c - 1) & 1);  // chunk c - 1's stores read it
    unsigned char* stage = smem + L::kOutOff + wg * kVBytes;
#pragma unroll
    for (int J = 0; J < 4; ++J)
      stmatrix_x4_trans(stage + v_lane + 2048 * (3 - J),
                        pack_bf16x2(o[8 * J] * sc.down, o[8 * J + 1] * sc.down),
                        pack_bf16x2(o[8 * J + 2] * sc.down, o[8 * J + 3] * sc.down),
                        pack_bf16x2(o[8 * J + 4] * sc.down, o[8 * J + 5] * sc.down),
                        pack_bf16x2(o[8 * J + 6] * sc.down, o[8 * J + 7] * sc.down));
  };
  auto release_out = [&](int c) {
    fence_proxy_async_shared();
    mbarrier_arrive(&bars.staged[c & 1]);
  };
  for (int c = 0; c < chunks; ++c) {
    const int s = c & 1;
    const unsigned char* p0 = smem + s * L::kPart0;
    const unsigned char* p1 = smem + L::kPart1Off + s * L::kPart1;
    mbarrier_wait(&bars.full0[s], (c >> 1) & 1);
    // A = f16(S'^T) for 8 k16 steps over the keys (accumulator tiles 2 kk, 2 kk + 1).
    // Their largest |f16| (in the bound below: read from S'^T itself while wgmmas are in flight,
    // ptxas waits for them first, C7517).
    uint32_t af[8][4], amax = 0;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        af[kk][r] = pack_f16x2(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
        amax = __vmaxu2(amax, af[kk][r] & 0x7fff7fffu);
      }
    const SmemDesc dw = smem_desc_noswizzle(p0 + L::kPqOff, 2048, 128);  // -W; qs: + 1024 B
    const SmemDesc dt = smem_desc_noswizzle(p0 + L::kTbOff, 1024, 128);  // triangular
    // V_new'^T = S'^T (-W)^T + (v^T 2^sigma) Tb^T: f16 S'^T and W, split Tb (v is exact in bf16).
    float P[32];  // token blocks reversed, as O'^T
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) wgmma_m64n64k16_rs<false>(P, af[kk], dw + 256 * kk, kk > 0);
    uint32_t av[4][4];
    const uint32_t up2 = pack_bf16x2(sc.up, sc.up);
#pragma unroll
    for (int J = 0; J < 4; ++J) {
      ldmatrix_x4_trans(p0 + wg * kVBytes + v_lane + 2048 * J, av[J]);
#pragma unroll
      for (int r = 0; r < 4; ++r) av[J][r] = mul_bf16x2(av[J][r], up2);
    }
    wgmma_fence();  // av written after the first wgmmas were issued
#pragma unroll
    for (int J = 0; J < 4; ++J) {  // tokens t >= 16 J only (Tb lower triangular): 4 - J blocks
      const SmemDesc dtj = dt + tri_base(J) / 16;
      wgmma_m64n64k16_bf16_rs_first(P, av[J], dtj + kTriBytes / 16, 4 - J);  // lo
      wgmma_m64n64k16_bf16_rs_first(P, av[J], dtj, 4 - J);
    }
    wgmma_commit_group();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) wgmma_m64n64k16_rs<false>(O, af[kk], dw + 64 + 256 * kk, kk > 0);
    wgmma_commit_group();
    if (c > 0) release_out(c - 1);
    // sqrt(128) max |S'^T| (f16 rounding: x (1 + 2^-10) at most), in the products' shadow.
    const float bound_s =
        11.33f *
        __half2float(__ushort_as_half(uint16_t(redux_max_u32(max(amax >> 16, amax & 0xffffu)))));
    wgmma_wait_group<1>();
    wgmma_fence_operands(P);
    mbarrier_wait(&bars.full1[s], (c >> 1) & 1);
    const float* dec = reinterpret_cast<const float*>(p1 + kDecayOff - kKeOff);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(&dec[8 * j + 2 * t]);
      S[4 * j + 0] *= d.x;
      S[4 * j + 1] *= d.y;
      S[4 * j + 2] *= d.x;
      S[4 * j + 3] *= d.y;
    }
    // V_new'^T split bf16 for the state update and O'^T's A_qk part.
    uint32_t vh[4][4], vl[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        split_bf16x2(P[8 * (3 - kk) + 2 * r], P[8 * (3 - kk) + 2 * r + 1], vh[kk][r], vl[kk][r]);
    const SmemDesc dk = smem_desc_noswizzle(p1, 2048, 128);                    // 8 KiB / k16
    const SmemDesc dq = smem_desc_noswizzle(p1 + kAqOff - kKeOff, 1024, 128);  // triangular
    wgmma_fence_operands(S);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_m64n128k16_bf16_rs(S, vl[kk], dk + 512 * kk, true);
      wgmma_m64n128k16_bf16_rs(S, vh[kk], dk + 512 * kk + 256, true);
      wgmma_m64n128k16_bf16_rs(S, vh[kk], dk + 512 * kk, true);
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // lower triangular as Tb
      const SmemDesc dqk = dq + tri_base(kk) / 16;
      wgmma_m64n64k16_bf16_rs_first(O, vl[kk], dqk, 4 - kk);
      wgmma_m64n64k16_bf16_rs_first(O, vh[kk], dqk + kTriBytes / 16, 4 - kk);
      wgmma_m64n64k16_bf16_rs_first(O, vh[kk], dqk, 4 - kk);
    }
    wgmma_commit_group();
    // The next chunk's bound, in the state update's shadow.
    const float bound = fmaf(64.0f, warp_absmax<32>(P), bound_s);
    wgmma_wait_group<1>();  // the products with S'^T (part 0's readers) are done
    mbarrier_arrive(&bars.empty0[s]);
    wgmma_wait_group<0>();
    wgmma_fence_operands(S);
    wgmma_fence_operands(O);
    mbarrier_arrive(&bars.empty1[s]);
    stage_out(O, c);
    sc.update(bound, S);
  }
  if (chunks > 0) release_out(chunks - 1);
  if (fin.ptr) {
    float s4[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int f = 0; f < 4; ++f) s4[j][f] = S[4 * j + f];
    store_state<false, 16>(fin, row0, 0, s4, sc.down);
  }
}

}  // namespace fastkda::prefill_cuda::wy64
