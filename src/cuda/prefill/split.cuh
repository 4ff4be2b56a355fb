// combine_kernel: the sequential part of the split-T scan (docs/prefill.md "Split T"), between
// its two passes of prefill_kernel. Segment j of a sequence maps its start state to its end state
// affinely, S_end^T = S_start^T M_j + E_j^T (pass 1 computed E_j from a zero start and M_j from
// identity rows; segment 0 from the true start state, so E_0 is the true S_in(1)). Here, per
// sequence n, value head hv and 16 rows of S^T:
//   S = E_0;  for j = 1 .. nseg - 2:  S = S M_j + E_j, written over E_j (= S_in(j + 1), where
//   pass 2's segment j + 1 reads its start state).
// f32 FMAs (the emulation in docs/prefill.md: no loss against the unsplit scan); M_{j+1} loads
// (cp.async) while step j computes. 256 threads: thread = (row r, 8 consecutive key columns).
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

constexpr int kCombineRows = 16;      // rows of S^T per CTA
constexpr int kCombineThreads = 256;  // kCombineRows x 16 column groups of 8
constexpr int kLdCombine = kK + 4;

struct CombinePlan {
  float m[2][kK][kK];                 // M_j, M_{j+1} (double buffer)
  float s[kCombineRows][kLdCombine];  // S: this CTA's rows of S_in(j)
};
constexpr size_t combine_shared_bytes() { return sizeof(CombinePlan); }
static_assert(combine_shared_bytes() <= 227 * 1024, "combine kernel shared memory");

__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<CombinePlan*>(smem_bytes);
  const int64_t n = blockIdx.x / a.HV;
  const int hv = int(blockIdx.x % a.HV);
  const int r0 = blockIdx.y * kCombineRows;
  const int64_t bos = seq_begin(a, n), eos = seq_end(a, n, bos);
  const int nchunks = eos > bos ? int((eos - bos + kC - 1) / kC) : 0;
  const int nseg = (nchunks + a.seg_chunks - 1) / a.seg_chunks;
  if (nseg < 3) return;  // S_in(1) = E_0 needs no combining
  const int64_t base = slot_base(bos, n, int64_t(a.seg_chunks) * kC);

  const int tid = threadIdx.x, r = tid / 16, col = (tid % 16) * 8;
  auto issue_m = [&](int j) {  // M_j into m[j & 1]: 16 copies of 16 bytes per thread
    if (j <= nseg - 2) {
      const float* src = seg_transition(a, base + j, hv);
      float* dst = &sm.m[j & 1][0][0];
      for (int e = tid; e < kK * kK / 4; e += kCombineThreads)
        device::cp_async_cg_16(dst + 4 * e, src + 4 * e, 16);
    }
    device::cp_async_commit_group();  // always one group, so wait_group<1> counts right
  };
  auto row_of = [&](int64_t slot) { return seg_end(a, slot, hv) + int64_t(r0 + r) * kK + col; };

  issue_m(1);
  {
    const float* e0 = row_of(base);
    *reinterpret_cast<float4*>(&sm.s[r][col]) = *reinterpret_cast<const float4*>(e0);
    *reinterpret_cast<float4*>(&sm.s[r][col + 4]) = *reinterpret_cast<const float4*>(e0 + 4);
  }
  for (int j = 1; j <= nseg - 2; ++j) {
    issue_m(j + 1);
    float* e = row_of(base + j);
    float acc[8];
    *reinterpret_cast<float4*>(&acc[0]) = *reinterpret_cast<const float4*>(e);
    *reinterpret_cast<float4*>(&acc[4]) = *reinterpret_cast<const float4*>(e + 4);
    device::cp_async_wait_group<1>();
    __syncthreads();  // M_j landed for every thread; S rows of step j - 1 written
    const float(&m)[kK][kK] = sm.m[j & 1];
#pragma unroll 8
    for (int k = 0; k < kK; ++k) {
      const float s = sm.s[r][k];
      const float4 x0 = *reinterpret_cast<const float4*>(&m[k][col]);
      const float4 x1 = *reinterpret_cast<const float4*>(&m[k][col + 4]);
      acc[0] = fmaf(s, x0.x, acc[0]);
      acc[1] = fmaf(s, x0.y, acc[1]);
      acc[2] = fmaf(s, x0.z, acc[2]);
      acc[3] = fmaf(s, x0.w, acc[3]);
      acc[4] = fmaf(s, x1.x, acc[4]);
      acc[5] = fmaf(s, x1.y, acc[5]);
      acc[6] = fmaf(s, x1.z, acc[6]);
      acc[7] = fmaf(s, x1.w, acc[7]);
    }
    __syncthreads();  // every thread is done reading S and m[j & 1]
    *reinterpret_cast<float4*>(&sm.s[r][col]) = *reinterpret_cast<const float4*>(&acc[0]);
    *reinterpret_cast<float4*>(&sm.s[r][col + 4]) = *reinterpret_cast<const float4*>(&acc[4]);
    *reinterpret_cast<float4*>(e) = *reinterpret_cast<const float4*>(&acc[0]);
    *reinterpret_cast<float4*>(e + 4) = *reinterpret_cast<const float4*>(&acc[4]);
  }
  device::cp_async_wait_group<0>();
}

}  // namespace fastkda::prefill_cuda
