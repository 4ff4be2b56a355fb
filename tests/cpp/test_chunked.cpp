// The fp32 chunked CPU path against the fp64 token recurrence (the oracle), through the public API.
//
// Bounds. With f32 inputs and f32 states both paths see identical inputs, so the only difference
// is fp32 arithmetic in the chunked form: RMS-relative error <= 1e-5 on out and on the final state
// (measured: ~1e-7 .. 5e-7). With bf16 io or bf16 states both paths still read identical
// (bf16-rounded) inputs; what differs is where a value within ~1e-6 of a rounding boundary lands
// after the final rounding to bf16. So a bf16 output is checked element-wise to be within one
// bf16 rounding step of the oracle's bf16 output (plus an atol of 2e-5 x RMS(ref) for elements
// far below the RMS, whose bf16 step is smaller than the fp32 error), and every f32 state is still
// held to RMS-rel <= 1e-5.
#include <cstdio>

#include "cpu/chunked.h"
#include "test_util.h"

namespace fastkda_test {
namespace {

void check_against_oracle(const Config& c, uint64_t seed = fresh_seed()) {
  const Problem p(c, seed);
  const std::string desc = p.describe();
  SCOPED_TRACE(desc);
  std::printf("  %s\n", describe(p.c).c_str());
  const Result ref = run(p, Algorithm::kRecurrent);
  const Result got = run(p, Algorithm::kChunked);
  expect_matches_oracle(got.out, ref.out, "out", desc);
  expect_matches_oracle(got.state, ref.state, "state", desc);
}

// ---- the grid: every gate variant x every T, the other axes rotating --------------------------
struct GateVariant {
  const char* name;
  GateMode mode;
  float lower_bound;
  double extreme;  // fraction of gates at +-1000 (pre-gated: -1000)
};
constexpr GateVariant kGates[] = {
    {"softplus", GateMode::kSoftplus, -5.0f, 0.1},
    {"bounded5", GateMode::kBounded, -5.0f, 0.0},
    {"bounded1", GateMode::kBounded, -1.0f, 0.0},
    {"pregated", GateMode::kPreGated, -5.0f, 0.1},
};
constexpr int64_t kTs[] = {1, 15, 16, 17, 63, 64, 65, 1000};

Config grid_config(int gi, int ti) {
  Config c;
  const GateVariant& gv = kGates[gi];
  c.gate = gv.mode;
  c.lower_bound = gv.lower_bound;
  c.extreme_gates = gv.extreme;
  c.T = kTs[ti];
  c.B = ti % 3 == 1 ? 2 : 1;
  c.H = (ti + gi) % 2 ? 4 : 1;
  c.HV = c.H * ((ti / 2 + gi) % 2 ? 2 : 1);
  c.K = c.V = (ti / 4 + gi) % 2 ? 128 : 64;
  c.beta_mode = BetaMode((ti + gi) % 3);
  c.l2norm = (ti + 2 * gi) % 4 != 3;
  c.layout = (ti / 2 + gi / 2) % 2 ? StateLayout::kKFirst : StateLayout::kVFirst;
  c.initial_state = (ti + gi) % 5 != 4;
  c.A_log = (ti + gi) % 6 != 5;  // A = 1 when A_log is absent
  c.dt_bias = (ti + gi) % 7 != 6;
  return c;
}

class ChunkedGrid : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ChunkedGrid, MatchesOracle) {
  check_against_oracle(grid_config(std::get<0>(GetParam()), std::get<1>(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(GateByT, ChunkedGrid,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Range(0, 8)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::string(kGates[std::get<0>(info.param)].name) + "_T" +
                                  std::to_string(kTs[std::get<1>(info.param)]);
                         });

// ---- targeted axes ----------------------------------------------------------------------------
TEST(Chunked, VarlenWithEmptyAndOneTokenSequences) {
  for (int gi = 0; gi < 4; ++gi) {
    Config c;
    c.seqlens = {0, 1, 17, 0, 64, 1, 130, 0};
    c.cu_dtype = gi % 2 ? DType::kI64 : DType::kI32;
    c.gate = kGates[gi].mode;
    c.lower_bound = kGates[gi].lower_bound;
    c.extreme_gates = kGates[gi].extreme;
    c.H = 2;
    c.HV = 4;
    c.layout = gi / 2 ? StateLayout::kKFirst : StateLayout::kVFirst;
    check_against_oracle(c);
  }
}

TEST(Chunked, ManyShortSequences) {
  Config c;
  const uint64_t seed = fresh_seed();  // one seed for the lengths and the inputs: replayable
  std::mt19937_64 gen{seed};
  for (int n = 0; n < 256; ++n) c.seqlens.push_back(int64_t(gen() % 41));  // 0..40 tokens
  c.cu_dtype = DType::kI64;
  c.H = 1;
  c.HV = 2;
  c.extreme_gates = 0.05;
  check_against_oracle(c, seed);
}

TEST(Chunked, StateAndIoDtypes) {
  for (DType io : {DType::kF32, DType::kBF16})
    for (DType st : {DType::kF32, DType::kBF16})
      for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
        Config c;
        c.T = 150;
        c.H = 2;
        c.HV = 4;
        c.K = c.V = 128;
        c.io = c.g_dtype = c.beta_dtype = io;
        c.state_dtype = st;
        c.layout = layout;
        check_against_oracle(c);
      }
}

TEST(Chunked, HeadDims) {
  const int dims[][2] = {{256, 256}, {64, 128}, {128, 64}, {256, 64}};
  for (const auto& kv : dims)
    for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
      Config c;
      c.T = 130;
      c.H = 1;
      c.HV = 2;
      c.K = kv[0];
      c.V = kv[1];
      c.layout = layout;
      check_against_oracle(c);
    }
}

TEST(Chunked, GvaAndExplicitScale) {
  Config c;
  c.T = 100;
  c.H = 2;
  c.HV = 8;  // 4 value heads per q/k head
  c.scale = 0.3f;
  c.beta_mode = BetaMode::kTwoSigmoid;
  check_against_oracle(c);
}

// Raw gates of +-1000 in every mode, and a fully saturated sequence: exp(-1000 * 64) and
// friends must underflow to exact zeros inside the chunk, never overflow.
TEST(Chunked, ExtremeGates) {
  for (int gi = 0; gi < 4; ++gi)
    for (double fraction : {0.5, 1.0}) {
      Config c;
      c.T = 200;
      c.H = 2;
      c.HV = 2;
      c.K = c.V = 128;
      c.gate = kGates[gi].mode;
      c.lower_bound = kGates[gi].lower_bound;
      c.extreme_gates = fraction;
      check_against_oracle(c);
    }
}

// The chunked path is built once per x86 ISA level (SSE2, AVX2+FMA, AVX-512) and the public API
// runs the best one; here every build this CPU can run is checked against the oracle, so the
// builds a CI machine would not pick are still covered where they can run.
TEST(Chunked, EveryIsaBuildMatchesOracle) {
  using fastkda::cpu::CpuIsa;
  Config c;
  c.seqlens = {1, 0, 100, 64, 17};
  c.H = 2;
  c.HV = 4;
  c.K = 64;
  c.V = 128;
  c.extreme_gates = 0.1;
  c.layout = StateLayout::kKFirst;
  const Problem p(c);
  const Result ref = run(p, Algorithm::kRecurrent);
  int tested = 0;
  for (CpuIsa isa : {CpuIsa::kSse2, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!fastkda::cpu::cpu_supports(isa)) continue;
    const std::string desc = p.describe() + " isa=" + fastkda::cpu::to_string(isa);
    SCOPED_TRACE(desc);
    std::printf("  %s\n", desc.c_str());
    Result got{Buf(p.c.io, ref.out.size(), NAN), Buf(p.c.state_dtype, ref.state.size(), NAN)};
    const fastkda::ForwardParams prm = p.params(Algorithm::kChunked, got.out, &got.state);
    fastkda::validate(prm);
    fastkda::cpu::forward_chunked_isa(prm, isa);
    expect_matches_oracle(got.out, ref.out, "out", desc);
    expect_matches_oracle(got.state, ref.state, "state", desc);
    ++tested;
  }
  EXPECT_GE(tested, 1);
}

}  // namespace
}  // namespace fastkda_test
