// Speed of the chunked CPU forward at the Kimi-Linear shape: B = 1, T = 8192, H = HV = 32,
// K = V = 128, softplus gate, bf16 io, f32 state. It must finish in under 10 s on a 2-core
// machine (the CI runner); the figure is printed. The first 256 output rows are also checked
// against the oracle (by causality they equal a T = 256 run), so a fast wrong answer fails too.
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include "test_util.h"

namespace fastkda_test {
namespace {

constexpr double kBudgetSeconds = 10.0;

TEST(Perf, ChunkedForwardT8192H32) {
  Config c;
  c.T = 8192;
  c.H = c.HV = 32;
  c.K = c.V = 128;
  c.io = c.g_dtype = c.beta_dtype = DType::kBF16;
  c.gate = GateMode::kSoftplus;
  const Problem p(c);
  SCOPED_TRACE(p.describe());

  Buf out(c.io, size_t(c.rows() * c.HV * c.V), std::numeric_limits<float>::quiet_NaN());
  Buf state(DType::kF32, p.state_elems());
  const fastkda::ForwardParams prm = p.params(Algorithm::kChunked, out, &state);
  const auto t0 = std::chrono::steady_clock::now();
  fastkda::forward(prm);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens_per_s = double(c.T) / seconds;
  std::printf(
      "[perf] CPU chunked forward B=1 T=%lld H=HV=%d K=V=%d softplus bf16: %.3f s "
      "(%.0f tokens/s, %u hardware threads)\n",
      (long long)c.T, c.HV, c.K, seconds, tokens_per_s, std::thread::hardware_concurrency());
  EXPECT_LT(seconds, kBudgetSeconds) << "the CPU chunked forward is too slow";

  const Err all_finite = compare(out.floats(), out.floats());
  EXPECT_TRUE(std::isfinite(all_finite.rms_rel)) << "non-finite or unwritten output";
  EXPECT_TRUE(std::isfinite(compare(state.floats(), state.floats()).rms_rel)) << "state";

  const int64_t prefix = 256, ow = int64_t(c.HV) * c.V;
  Buf ref_out(c.io, size_t(prefix * ow));
  fastkda::ForwardParams ref = p.params(Algorithm::kRecurrent, ref_out, nullptr);
  ref.T = prefix;
  fastkda::forward(ref);
  expect_matches_oracle(slice_rows(out, 0, prefix, ow), ref_out, "out[:256]", p.describe());
}

}  // namespace
}  // namespace fastkda_test
