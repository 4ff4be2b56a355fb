// prefill_kernel: the scan of the chunked KDA forward (DESIGN §2) for K = V = 128, chunk kC = 16,
// after the intra kernel (intra_warp.cuh) has written Tb = (I + N)^-1 diag(beta) and A_qk of every
// chunk to the workspace.
//
// Grid: one CTA per (sequence n, value head hv, value slice); a slice is kVs = 16 * (scan warps)
// columns of V (vsplit = kV / kVs CTAs per head, chosen by the launcher to fill the GPU). With
// split T (Pass::kTransitions / kOutputs, docs/prefill.md) one CTA per (segment slot, value head,
// slice), pass 1 with a transition slice (K x K rows of S^T from the identity) per value slice
// (and segment 0's output jobs with first_out); ScanJob says what each CTA does.
// Warp roles (warp specialised, no CTA-wide barrier in the main loop):
//   warps 0..4G-1  G = prep_groups<kVs>() prepare groups of 4 warps alternating chunks: TMA loads
//                  of q, k, v, g, Tb, A_qk, row norms (two raw stages per group), gate + cumsum,
//                  qs, ke, decay, and at kVs = 32 W = Tb (k^ . 2^G), U = Tb v (split-bf16 MMA;
//                  at kVs = 128 / 64 kw and copies of Tb, v^T instead) -> scan[c % G] (prepare.cuh)
//   warps 4G..     scan: state S^T stationary in registers (f32), per chunk two tf32 products
//                  (V_new, O; at kVs = 128 / 64 V_new = Tb (v - kw S) on wgmma + mma.sync) and the
//                  split-bf16 state update; output staged and stored to `out`;
//                  16 value rows per warp (at kVs = 32 two warps per 16 rows, one per key half,
//                  exchanging their V_new / O partials on a pair barrier: key_split, config.h)
//                                                                                (scan.cuh)
// Hand-off: named barriers Full (prepare arrives, scan waits) and Empty (scan arrives, prepare
// waits) per hand-off slot f % handoff_slots (config.h); a prepare group syncs on its own.
// Shared memory: SharedPlan<kVs> (config.h). Reads q, k, v, g and 128 B of workspace per token and
// head, writes out once; reads and writes the state once per (sequence, head), and with
// boundary_states also writes it every 64 tokens (before chunks 0, 4, 8, ... of the sequence).
#pragma once

#include "cuda/prefill/prepare.cuh"
#include "cuda/prefill/scan.cuh"

namespace fastkda::prefill_cuda {

// What one CTA of the scan kernel does: its sequence and chunks, its slice of S^T (value rows, or
// the key rows of a split-T transition) and where its state starts and ends. Outputs (out and
// the boundary states) are written by every pass but the transition pass. Computed once per CTA,
// uniformly by all threads (job_of).
struct ScanJob {
  int64_t n, bos, eos;  // sequence and its tokens
  int nchunks;          // chunks of the whole sequence
  int c0, c1;           // this CTA's chunks [c0, c1)
  int hv;
  int row0;         // first row of the CTA's slice of S^T (a value row, or a key row)
  int v0;           // first value column the prepare loads (0 for transition rows: U unused)
  bool transition;  // rows of the K x K transition: U = 0, identity start
  bool outputs;     // a pass-1 job with outputs (first_out: segment 0's value slices)
  StateRef init;    // start state (null: zeros, or the identity for transition rows)
  StateRef end;     // where S goes after chunk c1 - 1 (null: nowhere)
  StateRef end_m;   // Pass::kPairs: where the transition block goes (M_j, combine layout)
  bool valid;
};

// Pass::kFirst: all threads meet here once the prepare passed griddep_wait (at once beside the
// streamed intra kernel), then let kPairs launch (a named barrier id the kVs = 128 kernel does
// not use otherwise).
constexpr int kFirstLaunchBarrier = BarrierIds<128>::kEnd;
static_assert(kFirstLaunchBarrier < 16, "a free named barrier");
// The scan warps' meetings around a CTA's staged end state (stage_state_rows, copy_state_rows),
// after the chunk loop (kFirst's use of the same id is over by then).
constexpr int kStateBarrier = 15;
static_assert(BarrierIds<128>::kEnd <= kStateBarrier && BarrierIds<64>::kEnd <= kStateBarrier,
              "a free named barrier");
// The staged image of one state lies in the raw stages, which only the prepare groups use (done
// once the scan warps have read the last chunk's stage): no meeting needed before writing it.
// The pair job's two images reach into the scan stages (a meeting first), not beyond them.
static_assert(offsetof(SharedPlan<128>, scan) >= 128 * kStateLd * sizeof(float) &&
                  offsetof(SharedPlan<64>, scan) >= 64 * kStateLd * sizeof(float) &&
                  offsetof(SharedPlan<128>, ostage) >= 2 * 128 * kStateLd * sizeof(float),
              "staged end states inside the stages");

// Pass::kPairs runs the pair CTA layout (config.h prep_groups<kVs, true>: one prepare group for
// a segment's value and transition rows). Segment 0's output jobs run beside it as Pass::kFirst,
// with the usual two groups: with one group an output chunk took 1.94 us against 1.38 (Nsight
// Compute, session 30).
template <Pass kPass>
constexpr bool kPairLayout = kPass == Pass::kPairs;

template <int kVs, Pass kPass>
__device__ __forceinline__ ScanJob job_of(const PrefillArgs& a, int64_t cta) {
  ScanJob j{};
  const int slices = kPass == Pass::kTransitions ? 2 * a.vsplit : a.vsplit;  // kPairs: vsplit 1
  const int slice = int(cta % slices);
  j.hv = int((cta / slices) % a.HV);
  // A sequence (kWhole, kFirst), or a segment slot (split T)
  int64_t unit = cta / (int64_t(slices) * a.HV);
  const int64_t seg_tokens = int64_t(a.seg_chunks) * kC;
  if constexpr (kPass == Pass::kWhole)
    j.n = a.order ? a.order[unit] : unit;  // long sequences first (order.cuh)
  else if constexpr (kPass == Pass::kFirst)
    j.n = unit;
  else
    j.n = slot_sequence(a, unit, seg_tokens);
  j.bos = seq_begin(a, j.n);
  j.eos = seq_end(a, j.n, j.bos);
  j.nchunks = j.eos > j.bos ? int((j.eos - j.bos + kC - 1) / kC) : 0;
  j.transition = kPass == Pass::kTransitions && slice >= a.vsplit;
  j.row0 = (j.transition ? slice - a.vsplit : slice) * kVs;
  j.v0 = j.transition ? 0 : j.row0;

  // The caller's start and final states.
  const UserStates user = user_states(a, j.n, j.hv);
  const StateRef user_init = user.init, user_final = user.final;

  if constexpr (kPass == Pass::kWhole) {
    // c0 = 0 hidden from the optimiser: with a known 0, ptxas peels the first boundary-state
    // store out of the scan loop and serialises the wgmma chain (C7520) around it.
    j.c0 = device::opaque_zero(), j.c1 = j.nchunks;
    j.init = user_init, j.end = user_final, j.valid = true;
    return j;
  }
  // Split T: segment `seg` of the sequence (a zero-length sequence has one, empty, segment).
  if constexpr (kPass == Pass::kFirst) unit = slot_base(j.bos, j.n, seg_tokens);  // segment 0
  const int64_t seg = unit - slot_base(j.bos, j.n, seg_tokens);
  const int nseg = seg_count(a, j.nchunks);
  j.valid = seg >= 0 && seg < nseg;
  if (!j.valid) return j;
  j.c0 = seg_first(a, int(seg));
  const int next = seg_first(a, int(seg) + 1);
  j.c1 = next < j.nchunks ? next : j.nchunks;
  if constexpr (kPass == Pass::kTransitions) {
    // Segments 0 .. nseg - 2 (the last one's E and M are not needed): value rows from the true
    // start (segment 0) or zeros -> E; transition rows (segments >= 1) from the identity -> M.
    // first_out: segment 0's value rows are pass 2's job for it, run here (outputs, boundary
    // states) with E_0 as its end state, or the final state if it is the sequence's only segment.
    j.outputs = a.first_out && seg == 0 && !j.transition;
    j.valid = j.outputs || (seg < nseg - 1 && !(seg == 0 && j.transition));
    j.init = seg == 0 ? user_init : StateRef{nullptr, true, false};
    j.end = j.outputs && nseg == 1
                ? user_final
                : StateRef{j.transition ? seg_transition(a, unit, j.hv) : seg_end(a, unit, j.hv),
                           true, false};
  } else if constexpr (kPass == Pass::kFirst) {  // kTransitions' segment-0 output job
    j.outputs = true;
    j.init = user_init;
    j.end = nseg == 1 ? user_final : StateRef{seg_end(a, unit, j.hv), true, false};
  } else if constexpr (kPass == Pass::kPairs) {
    // One CTA for the value and the transition rows of each segment 1 .. nseg - 2 (zeros -> E,
    // identity -> M); segment 0 is kFirst's.
    j.valid = seg >= 1 && seg < nseg - 1;
    j.init = StateRef{nullptr, true, false};
    j.end = StateRef{seg_end(a, unit, j.hv), true, false};
    j.end_m = StateRef{seg_transition(a, unit, j.hv), true, false};
  } else {  // Pass::kOutputs: every segment from its true start state (S_in(seg) over E_{seg-1})
    j.valid = !(a.first_out && seg == 0);  // done in pass 1
    j.init = seg == 0 ? user_init : StateRef{seg_end(a, unit - 1, j.hv), true, false};
    j.end = seg == nseg - 1 ? user_final : StateRef{nullptr, true, false};
  }
  return j;
}

// The chunks of a CTA's jobs form one sequence (index f, `flat`); chunk f goes through stage
// f % kStages. Prepare group p of kGroups prepares the chunks with f % kGroups == p: in one job
// chunks c, c + kGroups, ... from the first such c; its k-th chunk of the job in raw[p][k % 2]
// (the next one loads while it works). `flat0`: the flat index of the job's chunk c0; a stage
// used before (f >= kStages) is written only after the scan released it. The transition pass
// skips qs and A_qk (no outputs), and U for transition rows.
// `phases`: bit b is the parity of the next completion of raw_full[p][b] (carried across jobs).
template <int kVs, Pass kPass, int kGroups = prep_groups<kVs>(), bool kF16 = false>
__device__ __forceinline__ void prepare_job(const PrefillArgs& a, SharedPlan<kVs>& sm, int p,
                                            const ScanJob& job, int first, int flat0,
                                            uint32_t& phases) {
  constexpr int kStages = scan_stages<kVs>();
  constexpr int kThreads = handoff_threads<kVs>();  // one prepare group + the scan warps
  const int i = threadIdx.x - p * kPrepThreads;     // key column owned in the gate scan
  const int hv = job.hv, v0 = job.v0, c1 = job.c1;
  const int64_t bos = job.bos, eos = job.eos;
  const int h = hv / a.group;
  using Bar = BarrierIds<kVs>;
  constexpr int kSlots = handoff_slots<kVs>();
  const int bar_prep = Bar::kPrep0 + p;
  const int64_t slot0 = slot_base(bos, job.n);
  const float bias = a.dt_bias ? a.dt_bias[int64_t(hv) * kK + i] : 0.0f;
  const float A = gate_A(a, hv);
  constexpr bool kOutputs = kPass != Pass::kTransitions;
  const bool with_u = !job.transition;
  auto nvalid_of = [&](int c) {
    const int64_t left = eos - (bos + int64_t(c) * kC);
    return int(left < kC ? left : kC);
  };
  int checked = -1;  // streamed intra kernel: the last ready block thread 0 waited for
  auto issue = [&](int c, int buf) {  // inputs of chunk c into raw[p][buf] (load_stage)
    if (c < c1 && (kSharedIssue<kVs> ? (i & 31) == 0 : i == 0)) {
      if (i == 0 && a.ready && c / kReadyChunks != checked) {  // before the record's copy
        checked = c / kReadyChunks;
        wait_ready(a, job.n, hv, checked, job.nchunks);
      }
      load_stage(a, sm.raw[p][buf], &sm.raw_full[p][buf], kSharedIssue<kVs> ? i >> 5 : 0,
                 bos + int64_t(c) * kC, slot0 + c, h, hv, v0);
    }
  };

  issue(first, 0);
  issue(first + kGroups, 1);
  for (int c = first, k = 0; c < c1; c += kGroups, ++k) {
    const int buf = k & 1;
    RawStage<kVs>& raw = sm.raw[p][buf];
    const int f = flat0 + (c - job.c0);  // the chunk's flat index
    const int st = f % kStages;
    ScanStageOf<kVs>& sb = sm.scan[st];
    device::mbarrier_wait(&sm.raw_full[p][buf], (phases >> buf) & 1u);
    phases ^= 1u << buf;
    if (nvalid_of(c) < kC) zero_tail(a, raw, nvalid_of(c), i);  // the last chunk of a sequence

    float Gr[kC];  // per thread (column): its own column of g
    gate_cumsum(a, raw, nvalid_of(c), bias, A, i, kG0<kF16>, Gr);
    // The group meets before waiting for the scan: the zeros of zero_tail are visible to the
    // group's products, and compute-sanitizer racecheck sees the scan's reads of stage p ordered
    // before these writes (with the Empty wait alone it reports hazards on every stage write).
    device::bar_sync(bar_prep, kPrepThreads);
    if (f >= kStages)  // the scan is done with stage st (chunk f - kStages, slot of that chunk)
      device::bar_sync(Bar::kEmpty0 + (f - kStages) % kSlots, kThreads);
    scan_operands<kVs, kF16>(a, raw, sb, i, Gr, kOutputs, with_u);
    // The wgmma scan reads the stage through the async proxy: order these generic writes first.
    if constexpr (uses_wgmma<kVs>()) device::fence_proxy_async_shared();
    // The group's writes of stage p are complete before any of its threads signals the scan
    // (the same release pattern compute-sanitizer racecheck verifies: bar.sync, then bar.arrive),
    // and every read of raw[p][buf] is done before it is refilled.
    device::bar_sync(bar_prep, kPrepThreads);
    device::bar_arrive(Bar::kFull0 + f % kSlots, kThreads);
    issue(c + 2 * kGroups, buf);
  }
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

// The key-split exchange of the warp pair owning value rows 16 p .. 16 p + 15 (null without it).
template <int kVs>
__device__ __forceinline__ float4 (*key_exchange(SharedPlan<kVs>& sm, int p))[2][4][32] {
  if constexpr (key_split<kVs>() > 1)
    return sm.xch.x[p];
  else
    return nullptr;
}

// The scan of one job: chunk f of the CTA's sequence of chunks (prepare_job) is read from stage
// f % kStages and released if a later chunk (f + kStages < total) will be written there
// (total < 0: this job is the CTA's only one).
// kStaged: the CTA's end state staged (stage_state_rows) where its layout allows: split T's passes
// and the unsplit kVs = 128 scan, whose next CTA on the SM (varlen, more jobs than SMs) starts
// once this one has stored its final state (session 37, call 6: H96 / H64 varlen -1.3 to -1.6 %,
// 64 x 128 -1.3 %, H96 fixed +0.2 %). The unsplit kVs = 64 / 32 scans keep store_state (kVs = 64
// staged too: H64 fixed +0.9 % in call 5, within its +-1 % between alternating runs of the same
// code in call 6; no row gained).
template <int kVs, Pass kPass, int kGroups = prep_groups<kVs>(), bool kF16 = false,
          bool kStaged = false>
__device__ __forceinline__ void scan_job(const PrefillArgs& a, SharedPlan<kVs>& sm,
                                         const ScanJob& job, int& flat, int total) {
  if (total < 0) total = flat + job.c1 - job.c0;  // the CTA's only job
  constexpr int kStages = scan_stages<kVs>();
  constexpr int kThreads = handoff_threads<kVs>();  // one prepare group + the scan warps
  constexpr int kSplit = key_split<kVs>();
  using Bar = BarrierIds<kVs>;
  constexpr int kSlots = handoff_slots<kVs>();
  const int ws = (threadIdx.x >> 5) - kPrepWarps * kGroups;
  const int vc = 16 * (ws % (kVs / 16));  // this warp's first row inside the CTA's slice
  const int row = job.row0 + vc;          // ... inside S^T
  const int kh = ws / (kVs / 16);         // its key half (key split), else 0
  const int k0 = kh * (kK / kSplit);      // its first key
  const int hv = job.hv, c1 = job.c1;
  const int64_t bos = job.bos, eos = job.eos;
  constexpr bool kOutputs = kPass != Pass::kTransitions;
  const bool with_u = !job.transition;
  const int64_t matrix = int64_t(kK) * kV;

  float S[kK / 8 / kSplit][4];
  load_state(job.init, job.transition, row, k0, S);
  // wgmma: S is an accumulator from here on; defined in uniform code, so that ptxas need not
  // serialise the wgmma chain around the (data-dependent) loads above.
  if constexpr (uses_wgmma<kVs>()) device::wgmma_fence_operands(reinterpret_cast<float(&)[64]>(S));
  // f16 operands: S^T held scaled by 2^sigma per warp (scan.cuh WarpScale), sigma 0 to start.
  WarpScale sc{0.0f, 1.0f, 1.0f, 0, false};
  if constexpr (kF16) sc.bound = state_bound(S, 1.0f), sc.check();

  // Boundary states: before chunk c = kBoundaryChunks * j, S is the state before token 64 j of
  // the sequence -> row base + j, j < bnd_rows. Rows >= num_boundary_states are skipped (device
  // cu_seqlens is not checked against it on the host); bnd_rows = 0 without boundary_states.
  char* bnd = nullptr;  // row base, head hv
  int bnd_rows = 0;
  if (kOutputs && a.boundary_states) {
    const int64_t base = boundary_base(a, job.n);
    const int64_t left = a.num_boundary_states - base;
    const int want = (job.nchunks + kBoundaryChunks - 1) / kBoundaryChunks;
    bnd_rows = left <= 0 ? 0 : (left < want ? int(left) : want);
    bnd = static_cast<char*>(a.boundary_states) +
          (base * a.HV + hv) * matrix * (a.boundary_f32 ? 4 : 2);
  }

  uint16_t* out_rows = a.out + bos * a.out_stride + int64_t(hv) * kV + row;
  // Outer loop: one boundary interval (kBoundaryChunks chunks), so that the rarely taken state
  // store stays out of the hot inner loop.
  for (int c = job.c0; c < c1;) {
    // A vote keeps the branch visibly warp-uniform (ptxas serialises wgmma when the accumulator S
    // is read under a branch it cannot prove uniform).
    if (__any_sync(0xffffffffu, c % kBoundaryChunks == 0 && c / kBoundaryChunks < bnd_rows)) {
      const StateRef dst{
          bnd + int64_t(c / kBoundaryChunks) * a.HV * matrix * (a.boundary_f32 ? 4 : 2),
          a.boundary_f32, a.k_first};
      store_state(dst, row, k0, S, sc.down);
    }
    // f16 operands: the bound tightened from S' itself every kBoundTighten chunks (the per-chunk
    // growth it adds up ignores the decay).
    if constexpr (kF16) {
      if (__any_sync(0xffffffffu, c > job.c0 && c % kBoundTighten == 0))
        sc.bound = fminf(sc.bound, state_bound(S, sc.down)), sc.check();
    }
    const int c_next = (c / kBoundaryChunks + 1) * kBoundaryChunks;
    const int c_end = c_next < c1 ? c_next : c1;
#pragma unroll 1
    for (; c < c_end; ++c, ++flat) {
      const int st = flat % kStages;
      device::bar_sync(Bar::kFull0 + flat % kSlots, kThreads);
      const int nvalid =
          int(eos - (bos + int64_t(c) * kC) < kC ? eos - (bos + int64_t(c) * kC) : kC);
      uint16_t* const out_c = out_rows + int64_t(c) * kC * a.out_stride;
      if constexpr (uses_wgmma<kVs>())
        scan_chunk_wg<kVs, kOutputs, kF16>(a, sm.scan[st], sm.ostage[ws], S, vc, out_c, nvalid,
                                           with_u, &sc);
      else
        scan_chunk<kVs, kOutputs>(a, sm.scan[st], sm.ostage[ws], S, vc, out_c, nvalid, with_u, kh,
                                  key_exchange(sm, vc / 16), flat & 1);
      if (flat + kStages < total) device::bar_arrive(Bar::kEmpty0 + flat % kSlots, kThreads);
    }
  }

  // The CTA's last job: its end state through the free stages (stage_state_rows) where it is f32
  // V-first (segment slots, and f32 V-first final states); job-uniform.
  const bool transition_layout = kPass == Pass::kTransitions && job.transition;
  if (kStaged && uses_wgmma<kVs>() && flat == total && job.end.ptr && job.end.f32 &&
      !job.end.k_first) {
    float* rows = reinterpret_cast<float*>(&sm);
    if (transition_layout)
      stage_state_rows<true>(rows, job.row0, row, k0, S, sc.down);  // M_j, the combine's layout
    else
      stage_state_rows(rows, job.row0, row, k0, S, sc.down);
    copy_state_rows(rows, static_cast<float*>(const_cast<void*>(job.end.ptr)) +
                              int64_t(job.row0) * kK,
                    nullptr, kVs, kStateBarrier, 32 * scan_warps<kVs>(),
                    threadIdx.x - kPrepThreads * kGroups);
  } else if (transition_layout) {
    store_state<true>(job.end, row, k0, S, sc.down);
  } else if (job.end.ptr) {
    store_state(job.end, row, k0, S, sc.down);
  }
}

// A pair job's scan (Pass::kPairs): the value rows of this warp (from zeros) and the same rows of
// the transition (from the identity), chunk by chunk through scan_chunk_pair; then E_j and M_j
// (the latter in the combine's layout). The hand-off as in scan_job, one prepare group. kF16:
// both blocks scaled as scan_job scales a value and a transition job (WarpScale), bit for bit.
template <bool kF16 = false>
__device__ __forceinline__ void scan_pair_job(SharedPlan<128>& sm, const ScanJob& job, int& flat,
                                              int total) {
  constexpr int kGroups = prep_groups<128, true>(), kStages = scan_stages<128>();
  constexpr int kThreads = handoff_threads<128>(), kSlots = handoff_slots<128>();
  using Bar = BarrierIds<128>;
  if (total < 0) total = flat + job.c1 - job.c0;
  const int ws = (threadIdx.x >> 5) - kPrepWarps * kGroups;
  const int vc = 16 * (ws % (128 / 16));
  float SA[kK / 8][4], SB[kK / 8][4];
  load_state(job.init, false, vc, 0, SA);
  load_state(StateRef{nullptr, true, false}, true, vc, 0, SB);
  device::wgmma_fence_operands(reinterpret_cast<float(&)[64]>(SA));
  device::wgmma_fence_operands(reinterpret_cast<float(&)[64]>(SB));
  WarpScale scA{0.0f, 1.0f, 1.0f, 0, false}, scB{0.0f, 1.0f, 1.0f, 0, false};
  if constexpr (kF16) {
    scA.bound = state_bound(SA, 1.0f), scA.check();
    scB.bound = state_bound(SB, 1.0f), scB.check();
  }
#pragma unroll 1
  for (int c = job.c0; c < job.c1; ++c, ++flat) {
    if constexpr (kF16) {  // scan_job's tightening, at the same chunks
      if (__any_sync(0xffffffffu, c > job.c0 && c % kBoundTighten == 0)) {
        scA.bound = fminf(scA.bound, state_bound(SA, scA.down)), scA.check();
        scB.bound = fminf(scB.bound, state_bound(SB, scB.down)), scB.check();
      }
    }
    device::bar_sync(Bar::kFull0 + flat % kSlots, kThreads);
    scan_chunk_pair<kF16>(sm.scan[flat % kStages], SA, SB, vc, &scA, &scB);
    if (flat + kStages < total) device::bar_arrive(Bar::kEmpty0 + flat % kSlots, kThreads);
  }
  if (flat == total) {  // the CTA's last job (every pair CTA has one): E_j and M_j staged
    // M_j's image overlaps the scan stages: every scan warp is done with the last chunk's.
    device::bar_sync(kStateBarrier, 32 * scan_warps<128>());
    float* rows = reinterpret_cast<float*>(&sm);
    stage_state_rows(rows, 0, vc, 0, SA, scA.down);
    stage_state_rows<true>(rows + 128 * kStateLd, 0, vc, 0, SB, scB.down);
    copy_state_rows(rows, static_cast<float*>(const_cast<void*>(job.end.ptr)),
                    static_cast<float*>(const_cast<void*>(job.end_m.ptr)), 128, kStateBarrier,
                    32 * scan_warps<128>(), threadIdx.x - kPrepThreads * kGroups);
  } else {
    store_state(job.end, vc, 0, SA, scA.down);
    store_state<true>(job.end_m, vc, 0, SB, scB.down);
  }
}

// One instantiation per pass, so that the unsplit scan carries none of the split-T branches.
// CTA b does jobs b, b + gridDim.x, ... (one each unless the launcher chose a persistent grid);
// both roles walk the same jobs, so they agree on the sequence of chunks without talking.
// kF16: the kVs = 128 scan with f16 operands for P^T and O^T (scan.cuh WarpScale).
template <int kVs, Pass kPass, bool kF16 = false>
__global__ void __launch_bounds__(block_threads<kVs, kPairLayout<kPass>>(), 1)
    prefill_kernel(const __grid_constant__ PrefillArgs a) {
  static_assert(kPass != Pass::kPairs || kVs == 128, "pairs at vsplit 1 only");
  static_assert(!kF16 || kVs == 128, "f16 operands in the kVs = 128 scan only");
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& sm = *reinterpret_cast<SharedPlan<kVs>*>(smem_bytes);
  constexpr int kGroups = prep_groups<kVs, kPairLayout<kPass>>();
  const int64_t stride = gridDim.x;
  if (threadIdx.x == 0) {
    for (int p = 0; p < kGroups; ++p)
      for (int b = 0; b < 2; ++b) device::mbarrier_init(&sm.raw_full[p][b], 1);
    device::fence_mbarrier_init();
  }
  __syncthreads();  // the only CTA-wide barrier: the mbarriers exist before any load
  if (threadIdx.x < kGroups * kPrepThreads) {
    device::setmaxnreg_dec<prep_regs<kVs, kPairLayout<kPass>>()>();
    // Launched right behind the intra kernel (programmatic stream serialization): its workspace
    // is complete and visible only after this wait. The scan warps read no workspace; they load
    // their start state meanwhile (written before the intra kernel started). Streamed (a.ready):
    // per chunk instead (wait_ready), while the intra grid still runs. Pass::kPairs is launched
    // behind kFirst, which lets it start once every kFirst CTA has passed this wait (below);
    // beside the streamed intra kernel both wait on the ready counters instead. Pass::kOutputs is
    // launched behind the combine, which starts only after pass 1 and the intra kernel are
    // complete: its prepare needs no wait (its scan warps wait for the start states, below).
    if (!a.ready && kPass != Pass::kPairs && kPass != Pass::kOutputs) device::griddep_wait();
    if constexpr (kPass == Pass::kFirst) {
      device::bar_sync(kFirstLaunchBarrier, block_threads<kVs>());
      device::griddep_launch_dependents();
    }
    const int p = threadIdx.x / kPrepThreads;
    int flat = 0;
    uint32_t phases = 0;
    for (int64_t cta = blockIdx.x; cta < a.jobs; cta += stride) {
      const ScanJob job = job_of<kVs, kPass>(a, cta);
      if (!job.valid) continue;  // uniform over the CTA
      // Persistent grid: group 0 reaches a job a few chunks before the scan warps, which then
      // load its start state (load_state, HBM latency on their serial path): prefetched into L2
      // here. Measured (session 9, two A/B calls): 64 x 128 -2.1 / -2.2 %.
      if (p == 0 && stride < a.jobs)
        prefetch_state_slice<kVs>(job.init, job.row0, threadIdx.x - p * kPrepThreads);
      const int first = job.c0 + (p - flat % kGroups + kGroups) % kGroups;
      if ((kPass == Pass::kTransitions || kPass == Pass::kFirst) && job.outputs)
        prepare_job<kVs, Pass::kOutputs, prep_groups<kVs>(), kF16>(a, sm, p, job, first, flat,
                                                                   phases);  // pass 2's code
      else  // (first_out, job_of); a pair job's stage is the value rows' (v^T) without outputs
        prepare_job<kVs, kPass == Pass::kPairs ? Pass::kTransitions : kPass, kGroups, kF16>(
            a, sm, p, job, first, flat, phases);
      flat += job.c1 - job.c0;
    }
  } else {
    device::setmaxnreg_inc<scan_regs<kVs, kPairLayout<kPass>>()>();
    if constexpr (kPass == Pass::kFirst) {  // every thread, once the prepare passed griddep_wait
      device::bar_sync(kFirstLaunchBarrier, block_threads<kVs>());
      device::griddep_launch_dependents();
    }
    if ((threadIdx.x >> 5) - kPrepWarps * kGroups >= scan_warps<kVs>()) return;  // padding
    if constexpr (kPass == Pass::kOutputs) device::griddep_wait();  // the combine's S_in(j)
    // Chunks of all of this CTA's jobs (one job per CTA: known from that job, no extra pass).
    int total = -1;
    if (stride < a.jobs) {
      total = 0;
      for (int64_t cta = blockIdx.x; cta < a.jobs; cta += stride) {
        const ScanJob job = job_of<kVs, kPass>(a, cta);
        if (job.valid) total += job.c1 - job.c0;
      }
    }
    int flat = 0;
    for (int64_t cta = blockIdx.x; cta < a.jobs; cta += stride) {
      const ScanJob job = job_of<kVs, kPass>(a, cta);
      if (!job.valid) continue;
      if constexpr (kPass == Pass::kPairs) {
        scan_pair_job<kF16>(sm, job, flat, total);
      } else if ((kPass == Pass::kTransitions || kPass == Pass::kFirst) && job.outputs) {
        scan_job<kVs, Pass::kOutputs, prep_groups<kVs>(), kF16, true>(a, sm, job, flat, total);
      } else {
        scan_job<kVs, kPass, prep_groups<kVs>(), kF16, kPass != Pass::kWhole || kVs == 128>(
            a, sm, job, flat, total);
      }
    }
  }
  // kPairs: its grid completes only after kFirst's (segment 0's E_0, which the combine reads
  // after this grid): every CTA with a job, and the grid's last CTA in any case (the last to get
  // an SM, so that it holds none a job needs: CTA 0 measured H4 T65536 +30 %, its 132nd CTA in a
  // second wave), waits for it before exiting.
  if constexpr (kPass == Pass::kPairs) {
    if (blockIdx.x == gridDim.x - 1 || job_of<kVs, kPass>(a, blockIdx.x).valid)
      device::griddep_wait();
  }
}

}  // namespace fastkda::prefill_cuda
