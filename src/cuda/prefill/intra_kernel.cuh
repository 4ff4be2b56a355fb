// intra_kernel: the chunk-parallel, heavy part of the chunked KDA forward (DESIGN §2), off the
// serial path of the scan: for every chunk of kC tokens and value head, the anchored A' and A_qk
// (tf32 MMA, exact pairs where the anchored form would overflow) and Tb = (I + N)^-1 diag(beta).
//
// Grid: (chunk slot, value head); slot s belongs to the sequence n with slot_base(n) <= s <
// slot_base(n + 1) (binary search over cu_seqlens; slots past a sequence's last chunk exit).
// One CTA of 4 warps (kPrepThreads) per chunk, kIntraCtasPerSm CTAs per SM; shared memory
// IntraPlan (config.h). Reads q, k, g (TMA), beta of the chunk; writes Tb, A_qk and the row
// norms (2176 B) to the workspace at chunk_ws(slot, hv), read by prefill_kernel's prepare warps.
#pragma once

#include "cuda/prefill/intra.cuh"

namespace fastkda::prefill_cuda {

// Thread 0: the TMA loads of q, k, g of the chunk at tok0 of value head hv into sm.raw (the scan's
// tensor maps: launch.cu make_load_maps), completing on sm.full.
__device__ __forceinline__ void issue_qkg(const PrefillArgs& a, IntraPlan& sm, int64_t tok0,
                                          int hv) {
  device::mbarrier_arrive_expect_tx(&sm.full, qkg_bytes(a));
  load_qkg(a, sm.raw, int(tok0), hv / a.group, hv, &sm.full);
}

// One chunk (tok0 .. tok0 + nvalid of value head hv) by the CTA's 4 warps, its loads issued on
// sm.full (next completion: parity `parity`): the products and the record at record() (asked for
// at the end: the streamed kernel reads its slot from shared memory then, not from registers held
// over the chunk).
// landed() runs on every thread after the loads landed (a barrier since), raw_free() once no
// thread reads sm.raw any more (kRefill: each has also fenced its accesses for the async proxy,
// so that the next chunk may be loaded there by TMA). Ends without a barrier after the record's
// stores. kBounded: a.gate is Gate::kBounded (no spans, clamps or exact rows: bounded_spans_fit).
template <bool kRefill, bool kBounded, class Record, class Landed, class RawFree>
__device__ __forceinline__ void intra_chunk(const PrefillArgs& a, IntraPlan& sm, Record&& record,
                                            int hv, int64_t tok0, int nvalid, uint32_t parity,
                                            Landed&& landed, RawFree&& raw_free) {
  const int i = threadIdx.x;
  const IntraCols tc(i);
  float bias[2] = {0.0f, 0.0f};
  if (a.dt_bias) {
#pragma unroll
    for (int c = 0; c < 2; ++c) bias[c] = a.dt_bias[int64_t(hv) * kK + tc.col + c];
  }
  const float A = gate_A(a, hv);
  const float beta_raw = i < kC ? load_beta_raw(a, tok0, i, nvalid, hv) : 0.0f;
  device::mbarrier_wait(&sm.full, parity);
  if (nvalid < kC) zero_tail_qkg(a, sm.raw, nvalid, i);
  __syncthreads();
  landed();

  float L[2][kHalf];  // IntraCols: G - anchor of the thread's two columns and 8 rows
  gate_scan<kBounded>(a, sm.pp, sm.raw, nvalid, bias, A, beta_raw, i, L);
  __syncthreads();
  anchored_operands<kBounded>(sm.pp, sm.raw, i, L);  // kd over the gate rows (dead from here on)
  __syncthreads();
  intra_products(sm.pp, sm.raw.kd, i);
  if constexpr (kRefill) device::fence_proxy_async_shared();
  // Thread r < kC checks row r (its anchor span, reduced in gate_scan); the barrier ORs them.
  if constexpr (kBounded) {
    __syncthreads();
  } else if (__syncthreads_or(i < kC && row_needs_exact(sm.pp, i))) {
    auto& G = sm.pp.kt;  // the products are done with kt
    const int sc7 = IntraLayout::col(kHalf - 1, tc.col);
    // G = L in the first block; the second block adds G_7 of its columns, once it is stored.
    if (tc.h == 0) {
#pragma unroll
      for (int j = 0; j < kHalf; ++j)
        *reinterpret_cast<float2*>(&G[j][IntraLayout::col(j, tc.col)]) =
            make_float2(L[0][j], L[1][j]);
    }
    __syncthreads();
    if (tc.h == 1) {
      const float2 g7 = *reinterpret_cast<const float2*>(&G[kHalf - 1][sc7]);
#pragma unroll
      for (int j = 0; j < kHalf; ++j)
        *reinterpret_cast<float2*>(&G[kHalf + j][IntraLayout::col(j, tc.col)]) =
            make_float2(g7.x + L[0][j], g7.y + L[1][j]);
    }
    __syncthreads();
    exact_rows(sm.pp, sm.raw, G, i);
    if constexpr (kRefill) device::fence_proxy_async_shared();
    __syncthreads();
  }
  raw_free();

  float* ws = record();  // [Tb kC x kC][A_qk kC x kC][rq kC][rk kC]
  if (i < kC) {
    invert_unit_lower(sm.pp.res.nmat, sm.pp.beta, i, ws);
    ws[2 * kC * kC + i] = sm.pp.rq[i];
    ws[2 * kC * kC + kC + i] = sm.pp.rk[i];
  }
  // A fixed trip count (with `e = i; e < kC * kC` the loop was compiled for any i: ~50
  // instructions per warp of index and 64-bit address arithmetic).
#pragma unroll
  for (int j = 0; j < kC * kC / kPrepThreads; ++j) {
    const int e = i + j * kPrepThreads;
    ws[kC * kC + e] = sm.pp.res.aqk[e / kC][e % kC];
  }
}

__device__ __forceinline__ void init_full_barrier(IntraPlan& sm) {
  device::mbarrier_init(&sm.full, 1);
  device::fence_mbarrier_init();
}

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

__global__ void __launch_bounds__(kPrepThreads, kIntraCtasPerSm)
    intra_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<IntraPlan*>(smem_bytes);
  const int64_t slot = blockIdx.x;
  const int hv = blockIdx.y;
  // The scan kernel may start on SMs this grid no longer fills (its CTAs set up, then wait for
  // this grid's completion before reading the workspace: griddep_wait in prefill_kernel).
  device::griddep_launch_dependents();

  int64_t tok0;
  int nvalid;
  slot_chunk(a, slot, tok0, nvalid);
  if (nvalid == 0) return;  // a slot before the first sequence or past a sequence's end
  if (threadIdx.x == 0) {
    init_full_barrier(sm);
    issue_qkg(a, sm, tok0, hv);
  }
  __syncthreads();  // the mbarrier is initialised before anyone waits on it
  if (a.gate == Gate::kBounded)
    intra_chunk<false, true>(a, sm, [&] { return chunk_ws(a, slot, hv); }, hv, tok0, nvalid, 0,
                             [] {}, [] {});
  else
    intra_chunk<false, false>(a, sm, [&] { return chunk_ws(a, slot, hv); }, hv, tok0, nvalid, 0,
                              [] {}, [] {});
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

// The retire rule of both streamed intra kernels (below and intra_warp_streamed_kernel), by the
// one thread that claims for its CTA (or warp): the next tile, or -1 when none is left or this
// claimer stops (not a keeper, tile a.retire_tile claimed, and some keeper running). Keepers
// count themselves once (keeper_started) before their first claim.
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

// The streamed intra kernel (plan.h Plan::streamed): a persistent grid of kIntraCtasPerSm
// CTAs per SM, started before the scan, whose CTAs take tiles in time order (intra_tile) from a
// counter in the workspace and count each chunk in its ready counter after its record (the scan's
// prepare waits on the counters instead of on this grid: wait_ready). A CTA claims its next tile
// while it works on the current one and loads it into sm.raw as soon as the current one is done
// with it. The scan grid (one wave, fewer CTAs than SMs) starts once every CTA here has started,
// i.e. on the SMs whose intra CTAs have stopped: CTAs on SMs numbered >= a.keep_sms stop claiming
// once tile a.retire_tile has been claimed, the others ("keepers") run until the last tile. A CTA
// stops only while some keeper is running (the keepers count themselves before they claim), so
// every tile is claimed and completed without waiting on the scan: no deadlock whatever the
// placement.
__global__ void __launch_bounds__(kPrepThreads, kIntraCtasPerSm)
    intra_streamed_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<IntraPlan*>(smem_bytes);
  device::griddep_launch_dependents();  // the scan grid starts once every CTA here has started
  StreamQueue& queue = *a.queue;
  // The CTA's bookkeeping (claims, loads, counters) by lane 0 of the last warp: warp 0 owns the
  // end of a chunk's critical path (invert_unit_lower).
  const bool control = threadIdx.x == kPrepThreads - 32;
  const bool keeper = device::sm_id() < uint32_t(a.keep_sms);
  // The next tile (-1: none left, or this CTA retires), and its start in sm.tile[k] with its
  // loads issued.
  auto claim = [&] { return claim_tile(a, queue, keeper); };
  auto start = [&](int k, int64_t t) {
    const IntraTile x = intra_tile(a, t);
    sm.tile[k] = x;
    if (x.nvalid > 0) issue_qkg(a, sm, x.tok0, x.hv);
  };
  if (control) {
    init_full_barrier(sm);
    if (keeper) keeper_started(queue);
    start(0, claim());
  }
  __syncthreads();  // the mbarrier is initialised, sm.tile[0] set
  // A chunk is counted one chunk later (after the next one's loads landed, or at the end):
  // the fence then finds the record's stores done instead of waiting for them on the CTA's path
  // (at once, it cost ~0.1 ms of H96 T8192's ~0.4 ms of intra work). The CTA's bookkeeping lives
  // in shared memory (sm.tile, sm.next) rather than in registers held over a chunk: at 6 CTAs per
  // SM (80 registers) they spilled (session 14). The uncounted chunk is tile k ^ 1 of iteration k
  // (refill overwrites it only after landed()).
  bool uncounted = false;
  int k = 0;  // sm.tile[k]: this tile; `control` sets sm.tile[k ^ 1]
  auto publish = [&] {
    if (control && uncounted) device::red_release_add(&a.ready[sm.tile[k ^ 1].counter], 1u);
    uncounted = false;
  };
  uint32_t parity = 0;
  for (;; k ^= 1) {
    const int nvalid = sm.tile[k].nvalid;
    if (nvalid < 0) break;
    // Claimed now, started once sm.raw is free: the atomic's latency overlaps the chunk's work.
    if (control) sm.next = claim();
    auto refill = [&] {
      if (control) start(k ^ 1, sm.next);
    };
    if (nvalid > 0) {
      auto record = [&] { return chunk_ws(a, sm.tile[k].slot, sm.tile[k].hv); };
      const int hv = sm.tile[k].hv;
      const int64_t tok0 = sm.tile[k].tok0;
      if (a.gate == Gate::kBounded)
        intra_chunk<true, true>(a, sm, record, hv, tok0, nvalid, parity, publish, refill);
      else
        intra_chunk<true, false>(a, sm, record, hv, tok0, nvalid, parity, publish, refill);
      parity ^= 1u;
      uncounted = true;
    } else {
      publish();  // before refill rewrites its tile (no empty tiles in the plans that stream)
      refill();
    }
    __syncthreads();  // every store of the record is issued; sm.tile[k ^ 1] is set
  }
  publish();
}

}  // namespace fastkda::prefill_cuda
