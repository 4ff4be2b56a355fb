// intra_kernel: the chunk-parallel, heavy part of the chunked KDA forward (DESIGN §2), off the
// serial path of the scan: for every chunk of kC tokens and value head, the anchored A' and A_qk
// (tf32 MMA, exact rows where the anchored form would overflow) and Tb = (I + N)^-1 diag(beta).
//
// Grid: (chunk slot, value head); slot s belongs to the sequence n with slot_base(n) <= s <
// slot_base(n + 1) (binary search over cu_seqlens; slots past a sequence's last chunk exit).
// One CTA of 4 warps (kPrepThreads) per chunk, kIntraCtasPerSm CTAs per SM; shared memory
// IntraPlan (config.h). Reads q, k, g (TMA), beta of the chunk; writes Tb, A_qk and the row norms
// (2176 B) to the workspace at chunk_ws(slot, hv), read by prefill_kernel's prepare warps.
#pragma once

#include "cuda/prefill/intra.cuh"

namespace fastkda::prefill_cuda {

__global__ void __launch_bounds__(kPrepThreads, kIntraCtasPerSm)
    intra_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<IntraPlan*>(smem_bytes);
  const int64_t slot = blockIdx.x;
  const int hv = blockIdx.y;
  const int i = threadIdx.x;
  // The scan kernel may start on SMs this grid no longer fills (its CTAs set up, then wait for
  // this grid's completion before reading the workspace: griddep_wait in prefill_kernel).
  device::griddep_launch_dependents();

  const int64_t n = slot_sequence(a, slot);
  const int64_t bos = seq_begin(a, n);
  const int64_t eos = seq_end(a, n, bos);
  const int64_t c = slot - slot_base(bos, n);
  const int64_t tok0 = bos + c * kC;
  if (c < 0 || tok0 >= eos) return;  // a slot before the first sequence or past a sequence's end
  const int nvalid = int(eos - tok0 < kC ? eos - tok0 : kC);
  const int h = hv / a.group;

  // q, k, g of the chunk by TMA (the scan's tensor maps: launch.cu make_load_maps), thread 0.
  if (i == 0) {
    device::mbarrier_init(&sm.full, 1);
    device::fence_mbarrier_init();
    device::mbarrier_arrive_expect_tx(&sm.full, qkg_bytes(a));
    load_qkg(a, sm.raw, int(tok0), h, hv, &sm.full);
  }
  const float bias = a.dt_bias ? a.dt_bias[int64_t(hv) * kK + i] : 0.0f;
  const float A = a.A_log ? expf(a.A_log[hv]) : 1.0f;
  const float beta_raw = i < kC ? load_beta_raw(a, tok0, i, nvalid, hv) : 0.0f;
  __syncthreads();  // the mbarrier is initialised before anyone waits on it
  device::mbarrier_wait(&sm.full, 0);
  if (nvalid < kC) zero_tail_qkg(a, sm.raw, nvalid, i);
  __syncthreads();

  float Gr[kC];
  gate_scan(a, sm.pp, sm.raw, nvalid, bias, A, beta_raw, i, Gr);
  __syncthreads();
  anchored_operands(a, sm.pp, sm.raw, i, Gr);  // kd over the gate rows (dead from here on)
  __syncthreads();
  intra_products(sm.pp, sm.raw.kd, i);
  // Thread r < kC checks row r (its anchor span, reduced in gate_scan); the barrier ORs them.
  if (__syncthreads_or(i < kC && row_needs_exact(sm.pp, i))) {
    auto& G = sm.pp.kt;  // the products are done with kt
#pragma unroll
    for (int row = 0; row < kC; ++row) G[row][i] = Gr[row];
    __syncthreads();
    exact_rows(a, sm.pp, sm.raw, G, i);
    __syncthreads();
  }

  float* ws = chunk_ws(a, slot, hv);  // [Tb kC x kC][A_qk kC x kC][rq kC][rk kC]
  if (i < kC) {
    invert_unit_lower(sm.pp, i, ws);
    ws[2 * kC * kC + i] = sm.pp.rq[i];
    ws[2 * kC * kC + kC + i] = sm.pp.rk[i];
  }
  // A fixed trip count (with `e = i; e < kC * kC` the loop was compiled for any i: ~50
  // instructions per warp of index and 64-bit address arithmetic).
#pragma unroll
  for (int j = 0; j < kC * kC / kPrepThreads; ++j) {
    const int e = i + j * kPrepThreads;
    ws[kC * kC + e] = sm.pp.aqk[e / kC][e % kC];
  }
}

}  // namespace fastkda::prefill_cuda
