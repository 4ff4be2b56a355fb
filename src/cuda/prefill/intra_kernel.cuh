// The intra kernels' chunk slots and the streamed kernel's tiles (intra_warp.cuh): the grid
// kernel runs one warp per (chunk slot, value head); slot s belongs to the sequence n with
// slot_base(n) <= s < slot_base(n + 1) (binary search over cu_seqlens, or the varlen slot map;
// slots past a sequence's last chunk exit). The streamed kernel takes tiles in time order from a
// counter in the workspace (below).
#pragma once

#include "cuda/prefill/intra.cuh"

namespace fastkda::prefill_cuda {

// The chunk of chunk slot `slot`: its first token and rows (0: a slot before the first sequence or
// past a sequence's last chunk). Varlen batches read slot_map_kernel's entry, the others search.
__device__ __forceinline__ void slot_chunk(const PrefillArgs& a, int64_t slot, int64_t& tok0,
                                           int& nvalid) {
  if (a.slot_map) {
    const int2 m = a.slot_map[slot];
    tok0 = m.x, nvalid = m.y;
  } else {
    const int64_t n = slot_sequence(a, slot);
    const int64_t bos = seq_begin(a, n);
    const int64_t eos = seq_end(a, n, bos);
    const int64_t c = slot - slot_base(bos, n);
    tok0 = bos + c * kC;
    nvalid = c < 0 || tok0 >= eos ? 0 : int(eos - tok0 < kC ? eos - tok0 : kC);
  }
}

// Tile t of the streamed intra kernel: chunk t / (N HV) of sequence (t / HV) % N, value head
// t % HV (32-bit: the launcher streams only below 2^31 tiles); nvalid = 0 past a shorter
// sequence's end (varlen: an empty tile), -1 for no tile (t < 0).
__device__ __forceinline__ IntraTile intra_tile(const PrefillArgs& a, int64_t t) {
  if (t < 0) return {0, 0, 0, 0, -1};
  const uint32_t u = uint32_t(t), heads = uint32_t(a.HV);
  const uint32_t per_chunk = uint32_t(a.num_seq) * heads;
  const uint32_t c = u / per_chunk, r = u - c * per_chunk;
  const uint32_t n = a.num_seq == 1 ? 0u : r / heads;
  const int64_t bos = seq_begin(a, n), eos = seq_end(a, n, bos), tok0 = bos + int64_t(c) * kC;
  const uint32_t hv = r - n * heads;
  return {slot_base(bos, n) + c, tok0,
          (int64_t(n) * heads + hv) * a.ready_blocks + c / kReadyChunks, int(hv),
          tok0 < eos ? int(eos - tok0 < kC ? eos - tok0 : kC) : 0};
}

// The streamed kernel's retire rule, by the lane that claims for its warp: the next tile, or -1
// when none is left or this claimer stops (not a keeper, tile a.retire_tile claimed, and some
// keeper running). Keepers count themselves once (keeper_started) before their first claim.
__device__ __forceinline__ int64_t claim_tile(const PrefillArgs& a, StreamQueue& queue,
                                              bool keeper) {
  if (!keeper && device::ld_relaxed(&queue.next) >= uint64_t(a.retire_tile) &&
      device::ld_relaxed(&queue.keepers) > 0)
    return -1;
  const int64_t t = int64_t(atomicAdd(&queue.next, 1ull));
  return t < a.intra_tiles ? t : -1;
}
__device__ __forceinline__ void keeper_started(StreamQueue& queue) {
  atomicAdd(&queue.keepers, 1ull);
}

}  // namespace fastkda::prefill_cuda
