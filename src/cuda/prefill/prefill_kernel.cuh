// prefill_kernel: the fused chunked KDA forward (DESIGN §2) for K = V = 128, chunk kC = 16.
//
// Grid: one CTA per (sequence n, value head hv, value slice); a slice is kVs = 16 * (scan warps)
// columns of V (vsplit = kV / kVs CTAs per head, chosen by the launcher to fill the GPU).
// Warp roles (warp specialised, no CTA-wide barrier in the main loop):
//   warps 0..7  two prepare groups of 4 warps alternating chunks (prep_groups<kVs>()): cp.async of
//               the raw q, k, v, g, gate + cumsum, l2 norms, beta, anchored A' / A_qk (tf32 MMA),
//               W and U by forward substitution (f32) -> ScanStage scan[c % 2]   (prepare.cuh)
//   warps 8..   scan: state S^T stationary in registers (f32), three tf32 MMAs per chunk, output
//               staged and stored to `out`                                    (scan.cuh)
// Hand-off: named barriers kBarFull0 + s (prepare arrives, scan waits) and kBarEmpty0 + s (scan
// arrives, prepare waits) per stage s; a prepare group syncs on kBarPrep0 + p.
// Shared memory: SharedPlan<kVs> (config.h). Reads q, k, v, g, beta once; writes out once; reads
// and writes the state once per (sequence, head). No workspace.
#pragma once

#include "cuda/prefill/prepare.cuh"
#include "cuda/prefill/scan.cuh"

namespace fastkda::prefill_cuda {

__device__ __forceinline__ int64_t load_cu(const PrefillArgs& a, int64_t n) {
  return a.cu_i64 ? static_cast<const int64_t*>(a.cu_seqlens)[n]
                  : int64_t(static_cast<const int32_t*>(a.cu_seqlens)[n]);
}

// Prepare group p of kGroups: chunks p, p + kGroups, ... With one group the raw stages are double
// buffered (chunk c + 2 loads while c + 1 is prepared); with two, each group owns raw[p] and loads
// its next chunk while it solves the current one.
template <int kVs>
__device__ __forceinline__ void prepare_role(const PrefillArgs& a, SharedPlan<kVs>& sm, int p,
                                             int hv, int v0, int64_t bos, int64_t eos,
                                             int nchunks) {
  constexpr int kGroups = prep_groups<kVs>();
  constexpr int kThreads = kPrepThreads + 2 * kVs;  // one prepare group + the scan warps
  const int i = threadIdx.x - p * kPrepThreads;     // key column owned in the gate scan
  const int h = hv / a.group;
  const int bar_prep = kBarPrep0 + p;
  PrepPrivate& pp = sm.prep[p];
  const float bias = a.dt_bias ? a.dt_bias[int64_t(hv) * kK + i] : 0.0f;
  const float A = a.A_log ? expf(a.A_log[hv]) : 1.0f;
  auto nvalid_of = [&](int c) {
    const int64_t left = eos - (bos + int64_t(c) * kC);
    return int(left < kC ? left : kC);
  };
  auto issue = [&](int c) {  // raw inputs of chunk c into raw[c % 2]; always one commit group
    if (c < nchunks) load_raw(a, sm.raw[c & 1], bos + int64_t(c) * kC, nvalid_of(c), h, hv, v0, i);
    device::cp_async_commit_group();
  };
  auto beta_of = [&](int c) {
    return (i < kC && c < nchunks) ? load_beta_raw(a, bos + int64_t(c) * kC, i, nvalid_of(c), hv)
                                   : 0.0f;
  };

  float beta_cur = beta_of(p), beta_next = kGroups == 1 ? beta_of(p + 1) : 0.0f;
  issue(p);
  if (kGroups == 1) issue(p + 1);

  for (int c = p; c < nchunks; c += kGroups) {
    const int st = c & 1;
    const int nvalid = nvalid_of(c);
    RawStage<kVs>& raw = sm.raw[st];
    ScanStage<kVs>& sb = sm.scan[st];
    if (kGroups == 1)
      device::cp_async_wait_group<1>();
    else
      device::cp_async_wait_group<0>();
    device::bar_sync(bar_prep, kPrepThreads);

    float Gr[kC];
    gate_scan(a, pp, raw, nvalid, bias, A, beta_cur, i, Gr);
    device::bar_sync(bar_prep, kPrepThreads);
    if (c >= 2) device::bar_sync(kBarEmpty0 + st, kThreads);  // scan done with stage st

    float kw[kC], vcol[kC];
    make_operands(a, pp, raw, sb, i, Gr, kw, vcol);
    device::bar_sync(bar_prep, kPrepThreads);
    intra_products(pp, sb, i);
    device::bar_sync(bar_prep, kPrepThreads);
    bool any_exact = false;
#pragma unroll
    for (int row = 0; row < kC; ++row) any_exact |= row_needs_exact(pp, row);
    if (any_exact) {
      exact_rows(a, pp, raw, sb, i);
      device::bar_sync(bar_prep, kPrepThreads);
    }
    // Every read of raw[st] is done: load chunk c + 2 while this chunk's solve runs.
    issue(c + 2);
    if (kGroups == 1) {
      beta_cur = beta_next;
      beta_next = beta_of(c + 2);
    } else {
      beta_cur = beta_of(c + 2);
    }
    solve_w_u(pp, sb, i, kw, vcol);
    // The group's writes of stage st are complete before any of its threads signals the scan
    // (the same release pattern compute-sanitizer racecheck verifies: bar.sync, then bar.arrive).
    device::bar_sync(bar_prep, kPrepThreads);
    device::bar_arrive(kBarFull0 + st, kThreads);
  }
  device::cp_async_wait_group<0>();
}

template <int kVs>
__device__ __forceinline__ void scan_role(const PrefillArgs& a, SharedPlan<kVs>& sm, int64_t n,
                                          int hv, int v0, int64_t bos, int64_t eos, int nchunks) {
  constexpr int kThreads = kPrepThreads + 2 * kVs;  // one prepare group + the scan warps
  const int ws = (threadIdx.x >> 5) - kPrepWarps * prep_groups<kVs>();
  const int vc = 16 * ws;     // this warp's first column inside the CTA's value slice
  const int v_row = v0 + vc;  // ... inside the head

  int64_t slot = n;
  bool use_state = true;
  if (a.state_indices) {
    slot = a.state_indices[n];
    use_state = slot >= 0 && slot < a.num_state_slots;
  }
  const int64_t matrix = int64_t(kK) * kV;
  const void* init = nullptr;
  if (use_state && a.initial_state)
    init = static_cast<const char*>(a.initial_state) +
           (slot * a.HV + hv) * matrix * (a.init_f32 ? 4 : 2);
  float S[kK / 8][4];
  load_state(a, init, a.init_f32, v_row, S);

  uint16_t* out_rows = a.out + bos * a.out_stride + int64_t(hv) * kV + v_row;
  for (int c = 0; c < nchunks; ++c) {
    const int st = c & 1;
    device::bar_sync(kBarFull0 + st, kThreads);
    const int nvalid = int(eos - (bos + int64_t(c) * kC) < kC ? eos - (bos + int64_t(c) * kC) : kC);
    scan_chunk<kVs>(a, sm.scan[st], sm.ostage[ws], S, vc, out_rows + int64_t(c) * kC * a.out_stride,
                    nvalid);
    if (c + 2 < nchunks) device::bar_arrive(kBarEmpty0 + st, kThreads);
  }

  if (use_state && a.final_state)
    store_state(
        a, static_cast<char*>(a.final_state) + (slot * a.HV + hv) * matrix * (a.final_f32 ? 4 : 2),
        a.final_f32, v_row, S);
}

template <int kVs>
__global__ void __launch_bounds__(block_threads<kVs>(), 1)
    prefill_kernel(const __grid_constant__ PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<SharedPlan<kVs>*>(smem_bytes);

  const int64_t cta = blockIdx.x;
  const int split = int(cta % a.vsplit);
  const int hv = int((cta / a.vsplit) % a.HV);
  const int64_t n = cta / (int64_t(a.vsplit) * a.HV);
  int64_t bos, eos;
  if (a.cu_seqlens) {
    bos = load_cu(a, n);
    eos = load_cu(a, n + 1);
  } else {
    bos = n * a.T;
    eos = bos + a.T;
  }
  const int nchunks = eos > bos ? int((eos - bos + kC - 1) / kC) : 0;
  const int v0 = split * kVs;

  if (threadIdx.x < prep_groups<kVs>() * kPrepThreads)
    prepare_role<kVs>(a, sm, threadIdx.x / kPrepThreads, hv, v0, bos, eos, nchunks);
  else
    scan_role<kVs>(a, sm, n, hv, v0, bos, eos, nchunks);
}

}  // namespace fastkda::prefill_cuda
