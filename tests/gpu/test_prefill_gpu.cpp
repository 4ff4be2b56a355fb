// GPU tests of the chunked prefill (fastkda::forward on Device::kCUDA) against the fp64 oracle
// (DESIGN §5): accuracy over a grid of shapes and modes, the numerical traps (gates of -1000,
// collinear keys with beta ~ 1), varlen with empty and 1-token sequences, state pools, and the
// invariants (causality bit for bit, bitwise reruns, varlen == separate calls, split prefill, rows
// outside every sequence untouched, CUDA-graph capture), and the chunk-boundary states.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu_test_util.h"
#include "scoped_env.h"

namespace fastkda_prefill_test {
namespace {

// Accuracy targets vs the fp64 oracle (RMS-relative). A bf16 final state adds its own rounding.
constexpr double kOutTol = 2.0e-3;
constexpr double kStateTol = 5.0e-4;
constexpr double kStateTolBf16 = 3.0e-3;

using fastkda_test::ScopedEnv;  // the plan's tuning knobs (plan.h) for one scope

// Boundary states (fla's `h`: row base_n + j = sequence n before its token 64 j): every row within
// the state bound of the oracle's (per row), none left NaN, and the rows from num_boundary_states
// on (the dropped ones and the sentinel row) bitwise untouched.
void check_boundary(const Problem& p, const Result& got, const Result& ref) {
  const size_t re = p.row_elems();
  const int64_t rows = p.boundary_rows(), written = rows - p.c.boundary_dropped;
  HostBuf poison(p.c.boundary_dtype, got.boundary.size());
  for (size_t i = 0; i < poison.size(); ++i) poison.set(i, NAN);
  const double tol = p.c.boundary_dtype == DType::kBF16 ? kStateTolBf16 : kStateTol;
  double worst = 0;
  for (int64_t r = 0; r < written; ++r) {
    const size_t lo = size_t(r) * re, hi = lo + re;
    const Err e = compare(got.boundary, ref.boundary, [&](size_t i) { return i >= lo && i < hi; });
    worst = std::max(worst, e.rms_rel);
    EXPECT_EQ(e.nonfinite, 0u) << "boundary row " << r << " not fully written  " << p.describe();
    EXPECT_LE(e.rms_rel, tol) << "boundary row " << r << ": " << e << "  " << p.describe();
  }
  for (int64_t r = std::max<int64_t>(written, 0); r <= rows; ++r)
    EXPECT_TRUE(got.boundary.same_bits(poison, size_t(r) * re, size_t(r + 1) * re))
        << "boundary row " << r << " (>= num_boundary_states " << written << ") was written  "
        << p.describe();
  std::printf("[prefill] boundary: %lld of %lld rows written, worst row rms_rel %g\n",
              (long long)written, (long long)rows, worst);
}

// Runs one problem on the GPU and the oracle; checks every covered output row is finite and
// accurate, uncovered rows untouched (still NaN bits), written state slots accurate, the other
// slots bitwise unchanged. Returns the GPU result.
Result check_against_oracle(const Problem& p, const char* label = "") {
  DeviceInputs d(p);
  const Result got = run_gpu(p, d);
  const Result ref = run_oracle(p);
  const auto rows = covered_rows(p);
  const size_t row_elems = size_t(p.c.HV) * kV;
  const Err eo = compare(got.out, ref.out, [&](size_t i) { return rows[i / row_elems]; });
  size_t touched = 0;
  for (size_t i = 0; i < got.out.size(); ++i)
    if (!rows[i / row_elems] && got.out.h[i] != kPoison) ++touched;
  const auto slots = written_slots(p);
  const size_t slot_elems = size_t(p.c.HV) * kK * kV;
  const Err es = compare(got.state, ref.state, [&](size_t i) { return slots[i / slot_elems]; });
  size_t changed = 0;
  if (p.has_init() && p.init_dtype == p.c.final_dtype) {
    for (size_t i = 0; i < got.state.size(); ++i)
      if (!slots[i / slot_elems] && got.state.get(i) != p.init_state.get(i) &&
          !(std::isnan(got.state.get(i)) && std::isnan(p.init_state.get(i))))
        ++changed;
  }
  std::printf("[prefill] %-22s out %s | state %s\n", label,
              ::testing::PrintToString(eo.rms_rel).c_str(),
              ::testing::PrintToString(es.rms_rel).c_str());
  EXPECT_EQ(eo.nonfinite, 0u) << p.describe();
  EXPECT_LE(eo.rms_rel, kOutTol) << "out " << eo << "  " << p.describe();
  EXPECT_EQ(touched, 0u) << "rows outside every sequence were written  " << p.describe();
  if (p.c.final_state) {
    EXPECT_EQ(es.nonfinite, 0u) << p.describe();
    const double tol = p.c.final_dtype == DType::kBF16 ? kStateTolBf16 : kStateTol;
    EXPECT_LE(es.rms_rel, tol) << "state " << es << "  " << p.describe();
  }
  EXPECT_EQ(changed, 0u) << "state slots that must stay untouched changed  " << p.describe();
  if (p.c.boundary) check_boundary(p, got, ref);
  return got;
}

// Inputs and output of the default case on the GPU, no states: the parameters of the validation
// tests (the buffers live as long as the struct).
struct ValidationSetup {
  Problem p{Case{}};
  DeviceInputs d{p};
  DeviceBuf out{p.out_elems() * 2};
  fastkda::ForwardParams f = make();

  fastkda::ForwardParams make() {
    fastkda::ForwardParams params =
        p.params({d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(), nullptr, nullptr,
                  nullptr, nullptr, nullptr, nullptr, nullptr},
                 fastkda::Device::kCUDA);
    params.out = out.get();
    return params;
  }
};

TEST(PrefillGpu, WorkspaceSizeAndDimsChecked) {
  FASTKDA_REQUIRE_GPU();
  ValidationSetup v;  // forward_workspace_size validates the problem first
  fastkda::ForwardParams& f = v.f;
  // Tb, A_qk and the row norms (2176 B) per chunk slot and value head; slots = tokens / 16 + N
  // (the two-kernel plan; the streamed plan's counters: StreamedIntra).
  ScopedEnv no_stream("FASTKDA_PREFILL_STREAM", "0");
  const size_t slots = size_t(f.B * f.T / 16 + f.B);
  EXPECT_EQ(fastkda::forward_workspace_size(f), (slots * f.HV * 2176 + 255) / 256 * 256);
  DeviceBuf ws(fastkda::forward_workspace_size(f));
  f.workspace = ws.get();
  f.workspace_bytes = fastkda::forward_workspace_size(f) - 1;
  expect_error([&] { fastkda::forward(f); }, "workspace_bytes", "a short workspace");
  f.workspace = nullptr, f.workspace_bytes = 0;  // K = 64 needs none (prefill() rejects it)
  f.K = 64;
  expect_error([&] { fastkda::forward(f); }, "K", "K = 64 on CUDA");
  f.K = 128;
  // The plan's tuning knobs: a bad value is an error naming the variable, from the size query
  // already (before anything is launched or written).
  for (const auto& [name, value] :
       {std::pair{"FASTKDA_PREFILL_SEG", "100"}, std::pair{"FASTKDA_PREFILL_SEG", "64x"},
        std::pair{"FASTKDA_PREFILL_ORDER", "yes"}, std::pair{"FASTKDA_PREFILL_VSPLIT", "3"},
        std::pair{"FASTKDA_PREFILL_PERSIST", "2"}, std::pair{"FASTKDA_PREFILL_STREAM", "on"},
        std::pair{"FASTKDA_PREFILL_RETIRE", "101"}, std::pair{"FASTKDA_PREFILL_FIRST_OUT", "2"},
        std::pair{"FASTKDA_PREFILL_SEG0", "100"}, std::pair{"FASTKDA_PREFILL_SEG0", "128"},
        std::pair{"FASTKDA_PREFILL_PAIR", "2"}}) {
    ScopedEnv env(name, value);
    expect_error([&] { (void)fastkda::forward_workspace_size(f); }, name,
                 std::string(name) + "=" + value);
  }
}

// B * T >= 2^31 tokens: the TMA box coordinates of the loads are 32-bit, so forward raises an
// error naming T before anything is launched (the buffers here are far too small for such a T:
// any launch would read out of bounds; the workspace size is only claimed).
TEST(PrefillGpu, TokensBeyondInt32Rejected) {
  FASTKDA_REQUIRE_GPU();
  ValidationSetup v;
  fastkda::ForwardParams& f = v.f;
  f.B = 1, f.T = int64_t(1) << 31;
  DeviceBuf ws(256);
  f.workspace = ws.get();
  // The size query raises the same error (CPU test Validation.CudaTokenLimitInSizeQuery).
  expect_error([&] { (void)fastkda::forward_workspace_size(f); }, "T:",
               "B * T = 2^31 on CUDA: the workspace size query");
  f.workspace_bytes = 256;
  // Poisoned out and workspace: nothing may be written before the error.
  const size_t out_bytes = v.p.out_elems() * 2;
  ASSERT_EQ(cudaMemset(v.out.get(), 0xff, out_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(ws.get(), 0xff, 256), cudaSuccess);
  expect_error([&] { fastkda::forward(f); }, "T:", "B * T = 2^31 on CUDA");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out_h(out_bytes), ws_h(256);
  v.out.to_host(out_h.data());
  ws.to_host(ws_h.data());
  EXPECT_TRUE(std::all_of(out_h.begin(), out_h.end(), [](uint8_t b) { return b == 0xff; }))
      << "out written before the error";
  EXPECT_TRUE(std::all_of(ws_h.begin(), ws_h.end(), [](uint8_t b) { return b == 0xff; }))
      << "workspace written before the error";
}

// Lengths around the chunk boundaries (kC = 16) and a long one.
TEST(PrefillGpu, LengthGrid) {
  FASTKDA_REQUIRE_GPU();
  for (int64_t T : {1, 15, 16, 17, 63, 64, 65, 1000}) {
    Case c;
    c.B = 2, c.T = T, c.H = 2, c.HV = 4;
    check_against_oracle(Problem(c), ("T=" + std::to_string(T)).c_str());
  }
}

TEST(PrefillGpu, GateModes) {
  FASTKDA_REQUIRE_GPU();
  {
    Case c;  // bounded without A_log / dt_bias, lower bound -2
    c.T = 200, c.A_log = false, c.dt_bias = false, c.lower_bound = -2.0f;
    check_against_oracle(Problem(c), "bounded plain");
  }
  {
    Case c;  // Kimi-Linear: softplus, unbounded
    c.T = 200, c.gate = GateMode::kSoftplus;
    check_against_oracle(Problem(c), "softplus");
  }
  {
    Case c;  // softplus with tokens at -1000 (softplus(1000) * A)
    c.T = 300, c.gate = GateMode::kSoftplus, c.extreme_gates = 0.1;
    check_against_oracle(Problem(c), "softplus -1000");
  }
  {
    Case c;  // every token at -1000
    c.T = 100, c.gate = GateMode::kSoftplus, c.extreme_gates = 1.0;
    check_against_oracle(Problem(c), "softplus all -1000");
  }
  {
    Case c;  // a bf16 gate (the benchmark's), some tokens at -1000, a partial last chunk
    c.T = 300, c.gate = GateMode::kSoftplus, c.extreme_gates = 0.1, c.g_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "softplus bf16 g -1000");
  }
  {
    Case c;  // pre-gated bf16 log decays
    c.T = 130, c.gate = GateMode::kPreGated, c.extreme_gates = 0.1, c.g_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "pre-gated bf16 g");
  }
  {
    Case c;  // pre-gated log decays, some at -1000
    c.T = 300, c.gate = GateMode::kPreGated, c.extreme_gates = 0.05;
    check_against_oracle(Problem(c), "pre-gated -1000");
  }
  {
    Case c;  // half the tokens at -1000, the others mild: every anchor level splits both kinds
    c.T = 300, c.gate = GateMode::kPreGated, c.extreme_gates = 0.5;
    check_against_oracle(Problem(c), "pre-gated half -1000");
  }
  {
    Case c;  // bounded gates saturated at the lower bound (-5 per token)
    c.T = 200, c.extreme_gates = 1.0;
    check_against_oracle(Problem(c), "bounded saturated");
  }
}

TEST(PrefillGpu, BetaModesDtypesLayouts) {
  FASTKDA_REQUIRE_GPU();
  {
    Case c;
    c.T = 130, c.beta_mode = BetaMode::kGiven, c.g_dtype = DType::kBF16,
    c.beta_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "beta given, bf16 g/b");
  }
  {
    Case c;
    c.T = 130, c.beta_mode = BetaMode::kTwoSigmoid, c.layout = StateLayout::kKFirst;
    check_against_oracle(Problem(c), "2sigmoid, k-first");
  }
  {
    Case c;
    c.T = 130, c.init = InitState::kBF16, c.final_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "bf16 states");
  }
  {
    Case c;
    c.T = 130, c.init = InitState::kBF16, c.final_dtype = DType::kBF16,
    c.layout = StateLayout::kKFirst;
    check_against_oracle(Problem(c), "bf16 states k-first");
  }
  {
    Case c;
    c.T = 77, c.init = InitState::kNone, c.final_state = false;
    check_against_oracle(Problem(c), "no states");
  }
  {
    Case c;
    c.T = 77, c.l2norm = false, c.scale = 0.3f, c.strided = true;
    check_against_oracle(Problem(c), "no l2norm, strided");
  }
  {
    Case c;  // GVA: 3 value heads per q/k head
    c.B = 2, c.T = 90, c.H = 2, c.HV = 6;
    check_against_oracle(Problem(c), "GVA r=3");
  }
}

TEST(PrefillGpu, CollinearKeysBetaNearOne) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.T = 96, c.collinear = true;
  check_against_oracle(Problem(c), "collinear");
}

TEST(PrefillGpu, Varlen) {
  FASTKDA_REQUIRE_GPU();
  for (bool i64 : {false, true}) {
    Case c;
    c.seqlens = {0, 1, 17, 0, 100, 64, 1, 33};
    c.cu_i64 = i64, c.H = 2, c.HV = 4;
    check_against_oracle(Problem(c), i64 ? "varlen i64" : "varlen i32");
  }
  {
    Case c;  // serving: pool by index (some -1), updated in place
    c.seqlens = {5, 0, 70, 16, 1};
    c.pool = true, c.in_place = true, c.HV = 4;
    check_against_oracle(Problem(c), "pool in place");
  }
  {
    Case c;  // rows before the first and after the last sequence stay untouched
    c.seqlens = {20, 33};
    c.lead = 8, c.tail = 27;
    check_against_oracle(Problem(c), "uncovered rows");
  }
}

// Every value split (kVs = 128, 64, 32 value rows per CTA): the small cases above fill at most 32
// heads and so always take vsplit = 2 (the plan's cheapest); FASTKDA_PREFILL_VSPLIT forces each.
// At vsplit 1 the default case runs the f16 scan (scan.cuh WarpScale); pre-gated decays with
// given betas keep the tf32 one there (plan.h f16_scan), so both are covered.
TEST(PrefillGpu, EveryValueSplit) {
  FASTKDA_REQUIRE_GPU();
  for (const char* vs : {"1", "2", "4"}) {
    setenv("FASTKDA_PREFILL_VSPLIT", vs, 1);
    Case c;
    c.seqlens = {0, 1, 17, 100, 64, 33};
    c.H = 2, c.HV = 4, c.pool = true;
    check_against_oracle(Problem(c), (std::string("vsplit ") + vs).c_str());
    c.gate = GateMode::kPreGated, c.beta_mode = BetaMode::kGiven;
    check_against_oracle(Problem(c), (std::string("tf32 modes, vsplit ") + vs).c_str());
  }
  unsetenv("FASTKDA_PREFILL_VSPLIT");
}

TEST(PrefillGpu, LongFewHeads) {
  FASTKDA_REQUIRE_GPU();
  {
    Case c;
    c.T = 8192, c.H = 1, c.HV = 2;
    check_against_oracle(Problem(c), "T=8192 HV=2");
  }
  {
    Case c;
    c.T = 65536, c.H = 1, c.HV = 1, c.g_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "T=65536 HV=1");
  }
}

// Output rows <= t0 must not depend on rows > t0, bit for bit: p is run again with fresh random
// q, k, v, g (20x: strong gates) and beta in every row after t0.
void check_causal(const Problem& p, int64_t t0, const char* what) {
  const Result a = run_gpu(p, DeviceInputs(p));
  Problem p2 = p;
  std::mt19937_64 rng(p.seed + 1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t t = t0 + 1; t < p.rows; ++t) {
    for (int64_t i = 0; i < p.q_stride; ++i) p2.q.set(size_t(t * p.q_stride + i), normal(rng));
    for (int64_t i = 0; i < p.k_stride; ++i) p2.k.set(size_t(t * p.k_stride + i), normal(rng));
    for (int64_t i = 0; i < p.v_stride; ++i) p2.v.set(size_t(t * p.v_stride + i), normal(rng));
    for (int64_t i = 0; i < p.g_stride; ++i)
      p2.g.set(size_t(t * p.g_stride + i), 20.f * normal(rng));
    for (int64_t i = 0; i < p.beta_stride; ++i)
      p2.beta.set(size_t(t * p.beta_stride + i), normal(rng));
  }
  const Result b = run_gpu(p2, DeviceInputs(p2));
  const size_t prefix = size_t((t0 + 1) * p.c.HV * kV);
  const auto diff = std::mismatch(a.out.h.begin(), a.out.h.begin() + prefix, b.out.h.begin());
  const size_t first = size_t(diff.first - a.out.h.begin());
  EXPECT_EQ(first, prefix) << what << ": rows <= " << t0 << " changed with later rows (first: row "
                           << first / (p.c.HV * kV) << ", head " << first / kV % p.c.HV
                           << ", value " << first % kV << ")  " << p.describe();
}

TEST(PrefillGpu, CausalBitForBit) {
  FASTKDA_REQUIRE_GPU();
  for (GateMode gate : {GateMode::kBounded, GateMode::kSoftplus}) {
    Case c;
    c.T = 100, c.gate = gate, c.extreme_gates = gate == GateMode::kSoftplus ? 0.2 : 0.0;
    check_causal(Problem(c), 37, "unsplit");  // mid-chunk
  }
}

// The unsplit kVs = 128 scan's f16 operands (scan.cuh WarpScale): inputs scaled far from the unit
// range move each warp's scale of S^T off 2^0 (v x 2^12: the bound passes 2^14 within the first
// chunks; v and the initial state x 2^-16: it stays under 2^-4; an initial state x 2^20: it starts
// past 2^14, then decays), with boundary states; the same inputs at vsplit 2 (tf32) too. The
// errors are relative, so the bounds are the usual ones. Causality under a moving scale: the rows
// after t0 change the bound of their chunk, and the scale of the next ones only.
TEST(PrefillGpu, F16ScaledState) {
  FASTKDA_REQUIRE_GPU();
  struct Scaling {
    const char* what;
    float v, init;
  };
  // vsplit 1 with split T forced (128-token segments: value and transition rows, pairs, the
  // combine, the output pass, all f16 and scaled), vsplit 1 and 2 unsplit.
  for (const char* vs : {"1 seg128", "1", "2"}) {
    ScopedEnv env("FASTKDA_PREFILL_VSPLIT", std::string(vs).substr(0, 1).c_str());
    ScopedEnv env_seg("FASTKDA_PREFILL_SEG", std::string(vs).size() > 1 ? "128" : "0");
    for (const Scaling& sc : {Scaling{"v x 2^12", 0x1p12f, 1.0f},
                              Scaling{"v, init x 2^-16", 0x1p-16f, 0x1p-16f},
                              Scaling{"init x 2^20", 1.0f, 0x1p20f},
                              Scaling{"init x 2^20, v x 2^-12", 0x1p-12f, 0x1p20f}}) {
      Case c;
      c.T = 300, c.H = 1, c.HV = 2, c.boundary = true;
      Problem p(c);
      for (size_t i = 0; i < p.v.size(); ++i) p.v.set(i, p.v.get(i) * sc.v);
      for (size_t i = 0; i < p.init_state.size(); ++i)
        p.init_state.set(i, p.init_state.get(i) * sc.init);
      check_against_oracle(p, (std::string(sc.what) + ", vsplit " + vs).c_str());
    }
  }
  ScopedEnv env("FASTKDA_PREFILL_VSPLIT", "1");
  Case c;
  c.T = 100;
  Problem p(c);
  for (size_t i = 0; i < p.v.size(); ++i) p.v.set(i, p.v.get(i) * 0x1p12f);
  check_causal(p, 37, "v x 2^12");
}

// A NaN gate stays visible (the per-token decay floor is a max.NaN, tf32 operands are rounded by
// cvt.rn, which keeps NaN): one NaN raw gate entry at token t, head 0, key column 5 makes every
// output of head 0 from token t on and its whole final state NaN (a NaN decay column reaches every
// value row through the next chunk's W S); head 0 before t's chunk and every other head are
// bitwise the run without it (heads are independent). Rows of t's chunk before t are not checked:
// the chunk's matrix products multiply the zeros above their diagonals with row t's NaN.
TEST(PrefillGpu, NanGatePropagates) {
  FASTKDA_REQUIRE_GPU();
  for (GateMode gate : {GateMode::kBounded, GateMode::kSoftplus, GateMode::kPreGated}) {
    Case c;
    c.T = 100, c.gate = gate;
    const Problem p(c);
    Problem p2 = p;
    const int64_t t = 37, chunk0 = t / 16 * 16;
    p2.g.set(size_t(t * p.g_stride + 5), NAN);
    const Result a = run_gpu(p, DeviceInputs(p)), b = run_gpu(p2, DeviceInputs(p2));
    const size_t V = kV, head_state = size_t(kK) * kV;
    for (int64_t r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < c.HV; ++hv) {
        const size_t lo = (size_t(r) * c.HV + hv) * V;
        if (hv == 0 && r >= chunk0 && r < t) continue;
        if (hv != 0 || r < chunk0) {
          EXPECT_TRUE(b.out.same_bits(a.out, lo, lo + V))
              << to_string(gate) << ": row " << r << " head " << hv << " changed  " << p.describe();
        } else {
          size_t nan = 0;
          for (size_t i = lo; i < lo + V; ++i) nan += std::isnan(b.out.get(i));
          EXPECT_EQ(nan, V) << to_string(gate) << ": row " << r << " of head 0  " << p.describe();
        }
      }
    size_t nan = 0;
    for (size_t i = 0; i < head_state; ++i) nan += std::isnan(b.state.get(i));
    EXPECT_EQ(nan, head_state) << to_string(gate) << ": final state of head 0  " << p.describe();
    for (int hv = 1; hv < c.HV; ++hv)
      EXPECT_TRUE(b.state.same_bits(a.state, hv * head_state, (hv + 1) * head_state))
          << to_string(gate) << ": final state of head " << hv << "  " << p.describe();
  }
}

TEST(PrefillGpu, BitwiseReruns) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.seqlens = {300, 1, 77};
  c.gate = GateMode::kSoftplus, c.extreme_gates = 0.05, c.HV = 4;
  Problem p(c);
  DeviceInputs d(p);
  const Result a = run_gpu(p, d), b = run_gpu(p, d);
  EXPECT_TRUE(a.out.same_bits(b.out)) << p.describe();
  EXPECT_TRUE(a.state.same_bits(b.state)) << p.describe();
}

// dt_bias needs only its f32 alignment (the intra kernels read it by scalars): a pointer 4 bytes
// past a 16-byte boundary gives the aligned run's result bit for bit, on both intra plans.
TEST(PrefillGpu, DtBiasUnaligned) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.T = 300, c.HV = 2;
  Problem p(c);
  DeviceInputs aligned(p), shifted(p);
  std::vector<float> pad(p.dt_bias.size() + 1, 0.0f);
  std::copy(p.dt_bias.begin(), p.dt_bias.end(), pad.begin() + 1);
  shifted.dt_bias = DeviceBuf(pad.data(), pad.size() * 4);
  shifted.dt_bias_offset = 1;
  for (const char* stream : {"0", "1"}) {
    ScopedEnv env("FASTKDA_PREFILL_STREAM", stream);
    const Result a = run_gpu(p, aligned), b = run_gpu(p, shifted);
    EXPECT_TRUE(a.out.same_bits(b.out)) << "stream " << stream << "  " << p.describe();
    EXPECT_TRUE(a.state.same_bits(b.state)) << "stream " << stream << "  " << p.describe();
  }
}

// Varlen == separate calls, bit for bit (each (sequence, head) is computed independently).
TEST(PrefillGpu, VarlenEqualsSeparateCalls) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.seqlens = {40, 0, 129, 16};
  c.HV = 2;
  Problem p(c);
  const Result all = run_gpu(p, DeviceInputs(p));
  const size_t row_elems = size_t(p.c.HV) * kV, matrix = size_t(p.c.HV) * kK * kV;
  for (size_t n = 0; n < p.c.seqlens.size(); ++n) {
    Case cn = c;
    cn.seqlens = {p.c.seqlens[n]};
    Problem pn(cn, p.seed);
    const int64_t bos = p.cu[n];
    auto slice = [&](const HostBuf& src, HostBuf& dst, int64_t stride) {
      for (size_t i = 0; i < dst.size(); ++i) dst.set(i, src.get(size_t(bos * stride) + i));
    };
    slice(p.q, pn.q, p.q_stride), slice(p.k, pn.k, p.k_stride), slice(p.v, pn.v, p.v_stride);
    slice(p.g, pn.g, p.g_stride), slice(p.beta, pn.beta, p.beta_stride);
    pn.A_log = p.A_log, pn.dt_bias = p.dt_bias;
    for (size_t i = 0; i < matrix; ++i) pn.init_state.set(i, p.init_state.get(n * matrix + i));
    const Result one = run_gpu(pn, DeviceInputs(pn));
    EXPECT_TRUE(std::equal(one.out.h.begin(), one.out.h.end(), all.out.h.begin() + bos * row_elems))
        << "sequence " << n << "  " << p.describe();
    EXPECT_TRUE(
        std::equal(one.state.f.begin(), one.state.f.end(), all.state.f.begin() + n * matrix))
        << "sequence " << n << "  " << p.describe();
  }
}

// T = 1M tokens with 64-bit offsets: one varlen call whose first sequence has 2^20 tokens and
// whose second (200 tokens) starts at token row 2^20 = element 2^31 of q, k, v, out (H = HV = 16),
// so every token-indexed address of the second sequence is past int32. Under the separate call's
// plan the second sequence must equal the same inputs run on their own bit for bit (varlen ==
// separate calls) and be within the oracle bounds; the first must come out finite (its final
// state, its last 4096 output rows and every 65536th row). Under the default plan (split T) the
// second must stay within the tolerances of the separate call. The first sequence tiles 4096
// random tokens; ~28 GB of device memory.
TEST(PrefillGpu, MillionTokens64BitOffsets) {
  FASTKDA_REQUIRE_GPU();
  constexpr int64_t kL0 = int64_t(1) << 20, kL1 = 200, kPattern = 4096, kT = kL0 + kL1;
  Case c;
  c.seqlens = {kPattern, kL1};
  c.H = c.HV = 16;
  const Problem p(c);  // rows [0, kPattern): the tile of sequence 0; then sequence 1
  const size_t matrix = size_t(c.HV) * kK * kV, row_out = size_t(c.HV) * kV;

  // Sequence 1 on its own (and against the oracle).
  Case c1 = c;
  c1.seqlens = {kL1};
  Problem p1(c1, p.seed);
  auto slice = [&](const HostBuf& src, HostBuf& dst, int64_t stride) {
    for (size_t i = 0; i < dst.size(); ++i) dst.set(i, src.get(size_t(kPattern * stride) + i));
  };
  slice(p.q, p1.q, p.q_stride), slice(p.k, p1.k, p.k_stride), slice(p.v, p1.v, p.v_stride);
  slice(p.g, p1.g, p.g_stride), slice(p.beta, p1.beta, p.beta_stride);
  p1.A_log = p.A_log, p1.dt_bias = p.dt_bias;
  for (size_t i = 0; i < matrix; ++i) p1.init_state.set(i, p.init_state.get(matrix + i));
  const Result one = check_against_oracle(p1, "tail of a 1M call");

  // The 1M-token call: rows [0, kL0) tile the first kPattern rows, rows [kL0, kT) are sequence 1.
  auto fill = [&](const HostBuf& host, int64_t stride, DeviceBuf& dev) {
    const size_t rb = size_t(stride) * fastkda::dtype_size(host.dtype);  // bytes per token row
    char* d = static_cast<char*>(dev.get());
    const char* h = static_cast<const char*>(host.data());
    bool ok = cudaMemcpy(d, h, kPattern * rb, cudaMemcpyHostToDevice) == cudaSuccess;
    for (int64_t n = kPattern; n < kL0; n *= 2)
      ok = ok && cudaMemcpy(d + n * rb, d, std::min(n, kL0 - n) * rb, cudaMemcpyDeviceToDevice) ==
                     cudaSuccess;
    return ok && cudaMemcpy(d + kL0 * rb, h + kPattern * rb, kL1 * rb, cudaMemcpyHostToDevice) ==
                     cudaSuccess;
  };
  auto bytes = [&](const HostBuf& host, int64_t stride) {
    return size_t(kT * stride) * fastkda::dtype_size(host.dtype);
  };
  DeviceBuf q(bytes(p.q, p.q_stride)), k(bytes(p.k, p.k_stride)), v(bytes(p.v, p.v_stride));
  DeviceBuf g(bytes(p.g, p.g_stride)), beta(bytes(p.beta, p.beta_stride));
  DeviceBuf out(size_t(kT) * row_out * 2), fin(2 * matrix * 4);
  ASSERT_TRUE(q.get() && k.get() && v.get() && g.get() && beta.get() && out.get() && fin.get())
      << "cudaMalloc failed: the test needs ~28 GB of device memory";
  ASSERT_TRUE(fill(p.q, p.q_stride, q) && fill(p.k, p.k_stride, k) && fill(p.v, p.v_stride, v) &&
              fill(p.g, p.g_stride, g) && fill(p.beta, p.beta_stride, beta));
  ASSERT_EQ(cudaMemset(out.get(), 0xff, size_t(kT) * row_out * 2), cudaSuccess);  // bf16 NaN
  const std::vector<int64_t> cu = {0, kL0, kT};
  DeviceBuf dcu(cu.data(), cu.size() * 8), A_log(p.A_log.data(), p.A_log.size() * 4),
      dt_bias(p.dt_bias.data(), p.dt_bias.size() * 4), init(p.init_state.data(), 2 * matrix * 4);

  Problem big = p;  // same options and strides; only the token layout differs
  big.c.T = kT, big.c.cu_i64 = true, big.rows = kT, big.cu = cu;
  fastkda::ForwardParams f =
      big.params({q.get(), k.get(), v.get(), g.get(), beta.get(), dcu.get(),
                  static_cast<const float*>(A_log.get()), static_cast<const float*>(dt_bias.get()),
                  out.get(), init.get(), fin.get(), nullptr},
                 fastkda::Device::kCUDA);
  DeviceBuf ws(fastkda::forward_workspace_size(f));
  f.workspace = ws.get(), f.workspace_bytes = fastkda::forward_workspace_size(f);
  {
    // The plan of the separate call (value split 4, no split T): bit for bit needs the same
    // arithmetic, and since session 8 the cost model splits T for these long sequences at
    // kVs = 128 (that plan runs below, checked within tolerances).
    ScopedEnv no_split("FASTKDA_PREFILL_SEG", "0");
    fastkda::forward(f);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Sequence 1: bit for bit the separate call.
  std::vector<uint16_t> tail(size_t(kL1) * row_out);
  ASSERT_EQ(cudaMemcpy(tail.data(), static_cast<char*>(out.get()) + size_t(kL0) * row_out * 2,
                       tail.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<float> states(2 * matrix);
  fin.to_host(states.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), one.out.h.begin())) << p.describe();
  EXPECT_TRUE(std::equal(states.begin() + matrix, states.end(), one.state.f.begin()))
      << p.describe();

  // Sequence 0: finite final state and output rows (bf16 exponent not all ones).
  size_t bad_state = 0;
  for (size_t i = 0; i < matrix; ++i) bad_state += !std::isfinite(states[i]);
  EXPECT_EQ(bad_state, 0u) << p.describe();
  std::vector<int64_t> rows;
  for (int64_t t = kL0 - 4096; t < kL0; ++t) rows.push_back(t);
  for (int64_t t = 0; t < kL0; t += 65536) rows.push_back(t);
  std::vector<uint16_t> row(row_out);
  size_t bad_out = 0;
  for (int64_t t : rows) {
    ASSERT_EQ(cudaMemcpy(row.data(), static_cast<char*>(out.get()) + size_t(t) * row_out * 2,
                         row_out * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (uint16_t x : row) bad_out += (x & 0x7f80u) == 0x7f80u;
  }
  EXPECT_EQ(bad_out, 0u) << "non-finite output in the first sequence  " << p.describe();
  std::printf("[prefill] 1M tokens: tail bitwise %s, head non-finite state %zu / out %zu\n",
              std::equal(tail.begin(), tail.end(), one.out.h.begin()) ? "equal" : "DIFFERENT",
              bad_state, bad_out);

  // The same call under the default plan (since session 8: split T at kVs = 128, whose segment
  // records and combine then also run past 2^31 elements): sequence 1 within the tolerances of the
  // separate call (other arithmetic: not bit for bit), sequence 0's final state finite. The
  // workspace was sized for this plan (no pin when it was queried).
  ASSERT_EQ(cudaMemset(static_cast<char*>(out.get()) + size_t(kL0) * row_out * 2, 0xff,
                       size_t(kL1) * row_out * 2),
            cudaSuccess);
  fastkda::forward(f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostBuf tail2(DType::kBF16, size_t(kL1) * row_out), state2(DType::kF32, matrix);
  ASSERT_EQ(cudaMemcpy(tail2.h.data(), static_cast<char*>(out.get()) + size_t(kL0) * row_out * 2,
                       tail2.bytes(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  fin.to_host(states.data());
  std::copy(states.begin() + matrix, states.end(), state2.f.begin());
  const Err eo = compare(tail2, one.out), es = compare(state2, one.state);
  size_t bad_state2 = 0;
  for (size_t i = 0; i < matrix; ++i) bad_state2 += !std::isfinite(states[i]);
  EXPECT_EQ(eo.nonfinite, 0u) << p.describe();
  EXPECT_LE(eo.rms_rel, kOutTol) << "default plan, tail out " << eo << "  " << p.describe();
  EXPECT_LE(es.rms_rel, kStateTol) << "default plan, tail state " << es << "  " << p.describe();
  EXPECT_EQ(bad_state2, 0u) << "default plan  " << p.describe();
  std::printf("[prefill] 1M tokens, default plan: tail vs the separate call out %g | state %g, "
              "head non-finite state %zu\n",
              eo.rms_rel, es.rms_rel, bad_state2);
}

// prefill(T1) then prefill(T2) from the carried f32 state == prefill(T1 + T2) (to rounding).
TEST(PrefillGpu, SplitPrefillMatchesOne) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.seqlens = {37, 91};  // as two chunks of one sequence: first 37 tokens, then 91
  c.HV = 2;
  Problem p(c);
  Case whole = c;
  whole.seqlens = {128};
  Problem pw(whole, p.seed);
  pw.q = p.q, pw.k = p.k, pw.v = p.v, pw.g = p.g, pw.beta = p.beta;
  pw.A_log = p.A_log, pw.dt_bias = p.dt_bias;
  const size_t matrix = size_t(p.c.HV) * kK * kV;
  for (size_t i = 0; i < matrix; ++i) pw.init_state.set(i, p.init_state.get(i));
  const Result rw = run_gpu(pw, DeviceInputs(pw));

  Case first = c;
  first.seqlens = {37};
  Problem p1(first, p.seed);
  auto slice = [](const HostBuf& src, HostBuf& dst, int64_t off) {
    for (size_t i = 0; i < dst.size(); ++i) dst.set(i, src.get(size_t(off) + i));
  };
  auto take = [&](Problem& dst, int64_t bos) {
    slice(p.q, dst.q, bos * p.q_stride), slice(p.k, dst.k, bos * p.k_stride);
    slice(p.v, dst.v, bos * p.v_stride), slice(p.g, dst.g, bos * p.g_stride);
    slice(p.beta, dst.beta, bos * p.beta_stride);
    dst.A_log = p.A_log, dst.dt_bias = p.dt_bias;
  };
  take(p1, 0);
  for (size_t i = 0; i < matrix; ++i) p1.init_state.set(i, p.init_state.get(i));
  const Result r1 = run_gpu(p1, DeviceInputs(p1));
  Case second = c;
  second.seqlens = {91};
  Problem p2(second, p.seed);
  take(p2, 37);
  p2.init_state = r1.state;
  const Result r2 = run_gpu(p2, DeviceInputs(p2));

  HostBuf out_split(DType::kBF16, rw.out.size());
  std::copy(r1.out.h.begin(), r1.out.h.end(), out_split.h.begin());
  std::copy(r2.out.h.begin(), r2.out.h.end(), out_split.h.begin() + r1.out.size());
  const Err eo = compare(out_split, rw.out, [](size_t) { return true; });
  const Err es = compare(r2.state, rw.state, [](size_t) { return true; });
  EXPECT_LE(eo.rms_rel, kOutTol) << eo << "  " << p.describe();
  EXPECT_LE(es.rms_rel, kStateTol) << es << "  " << p.describe();
}

// Boundary states vs the oracle: varlen with empty, 1-, 64-, 65-token and long sequences (i32 / i64
// cu_seqlens, with and without the host copy; without it the pool path with -1 indices, where
// row j = 0 is zeros), fixed-length batches; f32 and bf16 rows, both layouts.
TEST(PrefillGpu, BoundaryStates) {
  FASTKDA_REQUIRE_GPU();
  struct Variant {
    bool i64, cu_host;
    DType dtype;
    StateLayout layout;
  };
  for (const Variant& v : {Variant{false, true, DType::kF32, StateLayout::kVFirst},
                           Variant{true, true, DType::kBF16, StateLayout::kKFirst},
                           Variant{false, false, DType::kF32, StateLayout::kKFirst},
                           Variant{true, false, DType::kBF16, StateLayout::kVFirst}}) {
    Case c;
    c.seqlens = {0, 1, 64, 65, 300, 0, 128};
    c.cu_i64 = v.i64, c.cu_host = v.cu_host, c.pool = !v.cu_host;
    c.H = 1, c.HV = 2;
    c.boundary = true, c.boundary_dtype = v.dtype, c.layout = v.layout;
    check_against_oracle(Problem(c), "boundary varlen");
  }
  {
    Case c;
    c.B = 3, c.T = 130, c.boundary = true;
    check_against_oracle(Problem(c), "boundary B=3 f32");
  }
  {
    Case c;
    c.B = 2, c.T = 192, c.init = InitState::kNone, c.layout = StateLayout::kKFirst;
    c.boundary = true, c.boundary_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "boundary B=2 bf16");
  }
}

// Every value split writes its own V-slice of every boundary row.
TEST(PrefillGpu, BoundaryStatesEveryValueSplit) {
  FASTKDA_REQUIRE_GPU();
  for (const char* vs : {"1", "2", "4"})
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      setenv("FASTKDA_PREFILL_VSPLIT", vs, 1);
      Case c;
      c.seqlens = {65, 0, 200, 64};
      c.HV = 2, c.boundary = true, c.boundary_dtype = dtype, c.cu_host = true;
      c.layout = dtype == DType::kF32 ? StateLayout::kKFirst : StateLayout::kVFirst;
      check_against_oracle(Problem(c), (std::string("boundary vsplit ") + vs).c_str());
    }
  unsetenv("FASTKDA_PREFILL_VSPLIT");
}

// Device cu_seqlens without a host copy: num_boundary_states is not checked, rows past it are
// skipped (left untouched), the ones before it are still written.
TEST(PrefillGpu, BoundaryStatesShortBufferSkipsRows) {
  FASTKDA_REQUIRE_GPU();
  for (int64_t dropped : {3, 9}) {  // 9 rows in all: some skipped, then all
    Case c;
    c.seqlens = {130, 1, 300};
    c.HV = 2, c.boundary = true, c.boundary_dropped = dropped;
    check_against_oracle(Problem(c), "boundary short buffer");
  }
}

// The last boundary row of each sequence is, bit for bit, the final state of a prefill truncated
// at that boundary (same chunk grid, same grid of CTAs); continuing from it over the rest of the
// sequence reproduces the full run's outputs and final state.
TEST(PrefillGpu, BoundaryStatesArePrefixStates) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.seqlens = {65, 0, 300, 64, 1, 129};
  c.HV = 2, c.boundary = true, c.cu_host = true;
  Problem p(c);
  const Result full = run_gpu(p, DeviceInputs(p));
  const std::vector<int64_t> base = p.boundary_base();
  const size_t re = p.row_elems();
  const size_t ns = p.c.seqlens.size();
  // Tokens [lo[n], hi[n]) of every sequence n as a new varlen problem (initial states as in p).
  auto part = [&](const std::vector<int64_t>& lo, const std::vector<int64_t>& hi) {
    Case cs = c;
    cs.seqlens.clear();
    for (size_t n = 0; n < ns; ++n) cs.seqlens.push_back(hi[n] - lo[n]);
    cs.boundary = false;
    Problem ps(cs, p.seed);
    auto rows = [&](const HostBuf& src, HostBuf& dst, int64_t stride, int64_t from, int64_t to) {
      for (int64_t i = 0; i < stride; ++i)
        dst.set(size_t(to * stride + i), src.get(size_t(from * stride + i)));
    };
    for (size_t n = 0; n < ns; ++n)
      for (int64_t t = lo[n]; t < hi[n]; ++t) {
        const int64_t from = p.cu[n] + t, to = ps.cu[n] + t - lo[n];
        rows(p.q, ps.q, p.q_stride, from, to), rows(p.k, ps.k, p.k_stride, from, to);
        rows(p.v, ps.v, p.v_stride, from, to), rows(p.g, ps.g, p.g_stride, from, to);
        rows(p.beta, ps.beta, p.beta_stride, from, to);
      }
    ps.A_log = p.A_log, ps.dt_bias = p.dt_bias;
    ps.init_state = p.init_state;
    return ps;
  };
  std::vector<int64_t> zero(ns, 0), cut(ns), len(ns);
  for (size_t n = 0; n < ns; ++n) {
    len[n] = p.c.seqlens[n];
    cut[n] = len[n] > 0 ? 64 * (base[n + 1] - base[n] - 1) : 0;  // the last boundary
  }
  const Problem pt = part(zero, cut);
  const Result trunc = run_gpu(pt, DeviceInputs(pt));
  for (size_t n = 0; n < ns; ++n) {
    if (len[n] == 0) continue;
    const size_t r = size_t(base[n + 1] - 1);
    EXPECT_EQ(std::memcmp(full.boundary.f.data() + r * re, trunc.state.f.data() + n * re, re * 4),
              0)
        << "sequence " << n << ": boundary row " << r << " != final state truncated at token "
        << cut[n] << "  " << p.describe();
  }

  Problem pc = part(cut, len);
  for (size_t n = 0; n < ns; ++n)
    if (len[n] > 0)
      for (size_t i = 0; i < re; ++i)
        pc.init_state.set(n * re + i, full.boundary.f[size_t(base[n + 1] - 1) * re + i]);
  const Result cont = run_gpu(pc, DeviceInputs(pc));
  HostBuf expect(DType::kBF16, cont.out.size());
  const size_t row_elems = size_t(p.c.HV) * kV;
  for (size_t n = 0; n < ns; ++n)
    for (int64_t t = cut[n]; t < len[n]; ++t)
      std::copy_n(full.out.h.begin() + (p.cu[n] + t) * row_elems, row_elems,
                  expect.h.begin() + (pc.cu[n] + t - cut[n]) * row_elems);
  const Err eo = compare(cont.out, expect, [](size_t) { return true; });
  const Err es = compare(cont.state, full.state, [](size_t) { return true; });
  std::printf("[prefill] continued from the last boundary: out %g%s | state %g%s\n", eo.rms_rel,
              cont.out.same_bits(expect) ? " (bitwise)" : "", es.rms_rel,
              cont.state.same_bits(full.state) ? " (bitwise)" : "");
  EXPECT_LE(eo.rms_rel, kOutTol) << eo << "  " << p.describe();
  EXPECT_LE(es.rms_rel, kStateTol) << es << "  " << p.describe();
}

// Captured into a CUDA graph (no allocation, no sync inside), replay == direct run, bit for bit.
void check_graph_capture(const Case& c) {
  Problem p(c);
  DeviceInputs d(p);
  const Result direct = run_gpu(p, d);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  HostBuf out(DType::kBF16, p.out_elems());
  std::fill(out.h.begin(), out.h.end(), kPoison);
  DeviceBuf dout(out.data(), out.bytes()), init(p.init_state.data(), p.init_state.bytes());
  DeviceBuf fin(p.init_state.data(), p.init_state.bytes());
  fastkda::ForwardParams f = p.params(
      {d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(), d.cu.get(),
       static_cast<const float*>(d.A_log.get()), static_cast<const float*>(d.dt_bias.get()),
       dout.get(), init.get(), fin.get(), nullptr},
      fastkda::Device::kCUDA);
  f.stream = s;
  f.workspace_bytes = fastkda::forward_workspace_size(f);
  DeviceBuf ws(f.workspace_bytes);
  f.workspace = ws.get();
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  fastkda::forward(f);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  dout.to_host(out.data());
  HostBuf st(DType::kF32, p.state_elems());
  fin.to_host(st.data());
  EXPECT_TRUE(out.same_bits(direct.out)) << p.describe();
  EXPECT_TRUE(st.same_bits(direct.state)) << p.describe();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(PrefillGpu, GraphCapture) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  c.seqlens = {50, 0, 200};
  c.HV = 2;
  check_graph_capture(c);
}

// Split T (pass 1: segment end states from zero and transitions from identity rows; combine;
// pass 2: outputs from the combined start states). FASTKDA_PREFILL_SEG forces the segment length
// so that small cases take every path: one, two and many segments, segments shorter than a
// sequence's tail, empty and 1-token sequences, pools with -1 indices in place, boundary states,
// bf16 / K-first states, gates of -1000 and collinear keys; against the oracle with the same
// bounds.
TEST(PrefillGpu, SplitT) {
  FASTKDA_REQUIRE_GPU();
  for (int seg : {64, 128, 192}) {
    ScopedEnv env("FASTKDA_PREFILL_SEG", std::to_string(seg));
    const std::string tag = " seg" + std::to_string(seg);
    {
      Case c;
      c.B = 2, c.T = 1000, c.H = 2, c.HV = 4;
      check_against_oracle(Problem(c), ("split T=1000" + tag).c_str());
    }
    {
      Case c;
      c.seqlens = {0, 1, 17, 0, 100, 64, 1, 33, 500, 129};
      c.cu_i64 = true, c.H = 2, c.HV = 4;
      check_against_oracle(Problem(c), ("split varlen" + tag).c_str());
    }
    {
      Case c;
      c.seqlens = {5, 0, 700, 16, 1, 300};
      c.pool = true, c.in_place = true, c.HV = 4;
      check_against_oracle(Problem(c), ("split pool" + tag).c_str());
    }
    {
      Case c;
      c.seqlens = {0, 1, 64, 65, 300, 0, 128, 640};
      c.H = 1, c.HV = 2, c.cu_host = true;
      c.boundary = true, c.boundary_dtype = DType::kBF16, c.layout = StateLayout::kKFirst;
      c.final_dtype = DType::kBF16;
      check_against_oracle(Problem(c), ("split boundary" + tag).c_str());
    }
    {
      Case c;
      c.T = 700, c.gate = GateMode::kSoftplus, c.extreme_gates = 0.1, c.HV = 4;
      check_against_oracle(Problem(c), ("split softplus -1000" + tag).c_str());
    }
    {
      Case c;
      c.T = 500, c.collinear = true;
      check_against_oracle(Problem(c), ("split collinear" + tag).c_str());
    }
    {
      Case c;  // GVA, pre-gated bf16 gates, bf16 initial state, K-first states
      c.B = 2, c.T = 333, c.H = 1, c.HV = 3, c.gate = GateMode::kPreGated;
      c.g_dtype = DType::kBF16, c.init = InitState::kBF16, c.layout = StateLayout::kKFirst;
      check_against_oracle(Problem(c), ("split GVA pre-gated" + tag).c_str());
    }
  }
  for (const char* vs : {"2", "4"}) {  // the other value splits (kVs = 64, 32) in both passes
    ScopedEnv env("FASTKDA_PREFILL_SEG", "128"), env_vs("FASTKDA_PREFILL_VSPLIT", vs);
    Case c;
    c.seqlens = {0, 1, 17, 400, 64, 333};
    c.H = 2, c.HV = 4, c.pool = true, c.boundary = false;
    check_against_oracle(Problem(c), (std::string("split vsplit ") + vs).c_str());
  }
  {
    ScopedEnv env("FASTKDA_PREFILL_SEG", "2048");
    Case c;
    c.T = 65536, c.H = 1, c.HV = 1, c.g_dtype = DType::kBF16;
    check_against_oracle(Problem(c), "split T=65536 seg2048");
  }
  // A longer segment 0 (FASTKDA_PREFILL_SEG0), with segment 0's outputs in pass 1 and in pass 2,
  // at two value splits: sequences shorter than it, as long, and longer by a partial segment.
  for (const char* first_out : {"1", "0"})
    for (const char* vs : {"1", "2"}) {
      ScopedEnv env("FASTKDA_PREFILL_SEG", "64"), env0("FASTKDA_PREFILL_SEG0", "192"),
          env_fo("FASTKDA_PREFILL_FIRST_OUT", first_out), env_vs("FASTKDA_PREFILL_VSPLIT", vs);
      Case c;
      c.seqlens = {0, 1, 150, 192, 193, 500, 64, 300};
      c.H = 2, c.HV = 4, c.pool = true, c.boundary = true;
      check_against_oracle(Problem(c), (std::string("split seg0 192 first_out ") + first_out +
                                        " vsplit " + vs).c_str());
    }
}

// Split T keeps the invariants: causal bit for bit, bitwise reruns, CUDA-graph capture, and the
// workspace it asks for (chunk slots, then 128 KiB per segment slot and value head, then the
// varlen intra grid's slot map: 8 B per chunk slot).
TEST(PrefillGpu, SplitTInvariants) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env("FASTKDA_PREFILL_SEG", "64");
  {
    Case c;
    c.T = 300, c.gate = GateMode::kSoftplus, c.extreme_gates = 0.05;
    Problem p(c);
    check_causal(p, 150, "split T");  // in the third segment, mid-chunk
    const Result a = run_gpu(p, DeviceInputs(p));
    const Result a2 = run_gpu(p, DeviceInputs(p));
    EXPECT_TRUE(a.out.same_bits(a2.out) && a.state.same_bits(a2.state))
        << "split T: reruns differ  " << p.describe();
  }
  Case c;
  c.seqlens = {50, 0, 200, 1};
  c.HV = 2;
  Problem p(c);
  DeviceInputs d(p);
  DeviceBuf out(p.out_elems() * 2);
  const fastkda::ForwardParams f = size_query_params(p, d, out.get());
  const size_t tokens = 251, n = 4;
  const size_t chunk_bytes = ((tokens / 16 + n) * f.HV * 2176 + 255) / 256 * 256;
  const size_t slot_map_bytes = ((tokens / 16 + n) * 8 + 255) / 256 * 256;
  EXPECT_EQ(fastkda::forward_workspace_size(f),
            chunk_bytes + (tokens / 64 + n) * f.HV * 131072 + slot_map_bytes);
  check_graph_capture(c);
}

// Runs p as the environment stands, then with `knob` = `value`: outputs, final and boundary states
// bit for bit the same (plan variants that compute the same rows in the same order).
void expect_same_bits_with(const Problem& p, const DeviceInputs& d, const char* knob,
                           const char* value, const std::string& label) {
  const Result base = run_gpu(p, d);
  Result other;
  {
    ScopedEnv env(knob, value);
    other = run_gpu(p, d);
  }
  EXPECT_TRUE(base.out.same_bits(other.out)) << label << "  " << p.describe();
  EXPECT_TRUE(base.state.same_bits(other.state)) << label << "  " << p.describe();
  EXPECT_TRUE(base.boundary.same_bits(other.boundary)) << label << "  " << p.describe();
}

// Split T with segment 0's outputs in pass 1 (first_out, the default) against pass 2 doing them
// (FASTKDA_PREFILL_FIRST_OUT=0): the same chunks by the same code from the same start, so the
// same bits in the outputs, the final states and the boundary states; the batch mixes
// one-segment sequences (pass 1 writes their final state) with longer ones, at every value split.
TEST(PrefillGpu, SplitTFirstOutputs) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env("FASTKDA_PREFILL_SEG", "128");
  for (const char* vs : {"1", "2", "4"}) {
    ScopedEnv env_vs("FASTKDA_PREFILL_VSPLIT", vs);
    Case c;
    c.seqlens = {0, 1, 100, 128, 129, 500, 17, 300};
    c.H = 2, c.HV = 4, c.pool = true, c.boundary = true;
    Problem p(c);
    DeviceInputs d(p);
    expect_same_bits_with(p, d, "FASTKDA_PREFILL_FIRST_OUT", "0", std::string("vsplit ") + vs);
    check_against_oracle(p, (std::string("split first_out vsplit ") + vs).c_str());
  }
}

// Pass::kPairs (split T's pass 1 at vsplit 1 with first_out: a segment's value and transition rows
// in one CTA, two m-blocks per scan warpgroup beside one prepare group) against separate value and
// transition CTAs (FASTKDA_PREFILL_PAIR=0): the same arithmetic per row in the same order, so the
// same bits, for segments of 64 and 128 tokens after a longer segment 0, empty, 1-token and
// tail-heavy sequences, boundary states and a state pool.
TEST(PrefillGpu, SplitTPairs) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env_vs("FASTKDA_PREFILL_VSPLIT", "1");
  for (const char* seg : {"64", "128"}) {
    ScopedEnv env_seg("FASTKDA_PREFILL_SEG", seg);
    ScopedEnv env_seg0("FASTKDA_PREFILL_SEG0", "192");
    Case c;
    c.seqlens = {0, 1, 100, 192, 193, 700, 17, 455};
    c.H = 2, c.HV = 4, c.pool = true, c.boundary = true;
    Problem p(c);
    DeviceInputs d(p);
    expect_same_bits_with(p, d, "FASTKDA_PREFILL_PAIR", "0", std::string("seg ") + seg);
    check_against_oracle(p, (std::string("split pairs seg") + seg).c_str());
  }
}

// The combine at 32 rows of S^T per CTA (two m16 tiles per warp, two M_j stages) against 16 rows
// (FASTKDA_PREFILL_COMBINE_ROWS): each row's products and sums are the same in either, so the same
// bits, for 1 to 14 combine steps (stages and fragment buffers reused many times), empty, 1-token
// and one-segment sequences, at vsplit 1 (pairs) and 2; and the oracle's accuracy at 32 rows.
TEST(PrefillGpu, SplitTCombineRows) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env_seg("FASTKDA_PREFILL_SEG", "64");
  for (const char* vs : {"1", "2"}) {
    ScopedEnv env_vs("FASTKDA_PREFILL_VSPLIT", vs);
    Case c;
    c.seqlens = {0, 1, 100, 192, 193, 1000, 17, 455};
    c.H = 2, c.HV = 4, c.boundary = true;
    Problem p(c);
    DeviceInputs d(p);
    ScopedEnv env("FASTKDA_PREFILL_COMBINE_ROWS", "16");
    expect_same_bits_with(p, d, "FASTKDA_PREFILL_COMBINE_ROWS", "32", std::string("vsplit ") + vs);
    ScopedEnv env32("FASTKDA_PREFILL_COMBINE_ROWS", "32");
    check_against_oracle(p, (std::string("split combine 32 rows vsplit ") + vs).c_str());
  }
}

// Workspace of the streamed intra kernel: ready counters per sequence, head and 8 chunks of the
// longest sequence (varlen: of all tokens), 256-byte rounded, then the 256-byte tile queue.
size_t stream_bytes(const Problem& p) {
  const size_t blocks = size_t((p.c.T + 127) / 128);
  return (size_t(p.num_seq) * p.c.HV * blocks * 4 + 255) / 256 * 256 + 256;
}

// Split T beside the streamed intra kernel (FASTKDA_PREFILL_STREAM=1 with a forced segment
// length at vsplit 1: kFirst and kPairs wait on the ready counters instead of on the intra grid)
// against the intra kernel first (=0): the same records and the same scan, so the same bits, at
// retire points 0 and 100 % (segment 0's jobs start at once / once every tile is made), on a
// fixed batch with a partial last chunk, boundary states and a state pool, and on one varlen
// sequence with tokens before and after it; the oracle's accuracy, CUDA-graph capture, and the
// workspace: chunk slots, segment slots, then the ready counters and the queue.
TEST(PrefillGpu, SplitTStreamed) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env_vs("FASTKDA_PREFILL_VSPLIT", "1"), env_seg0("FASTKDA_PREFILL_SEG0", "192");
  std::vector<Case> cases(2);
  cases[0].B = 3, cases[0].T = 1000, cases[0].H = 2, cases[0].HV = 4;
  cases[0].pool = true, cases[0].boundary = true;
  cases[1].seqlens = {777}, cases[1].lead = 40, cases[1].tail = 100, cases[1].HV = 6;
  for (const char* seg : {"64", "128"}) {
    ScopedEnv env_seg("FASTKDA_PREFILL_SEG", seg);
    for (const Case& c : cases) {
      Problem p(c);
      DeviceInputs d(p);
      for (const char* retire : {"0", "100"}) {
        ScopedEnv env("FASTKDA_PREFILL_STREAM", "1"), env_retire("FASTKDA_PREFILL_RETIRE", retire);
        expect_same_bits_with(p, d, "FASTKDA_PREFILL_STREAM", "0",
                              std::string("seg ") + seg + " retire " + retire);
      }
      ScopedEnv env("FASTKDA_PREFILL_STREAM", "1");
      check_against_oracle(p, (std::string("split streamed seg") + seg).c_str());
      if (!c.pool) check_graph_capture(c);
      DeviceBuf out(p.out_elems() * 2);
      const fastkda::ForwardParams f = size_query_params(p, d, out.get());
      const size_t tokens = size_t(p.c.B * p.c.T), n = size_t(p.num_seq);
      const size_t chunk_bytes = ((tokens / 16 + n) * p.c.HV * 2176 + 255) / 256 * 256;
      const size_t seg_bytes = (tokens / std::stoul(seg) + n) * p.c.HV * 131072;
      EXPECT_EQ(fastkda::forward_workspace_size(f), chunk_bytes + seg_bytes + stream_bytes(p))
          << p.describe();
    }
  }
}

// Longest-first CTA order (order.cuh): forced on a varlen batch with ties, empty and 1-token
// sequences, it gives the in-order results bit for bit (every (sequence, head) is computed the same
// way in any order) and the oracle's accuracy; on 300 sequences x 1 head (more CTAs than SMs) it is
// chosen automatically.
TEST(PrefillGpu, LongestFirstOrder) {
  FASTKDA_REQUIRE_GPU();
  {
    Case c;
    c.seqlens = {0, 1, 17, 0, 100, 64, 1, 33, 300, 17};
    c.H = 2, c.HV = 4, c.pool = true;
    Problem p(c);
    DeviceInputs d(p);
    Result in_order, longest;
    {
      ScopedEnv env("FASTKDA_PREFILL_ORDER", "0");
      in_order = run_gpu(p, d);
    }
    {
      ScopedEnv env("FASTKDA_PREFILL_ORDER", "1");
      longest = run_gpu(p, d);
      check_against_oracle(p, "longest first");
    }
    EXPECT_TRUE(in_order.out.same_bits(longest.out)) << p.describe();
    EXPECT_TRUE(in_order.state.same_bits(longest.state)) << p.describe();
  }
  {
    Case c;
    for (int n = 0; n < 300; ++n) c.seqlens.push_back((n * 37) % 201);
    c.H = 1, c.HV = 1;
    check_against_oracle(Problem(c), "longest first (auto)");
  }
}

// Persistent scan grid (one CTA per SM walking jobs b, b + SMs, ...): bitwise the grid of one CTA
// per job, at every value split, with empty, 1-token and long sequences mixed (the prepare groups
// and the scan must agree on the chunk sequence across jobs), boundary states and a state pool.
TEST(PrefillGpu, PersistentGrid) {
  FASTKDA_REQUIRE_GPU();
  Case c;
  for (int n = 0; n < 50; ++n) c.seqlens.push_back(n % 7 == 3 ? 0 : (n * 53) % 97 + (n == 5) * 600);
  c.H = 1, c.HV = 4, c.pool = true, c.boundary = true;  // 200 heads: > 132 jobs at every split
  Problem p(c);
  DeviceInputs d(p);
  for (const char* vs : {"1", "2", "4"}) {
    ScopedEnv split("FASTKDA_PREFILL_VSPLIT", vs);
    Result one, persistent;
    {
      ScopedEnv env("FASTKDA_PREFILL_PERSIST", "0");
      one = run_gpu(p, d);
    }
    {
      ScopedEnv env("FASTKDA_PREFILL_PERSIST", "1");
      persistent = run_gpu(p, d);
      check_against_oracle(p, (std::string("persistent vsplit ") + vs).c_str());
    }
    EXPECT_TRUE(one.out.same_bits(persistent.out)) << "vsplit " << vs << "  " << p.describe();
    EXPECT_TRUE(one.state.same_bits(persistent.state)) << "vsplit " << vs << "  " << p.describe();
    EXPECT_TRUE(one.boundary.same_bits(persistent.boundary)) << "vsplit " << vs;
  }
}

// Streamed intra kernel (a persistent intra grid beside a one-wave scan, ready counters):
// bitwise the two-kernel order at every value split and retire point (0 %: the scan starts at
// once and waits on counters; 100 %: every SM stays in the intra grid until its last tile), with a
// partial last chunk, boundary states and a state pool; a single varlen sequence with tokens
// before and after it (empty tiles); the softplus gate (the binary anchor split, tokens at
// -1000); the workspace holds the counters and the queue.
TEST(PrefillGpu, StreamedIntra) {
  FASTKDA_REQUIRE_GPU();
  std::vector<Case> cases(3);
  cases[0].B = 3, cases[0].T = 1000, cases[0].H = 2, cases[0].HV = 4;
  cases[0].pool = true, cases[0].boundary = true;
  cases[1].seqlens = {777}, cases[1].lead = 40, cases[1].tail = 100, cases[1].HV = 6;
  // The softplus gate: the intra kernels' binary anchor split (A up to 16, some tokens at -1000).
  cases[2].B = 2, cases[2].T = 600, cases[2].HV = 4, cases[2].gate = GateMode::kSoftplus;
  cases[2].extreme_gates = 0.05;
  for (const Case& c : cases) {
    Problem p(c);
    DeviceInputs d(p);
    for (const char* vs : {"1", "2", "4"}) {
      ScopedEnv split("FASTKDA_PREFILL_VSPLIT", vs);
      Result two_kernels;
      {
        ScopedEnv env("FASTKDA_PREFILL_STREAM", "0");
        two_kernels = run_gpu(p, d);
      }
      for (const char* retire : {"0", "50", "100"}) {
        ScopedEnv env("FASTKDA_PREFILL_STREAM", "1"), env_retire("FASTKDA_PREFILL_RETIRE", retire);
        const Result streamed = run_gpu(p, d);
        const std::string what = std::string("vsplit ") + vs + " retire " + retire + "  ";
        EXPECT_TRUE(two_kernels.out.same_bits(streamed.out)) << what << p.describe();
        EXPECT_TRUE(two_kernels.state.same_bits(streamed.state)) << what << p.describe();
        EXPECT_TRUE(two_kernels.boundary.same_bits(streamed.boundary)) << what;
      }
    }
    ScopedEnv env("FASTKDA_PREFILL_STREAM", "1");
    check_against_oracle(p, "streamed intra");
    if (!c.pool) check_graph_capture(c);  // the counters' memset and both grids in one graph
    DeviceBuf out(p.out_elems() * 2);
    const fastkda::ForwardParams f = size_query_params(p, d, out.get());
    const size_t slots = size_t(p.c.B * p.c.T / 16 + p.num_seq);  // chunk slots (config.h)
    const size_t chunk_bytes = (slots * p.c.HV * 2176 + 255) / 256 * 256;
    EXPECT_EQ(fastkda::forward_workspace_size(f), chunk_bytes + stream_bytes(p)) << p.describe();
  }
}

// The 64-token WY pipeline (wy64.cuh, Plan::wy64; FASTKDA_PREFILL_WY64=1 forces it where it can
// run): the oracle's bounds over its modes (one chunk, a batch, states f32 / bf16 / V-first /
// K-first / none, a pool with -1 indices in place, 2 sigmoid, no A_log / dt_bias, strided tokens,
// saturated gates, collinear keys, 8192 tokens), the f16 operands' scale under inputs far from the
// unit range, causality bit for bit (the scale is a function of the rows before each chunk, A' is
// anchored at each 16-row block's start: session 42 found both otherwise), bitwise reruns, graph
// capture, and its workspace.
Case wy64_case(int64_t B, int64_t T, int H) {
  Case c;
  c.B = B, c.T = T, c.H = c.HV = H;
  c.g_dtype = DType::kBF16;
  return c;
}

TEST(PrefillGpu, Wy64Oracle) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env("FASTKDA_PREFILL_WY64", "1");
  std::vector<std::pair<Case, std::string>> cases;
  cases.emplace_back(wy64_case(1, 64, 2), "wy64 one chunk");
  cases.emplace_back(wy64_case(1, 1024, 4), "wy64 T1024 H4");
  {
    Case c = wy64_case(3, 256, 2);
    c.layout = StateLayout::kKFirst, c.init = InitState::kBF16, c.final_dtype = DType::kBF16;
    c.beta_dtype = DType::kBF16;
    cases.emplace_back(c, "wy64 B3 bf16 k-first");
  }
  {
    Case c = wy64_case(2, 192, 2);
    c.layout = StateLayout::kKFirst;
    cases.emplace_back(c, "wy64 B2 f32 k-first");
  }
  {
    Case c = wy64_case(1, 320, 3);
    c.beta_mode = BetaMode::kTwoSigmoid, c.A_log = false, c.dt_bias = false;
    c.lower_bound = -2.0f;
    cases.emplace_back(c, "wy64 2sigmoid plain");
  }
  {
    Case c = wy64_case(2, 128, 2);
    c.init = InitState::kNone, c.final_state = false;
    cases.emplace_back(c, "wy64 no states");
  }
  {
    Case c = wy64_case(3, 192, 2);
    c.pool = true, c.in_place = true;
    cases.emplace_back(c, "wy64 pool in place");
  }
  {
    Case c = wy64_case(2, 256, 2);
    c.strided = true, c.scale = 0.3f;
    cases.emplace_back(c, "wy64 strided");
  }
  {
    Case c = wy64_case(1, 256, 2);
    c.extreme_gates = 1.0;
    cases.emplace_back(c, "wy64 saturated");
  }
  {
    Case c = wy64_case(1, 128, 2);
    c.collinear = true;
    cases.emplace_back(c, "wy64 collinear");
  }
  cases.emplace_back(wy64_case(1, 8192, 2), "wy64 T8192");
  for (const auto& [c, what] : cases) check_against_oracle(Problem(c), what.c_str());
  // The f16 operands' scale (chunk_scale) far from the unit range: v x 2^12, v and the initial
  // state x 2^-16, an initial state x 2^20 (then decaying), that with v x 2^-12.
  struct Scaling {
    const char* what;
    float v, init;
  };
  for (const Scaling& sc :
       {Scaling{"v x 2^12", 0x1p12f, 1.0f}, Scaling{"v, init x 2^-16", 0x1p-16f, 0x1p-16f},
        Scaling{"init x 2^20", 1.0f, 0x1p20f},
        Scaling{"init x 2^20, v x 2^-12", 0x1p-12f, 0x1p20f}}) {
    Problem p(wy64_case(1, 320, 2));
    for (size_t i = 0; i < p.v.size(); ++i) p.v.set(i, p.v.get(i) * sc.v);
    for (size_t i = 0; i < p.init_state.size(); ++i)
      p.init_state.set(i, p.init_state.get(i) * sc.init);
    check_against_oracle(p, (std::string("wy64 ") + sc.what).c_str());
  }
}

TEST(PrefillGpu, Wy64Invariants) {
  FASTKDA_REQUIRE_GPU();
  ScopedEnv env("FASTKDA_PREFILL_WY64", "1");
  check_causal(Problem(wy64_case(1, 192, 2)), 37, "wy64");   // mid-chunk
  check_causal(Problem(wy64_case(1, 192, 2)), 100, "wy64");  // the second chunk
  Problem scaled(wy64_case(1, 192, 2));
  for (size_t i = 0; i < scaled.v.size(); ++i) scaled.v.set(i, scaled.v.get(i) * 0x1p12f);
  check_causal(scaled, 37, "wy64 v x 2^12");
  const Problem p(wy64_case(2, 512, 3));
  DeviceInputs d(p);
  const Result a = run_gpu(p, d), b = run_gpu(p, d);
  EXPECT_TRUE(a.out.same_bits(b.out)) << p.describe();
  EXPECT_TRUE(a.state.same_bits(b.state)) << p.describe();
  check_graph_capture(wy64_case(2, 256, 2));
  // The workspace: per (sequence, head, chunk) its image (77312 B) and Tb (11264 B; both with
  // triangular factors since session 44), then the ready flags (256-byte rounded) and the
  // counter's 256 bytes.
  DeviceBuf out(p.out_elems() * 2);
  const fastkda::ForwardParams f = size_query_params(p, d, out.get());
  const size_t items = 2 * (512 / 64) * 3;
  EXPECT_EQ(fastkda::forward_workspace_size(f),
            items * (77312 + 11264) + (items * 4 + 255) / 256 * 256 + 256);
}

// Where the pipeline cannot run, forcing it is an error naming the knob and what it needs (from
// the size query, before anything is launched); the plan picks it by itself for 28-40 heads of
// T in [4096, 16384] (32-40 up to 65536; H32 T4096: the workspace of the images).
TEST(PrefillGpu, Wy64Plan) {
  FASTKDA_REQUIRE_GPU();
  struct Bad {
    Case c;
    const char* needs;
  };
  std::vector<Bad> bad;
  bad.push_back({wy64_case(1, 100, 2), "multiple of 64"});
  bad.push_back({wy64_case(1, 128, 2), "bounded gate"});
  bad.back().c.gate = GateMode::kSoftplus;
  bad.push_back({wy64_case(1, 128, 2), "HV = H"});
  bad.back().c.HV = 4;
  bad.push_back({wy64_case(1, 128, 2), "bf16 g"});
  bad.back().c.g_dtype = DType::kF32;
  bad.push_back({wy64_case(1, 128, 2), "boundary"});
  bad.back().c.boundary = true;
  bad.push_back({wy64_case(1, 192, 2), "fixed-length"});
  bad.back().c.seqlens = {64, 128};
  for (const Bad& b : bad) {
    const Problem p(b.c);
    DeviceInputs d(p);
    DeviceBuf out(p.out_elems() * 2);
    fastkda::ForwardParams f = size_query_params(p, d, out.get());
    DeviceBuf bnd(b.c.boundary ? size_t(p.boundary_rows() + 1) * p.row_elems() * 4 : 0);
    if (b.c.boundary) {
      f.boundary_states = bnd.get(), f.num_boundary_states = p.boundary_rows();
      f.boundary_states_dtype = DType::kF32;
    }
    ScopedEnv env("FASTKDA_PREFILL_WY64", "1");
    expect_error([&] { (void)fastkda::forward_workspace_size(f); }, "FASTKDA_PREFILL_WY64",
                 b.needs);
    expect_error([&] { (void)fastkda::forward_workspace_size(f); }, b.needs, b.needs);
  }
  const Problem p(wy64_case(1, 4096, 32));
  DeviceInputs d(p);
  DeviceBuf out(p.out_elems() * 2);
  const fastkda::ForwardParams f = size_query_params(p, d, out.get());
  const size_t items = 4096 / 64 * 32;
  EXPECT_EQ(fastkda::forward_workspace_size(f),
            items * (77312 + 11264) + (items * 4 + 255) / 256 * 256 + 256);
  check_against_oracle(p, "wy64 auto H32 T4096");
}

}  // namespace
}  // namespace fastkda_prefill_test
