// order_kernel: the varlen sequences by descending length (ties by index), so that the scan
// kernel's CTAs of long sequences start first. With more CTAs than SMs and skewed lengths, CTAs in
// sequence order leave the longest sequence for last (a tail of one CTA per SM); longest first is
// list scheduling's LPT rule, whose makespan stays near the average load (model of the benchmark's
// varlen "six" batch at H64: 915 -> 679 us, docs/prefill.md).
//
// rank(n) = #{m : len_m > len_n, or len_m == len_n and m < n} is a permutation of 0 .. N - 1 for
// any lengths (also unchecked device cu_seqlens); order[rank(n)] = n. Thread = sequence n; the
// lengths stream through shared memory in tiles of kOrderThreads: O(N^2) comparisons, so only for
// N <= kOrderMaxSeqs (config.h, plan.cu).
#pragma once

#include "cuda/prefill/common.cuh"

namespace fastkda::prefill_cuda {

constexpr int kOrderThreads = 256;

__device__ __forceinline__ int64_t seq_length(const PrefillArgs& a, int64_t n) {
  return load_cu(a, n + 1) - load_cu(a, n);
}

__global__ void __launch_bounds__(kOrderThreads)
    order_kernel(const __grid_constant__ PrefillArgs a, int32_t* order) {
  __shared__ int64_t tile[kOrderThreads];
  const int64_t n = int64_t(blockIdx.x) * kOrderThreads + threadIdx.x;
  const int64_t len = n < a.num_seq ? seq_length(a, n) : 0;
  int64_t rank = 0;
  for (int64_t m0 = 0; m0 < a.num_seq; m0 += kOrderThreads) {
    const int64_t m = m0 + threadIdx.x;
    __syncthreads();  // the previous tile is read by every thread
    tile[threadIdx.x] = m < a.num_seq ? seq_length(a, m) : 0;
    __syncthreads();
    const int count = int(a.num_seq - m0 < kOrderThreads ? a.num_seq - m0 : kOrderThreads);
    for (int i = 0; i < count; ++i) rank += tile[i] > len || (tile[i] == len && m0 + i < n);
  }
  if (n < a.num_seq) order[rank] = int32_t(n);
}

// slot_map_kernel: for the varlen intra grid (one CTA per chunk slot and value head), the chunk of
// every slot as {first token, rows} ({0, 0} for a slot before the first sequence or past a
// sequence's last chunk), one thread per slot: each intra CTA then reads one entry instead of a
// binary search over cu_seqlens and the two loads of its sequence's bounds, a chain of dependent
// global loads at every CTA's start (Nsight Compute, H96 varlen: ~100 of ~1090 instructions per
// warp and chunk, and the start of the CTA waits for it). Tokens fit int32: B T < 2^31
// (launch.cu check_launch_limits).
constexpr int kSlotMapThreads = 256;
__global__ void __launch_bounds__(kSlotMapThreads)
    slot_map_kernel(const __grid_constant__ PrefillArgs a, int64_t slots, int2* map) {
  const int64_t slot = int64_t(blockIdx.x) * kSlotMapThreads + threadIdx.x;
  if (slot >= slots) return;
  const int64_t n = slot_sequence(a, slot);
  const int64_t bos = seq_begin(a, n), eos = seq_end(a, n, bos);
  const int64_t c = slot - slot_base(bos, n), tok0 = bos + c * kC;
  const bool chunk = c >= 0 && tok0 < eos;
  map[slot] = make_int2(chunk ? int(tok0) : 0, chunk ? int(eos - tok0 < kC ? eos - tok0 : kC) : 0);
}

}  // namespace fastkda::prefill_cuda
