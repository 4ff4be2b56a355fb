// prefill_kernel: the scan of the chunked KDA forward (DESIGN §2) for K = V = 128, chunk kC = 16,
// after intra_kernel (intra_kernel.cuh) has written Tb = (I + N)^-1 diag(beta) and A_qk of every
// chunk to the workspace.
//
// Grid: one CTA per (sequence n, value head hv, value slice); a slice is kVs = 16 * (scan warps)
// columns of V (vsplit = kV / kVs CTAs per head, chosen by the launcher to fill the GPU).
// Warp roles (warp specialised, no CTA-wide barrier in the main loop):
//   warps 0..4G-1  G = prep_groups<kVs>() prepare groups of 4 warps alternating chunks: cp.async
//                  of q, k, v, g, Tb, A_qk (two raw stages per group), gate + cumsum, l2 norms,
//                  qs, ke, decay, W = Tb (k^ . 2^G), U = Tb v (split-bf16 MMA)
//                  -> ScanStage scan[c % G]                                      (prepare.cuh)
//   warps 4G..     scan: state S^T stationary in registers (f32), per chunk two tf32 products
//                  (V_new, O) and the split-bf16 state update; output staged and stored to `out`
//                                                                                (scan.cuh)
// Hand-off: named barriers kBarFull0 + s (prepare arrives, scan waits) and kBarEmpty0 + s (scan
// arrives, prepare waits) per stage s; a prepare group syncs on kBarPrep0 + p.
// Shared memory: SharedPlan<kVs> (config.h). Reads q, k, v, g and 128 B of workspace per token and
// head, writes out once; reads and writes the state once per (sequence, head), and with
// boundary_states also writes it every 64 tokens (before chunks 0, 4, 8, ... of the sequence).
#pragma once

#include "cuda/prefill/prepare.cuh"
#include "cuda/prefill/scan.cuh"

namespace fastkda::prefill_cuda {

// Prepare group p of kGroups: chunks p, p + kGroups, ...; its k-th chunk in raw[p][k % 2] (the
// next one loads while it works) and scan[p].
template <int kVs>
__device__ __forceinline__ void prepare_role(const PrefillArgs& a, SharedPlan<kVs>& sm, int p,
                                             int64_t n, int hv, int v0, int64_t bos, int64_t eos,
                                             int nchunks) {
  constexpr int kGroups = prep_groups<kVs>();
  constexpr int kThreads = kPrepThreads + 2 * kVs;  // one prepare group + the scan warps
  const int i = threadIdx.x - p * kPrepThreads;     // key column owned in the gate scan
  const int h = hv / a.group;
  const int bar_prep = kBarPrep0 + p;
  const int64_t slot0 = slot_base(bos, n);
  const float bias = a.dt_bias ? a.dt_bias[int64_t(hv) * kK + i] : 0.0f;
  const float A = a.A_log ? expf(a.A_log[hv]) : 1.0f;
  auto nvalid_of = [&](int c) {
    const int64_t left = eos - (bos + int64_t(c) * kC);
    return int(left < kC ? left : kC);
  };
  auto issue = [&](int c, int buf) {  // inputs of chunk c into raw[p][buf]; always one group
    if (c < nchunks)
      load_stage(a, sm.raw[p][buf], bos + int64_t(c) * kC, nvalid_of(c), slot0 + c, h, hv, v0, i);
    device::cp_async_commit_group();
  };

  issue(p, 0);
  issue(p + kGroups, 1);
  for (int c = p, k = 0; c < nchunks; c += kGroups, ++k) {
    const int buf = k & 1;
    RawStage<kVs>& raw = sm.raw[p][buf];
    ScanStage<kVs>& sb = sm.scan[p];
    device::cp_async_wait_group<1>();
    device::bar_sync(bar_prep, kPrepThreads);

    float Gr[kC];
    gate_scan<false>(a, sm.norms[p], raw, nvalid_of(c), bias, A, 0.0f, i, Gr);
    device::bar_sync(bar_prep, kPrepThreads);
    if (c >= kGroups) device::bar_sync(kBarEmpty0 + p, kThreads);  // scan done with stage p
    scan_operands(a, sm.norms[p], raw, sb, i, Gr);
    // The group's writes of stage p are complete before any of its threads signals the scan
    // (the same release pattern compute-sanitizer racecheck verifies: bar.sync, then bar.arrive),
    // and every read of raw[p][buf] is done before it is refilled.
    device::bar_sync(bar_prep, kPrepThreads);
    device::bar_arrive(kBarFull0 + p, kThreads);
    issue(c + 2 * kGroups, buf);
  }
  device::cp_async_wait_group<0>();
}

// First boundary-state row of sequence n: sum over m < n of ceil(L_m / 64) (fla's `h` layout).
// Called by a whole warp: lanes stride over m and reduce, ~N / 32 loads per warp. Lengths are
// clamped at 0, so the base is >= 0 even for unchecked device cu_seqlens.
__device__ __forceinline__ int64_t boundary_base(const PrefillArgs& a, int64_t n) {
  constexpr int64_t kI = kBoundaryChunks * kC;  // 64 tokens between boundary states
  if (!a.cu_seqlens) return n * ((a.T + kI - 1) / kI);
  int64_t rows = 0;
  for (int64_t m = threadIdx.x & 31; m < n; m += 32) {
    const int64_t len = load_cu(a, m + 1) - load_cu(a, m);
    rows += len > 0 ? (len + kI - 1) / kI : 0;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) rows += __shfl_xor_sync(0xffffffffu, rows, o);
  return rows;
}

template <int kVs>
__device__ __forceinline__ void scan_role(const PrefillArgs& a, SharedPlan<kVs>& sm, int64_t n,
                                          int hv, int v0, int64_t bos, int64_t eos, int nchunks) {
  constexpr int kGroups = prep_groups<kVs>();
  constexpr int kThreads = kPrepThreads + 2 * kVs;  // one prepare group + the scan warps
  const int ws = (threadIdx.x >> 5) - kPrepWarps * kGroups;
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

  // Boundary states: before chunk c = kBoundaryChunks * j, S is the state before token 64 j of
  // the sequence -> row base + j, j < bnd_rows. Rows >= num_boundary_states are skipped (device
  // cu_seqlens is not checked against it on the host); bnd_rows = 0 without boundary_states.
  char* bnd = nullptr;  // row base, head hv
  int bnd_rows = 0;
  if (a.boundary_states) {
    const int64_t base = boundary_base(a, n);
    const int64_t left = a.num_boundary_states - base;
    const int want = (nchunks + kBoundaryChunks - 1) / kBoundaryChunks;
    bnd_rows = left <= 0 ? 0 : (left < want ? int(left) : want);
    bnd = static_cast<char*>(a.boundary_states) +
          (base * a.HV + hv) * matrix * (a.boundary_f32 ? 4 : 2);
  }

  uint16_t* out_rows = a.out + bos * a.out_stride + int64_t(hv) * kV + v_row;
  for (int c = 0, st = 0; c < nchunks; ++c, st = st + 1 == kGroups ? 0 : st + 1) {
    if (c % kBoundaryChunks == 0 && c / kBoundaryChunks < bnd_rows)
      store_state(a, bnd + int64_t(c / kBoundaryChunks) * a.HV * matrix * (a.boundary_f32 ? 4 : 2),
                  a.boundary_f32, v_row, S);
    device::bar_sync(kBarFull0 + st, kThreads);
    const int nvalid = int(eos - (bos + int64_t(c) * kC) < kC ? eos - (bos + int64_t(c) * kC) : kC);
    scan_chunk<kVs>(a, sm.scan[st], sm.ostage[ws], S, vc, out_rows + int64_t(c) * kC * a.out_stride,
                    nvalid);
    if (c + kGroups < nchunks) device::bar_arrive(kBarEmpty0 + st, kThreads);
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
  const int64_t bos = seq_begin(a, n);
  const int64_t eos = a.cu_seqlens ? load_cu(a, n + 1) : bos + a.T;
  const int nchunks = eos > bos ? int((eos - bos + kC - 1) / kC) : 0;
  const int v0 = split * kVs;

  if (threadIdx.x < prep_groups<kVs>() * kPrepThreads)
    prepare_role<kVs>(a, sm, threadIdx.x / kPrepThreads, n, hv, v0, bos, eos, nchunks);
  else
    scan_role<kVs>(a, sm, n, hv, v0, bos, eos, nchunks);
}

}  // namespace fastkda::prefill_cuda
