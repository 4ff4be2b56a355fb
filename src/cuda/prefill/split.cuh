// combine_kernel: the sequential part of the split-T scan (docs/prefill.md "Split T"), between
// its two passes of prefill_kernel. Segment j of a sequence maps its start state to its end state
// affinely, S_end^T = S_start^T M_j + E_j^T (pass 1 computed E_j from a zero start and M_j from
// identity rows; segment 0 from the true start state, so E_0 is the true S_in(1)). Here, per
// sequence n, value head hv and kRows (16 or 32) rows of S^T (rows are independent of each other):
//   S = E_0;  for j = 1 .. nseg - 2:  S = S M_j + E_j, written over E_j (= S_in(j + 1), where
//   pass 2's segment j + 1 reads its start state).
// On tensor cores in 3 x tf32 (x = hi + lo, hi = tf32(x), lo = tf32(x - hi): hi.hi + hi.lo +
// lo.hi per product, ~21 significant bits, f32 accumulation; the emulation in docs/prefill.md:
// an f32 combine loses nothing against the unsplit scan, a tf32 one does). Eight warps, warp w
// owns the 16 key columns 16 w .. 16 w + 15 of S (two m16n8 tiles per 16 rows) for the CTA's
// rows. Its tiles are exactly the A fragments of k steps 2 w and 2 w + 1 of the next product (k slots
// permuted inside each group of 8 as in scan.cuh's acc_to_a: slot t is column 2 t, slot t + 4
// column 2 t + 1), so each warp splits its own tiles once and publishes them as fragments
// (`CombinePlan::a`, double-buffered by step parity): one barrier per step. M_j streams through
// three stages, two steps ahead (two stages, one step ahead, at 32 rows), each one bulk copy (TMA) on an mbarrier: pass 1 stores M_j in
// this stage layout (config.h, combine_m_offset: 16-byte chunks XOR-swizzled by row, so that the
// B fragment loads of rows 2 t, 2 t + 1 of a k step hit 32 distinct banks).
// (Session 17: the f32 FMA version before it read all of M_j from shared memory in every warp,
// ~10 us per step: 155 us of H4 T65536's 0.90 ms; copied by cp.async, 16 bytes per thread and
// request, the tensor-core step took ~2.5 us.) Session 29 (Nsight Compute, three launches each):
// E_j loaded a step ahead and the k loop unrolled, H8 / H4 T65536 31.4 / 62.4 -> 29.5 / 58.0 us;
// then two accumulators per product (k steps 0..7 and 8..15: dependent chains of 8 MMAs) 27.3 /
// 52.3 us, ~1.5 us per step. Its stall samples before that: fixed-latency waits (the MMA chains)
// 31 %, shared-memory loads 23 %, the E_j loads 12 %; per step each CTA reads ~128 KiB of A
// fragments (8 warps x S in hi / lo) and 64 KiB of M_j from shared memory.
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

// Rows of S^T per CTA: 16 (one m16 tile per warp) or, where N x HV x 8 CTAs of 16 rows would
// take more than one wave (one CTA per SM: ~200 KiB of shared memory), 32 (two m16 tiles per
// warp sharing each B fragment, M_j copied once for twice the rows; Plan::combine_rows).
constexpr int kCombineWarps = kK / 16;  // 16 key columns (two n8 tiles) per warp
constexpr int kCombineThreads = 32 * kCombineWarps;
// M_j in flight: j .. j + 2 at 16 rows, j, j + 1 at 32 (the A fragments take twice the space).
template <int kRows>
constexpr int combine_stages() {
  return kRows == 16 ? 3 : 2;
}

template <int kRows>
struct CombinePlan {
  static constexpr int kMt = kRows / 16, kStages = combine_stages<kRows>();
  float m[kStages][kK * kK];          // M_j, swizzled (combine_m_offset)
  uint4 a[2][2][kMt][kK / 8][32];     // [parity][hi / lo][m tile][k step][lane]: S as tf32 A
  uint64_t full[kStages];             // M_j landed in stage j % kStages
};
template <int kRows>
constexpr size_t combine_shared_bytes() {
  return sizeof(CombinePlan<kRows>);
}
static_assert(combine_shared_bytes<16>() <= 227 * 1024 && combine_shared_bytes<32>() <= 227 * 1024,
              "combine kernel shared memory");

__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = device::tf32_rn(x);
  lo = device::tf32_rn(x - __uint_as_float(hi));
}

template <int kRows>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __grid_constant__ PrefillArgs a) {
  using Plan = CombinePlan<kRows>;
  constexpr int kMt = Plan::kMt, kStages = Plan::kStages;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<Plan*>(smem_bytes);
  // Pass 2, launched behind this grid with programmatic stream serialization, may start its CTAs
  // (their prepare reads only the intra records; the scan warps wait for this grid's completion).
  device::griddep_launch_dependents();
  const int64_t n = blockIdx.x / a.HV;
  const int hv = int(blockIdx.x % a.HV);
  const int r0 = blockIdx.y * kRows;
  const int64_t bos = seq_begin(a, n), eos = seq_end(a, n, bos);
  const int nchunks = eos > bos ? int((eos - bos + kC - 1) / kC) : 0;
  const int nseg = seg_count(a, nchunks);
  if (nseg < 3) return;  // S_in(1) = E_0 needs no combining
  const int64_t base = slot_base(bos, n, int64_t(a.seg_chunks) * kC);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) device::mbarrier_init(&sm.full[st], 1);
    device::fence_mbarrier_init();
  }
  __syncthreads();
  auto issue_m = [&](int j) {  // M_j into stage j % kStages, by thread 0
    if (tid == 0 && j <= nseg - 2) {
      uint64_t* full = &sm.full[j % kStages];
      device::mbarrier_arrive_expect_tx(full, kK * kK * sizeof(float));
      device::bulk_load(sm.m[j % kStages], seg_transition(a, base + j, hv),
                        kK * kK * sizeof(float), full);
    }
  };
  // This thread's elements of S (the m16n8 accumulator layout of its warp's tiles): m tile mt,
  // tile j, element i at row r0 + 16 mt + g + 8 (i / 2), column 16 warp + 8 j + 2 t + i % 2.
  auto elem = [&](int64_t slot, int mt, int j, int half) {
    return seg_end(a, slot, hv) + int64_t(r0 + 16 * mt + g + 8 * half) * kK + 16 * warp + 8 * j +
           2 * t;
  };
  auto load_e = [&](int64_t slot, float (&c)[kMt][2][4]) {
    for (int mt = 0; mt < kMt; ++mt)
      for (int j = 0; j < 2; ++j)
        for (int h = 0; h < 2; ++h) {
          const float2 v = *reinterpret_cast<const float2*>(elem(slot, mt, j, h));
          c[mt][j][2 * h] = v.x, c[mt][j][2 * h + 1] = v.y;
        }
  };
  auto publish = [&](int parity, const float (&c)[kMt][2][4]) {  // k steps 2 warp + j
    for (int mt = 0; mt < kMt; ++mt)
      for (int j = 0; j < 2; ++j) {
        uint4 hi, lo;
        split_tf32(c[mt][j][0], hi.x, lo.x);  // a0 (g, slot t)      = column 2 t
        split_tf32(c[mt][j][2], hi.y, lo.y);  // a1 (g + 8, slot t)
        split_tf32(c[mt][j][1], hi.z, lo.z);  // a2 (g, slot t + 4)  = column 2 t + 1
        split_tf32(c[mt][j][3], hi.w, lo.w);  // a3 (g + 8, slot t + 4)
        sm.a[parity][0][mt][2 * warp + j][lane] = hi;
        sm.a[parity][1][mt][2 * warp + j][lane] = lo;
      }
  };

  for (int j = 1; j < kStages; ++j) issue_m(j);
  {
    float s[kMt][2][4];
    load_e(base, s);
    publish(1, s);
  }
  // E_j is loaded one step ahead (its L2 latency exceeds a step's products; same thread, so the
  // load of E_(j + 1) precedes step j + 1's store over it).
  float e_next[kMt][2][4] = {};
  load_e(base + 1, e_next);
  for (int j = 1; j <= nseg - 2; ++j) {
    // Per product two accumulators, k steps 0..7 and 8..15: chains of 8 dependent MMAs, not 16.
    float e[kMt][2][4], acc[kMt][2][2][4] = {}, hl[kMt][2][2][4] = {}, lh[kMt][2][2][4] = {};
    for (int mt = 0; mt < kMt; ++mt)
      for (int jt = 0; jt < 2; ++jt)
        for (int i = 0; i < 4; ++i) e[mt][jt][i] = e_next[mt][jt][i];
    if (j + 1 <= nseg - 2) load_e(base + j + 1, e_next);
    // M_j: stage j % kStages, its ((j - 1) / kStages)-th use (steps start at 1)
    device::mbarrier_wait(&sm.full[j % kStages], ((j - 1) / kStages) & 1);
    // This thread's reads of stage (j - 1) % kStages (step j - 1) before the bulk copy that
    // overwrites it, which thread 0 issues after the barrier.
    device::fence_proxy_async_shared();
    __syncthreads();  // S_in(j) published; stage (j - 1) % kStages free
    issue_m(j + kStages - 1);
    const float* m = sm.m[j % kStages];
#pragma unroll  // whole: hf below must be a constant (unroll 4 with an outer hf loop: +8 to +10 %)
    for (int s = 0; s < kK / 8; ++s) {
      uint32_t ah[kMt][4], al[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        const uint4 h4 = sm.a[j & 1][0][mt][s][lane], l4 = sm.a[j & 1][1][mt][s][lane];
        ah[mt][0] = h4.x, ah[mt][1] = h4.y, ah[mt][2] = h4.z, ah[mt][3] = h4.w;
        al[mt][0] = l4.x, al[mt][1] = l4.y, al[mt][2] = l4.z, al[mt][3] = l4.w;
      }
#pragma unroll
      for (int jt = 0; jt < 2; ++jt) {
        const int col = 16 * warp + 8 * jt + g;
        uint32_t bh0, bl0, bh1, bl1;
        split_tf32(m[combine_m_offset(8 * s + 2 * t, col)], bh0, bl0);
        split_tf32(m[combine_m_offset(8 * s + 2 * t + 1, col)], bh1, bl1);
        const int hf = s / (kK / 16);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          device::mma_m16n8k8_tf32(acc[mt][hf][jt], ah[mt], bh0, bh1);
          device::mma_m16n8k8_tf32(hl[mt][hf][jt], ah[mt], bl0, bl1);
          device::mma_m16n8k8_tf32(lh[mt][hf][jt], al[mt], bh0, bh1);
        }
      }
    }
    float sum[kMt][2][4];
    for (int mt = 0; mt < kMt; ++mt)
      for (int jt = 0; jt < 2; ++jt)
        for (int i = 0; i < 4; ++i)
          sum[mt][jt][i] = (acc[mt][0][jt][i] + acc[mt][1][jt][i]) +
                           ((hl[mt][0][jt][i] + hl[mt][1][jt][i]) +
                            (lh[mt][0][jt][i] + lh[mt][1][jt][i])) +
                           e[mt][jt][i];
    publish((j + 1) & 1, sum);  // step j - 1 read that parity; every thread passed the barrier
    for (int mt = 0; mt < kMt; ++mt)
      for (int jt = 0; jt < 2; ++jt)
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(elem(base + j, mt, jt, h)) =
              make_float2(sum[mt][jt][2 * h], sum[mt][jt][2 * h + 1]);
  }
}

}  // namespace fastkda::prefill_cuda
