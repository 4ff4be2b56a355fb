#include "test_util.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace fastkda_test {

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "B=" << c.B << " T=" << c.T << " H=" << c.H << " HV=" << c.HV << " K=" << c.K
     << " V=" << c.V << " io=" << fastkda::to_string(c.io)
     << " gate=" << fastkda::to_string(c.gate);
  if (c.gate == GateMode::kBounded) os << "(" << c.lower_bound << ")";
  if (c.extreme_gates > 0) os << " extreme_gates=" << c.extreme_gates;
  os << " beta=" << fastkda::to_string(c.beta_mode) << " l2norm=" << c.l2norm
     << " state=" << (c.initial_state ? "" : "none->") << fastkda::to_string(c.state_dtype) << "/"
     << fastkda::to_string(c.layout);
  if (!c.seqlens.empty()) {
    os << " seqlens(" << c.seqlens.size() << ")=[";
    for (size_t i = 0; i < std::min<size_t>(c.seqlens.size(), 12); ++i)
      os << (i ? "," : "") << c.seqlens[i];
    os << (c.seqlens.size() > 12 ? ",...] cu=" : "] cu=") << fastkda::to_string(c.cu_dtype);
  }
  return os.str();
}

Problem::Problem(Config config, uint64_t seed_) : c(std::move(config)), seed(seed_) {
  if (!c.seqlens.empty()) {
    c.B = 1;
    c.T = 0;
    for (int64_t L : c.seqlens) c.T += L;
    cu32.assign(1, 0);
    cu64.assign(1, 0);
    for (int64_t L : c.seqlens) {
      cu32.push_back(int32_t(cu32.back() + L));
      cu64.push_back(cu64.back() + L);
    }
  }
  if (c.gate == GateMode::kPreGated) c.A_log = c.dt_bias = false;

  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unif(0.0f, 1.0f);
  const int64_t R = c.rows();
  const float qk_scale = c.l2norm ? 1.0f : 1.0f / std::sqrt(float(c.K));  // keep |k| ~ 1

  q = Buf(c.io, size_t(R * c.H * c.K));
  k = Buf(c.io, q.size());
  v = Buf(c.io, size_t(R * c.HV * c.V));
  g = Buf(c.g_dtype, size_t(R * c.HV * c.K));
  beta = Buf(c.beta_dtype, size_t(R * c.HV));
  for (size_t i = 0; i < q.size(); ++i) q.set(i, qk_scale * normal(gen));
  for (size_t i = 0; i < k.size(); ++i) k.set(i, qk_scale * normal(gen));
  for (size_t i = 0; i < v.size(); ++i) v.set(i, normal(gen));
  for (size_t i = 0; i < g.size(); ++i) {
    float x = c.gate == GateMode::kPreGated ? -8.0f * unif(gen) : normal(gen);
    if (unif(gen) < c.extreme_gates)
      x = (c.gate == GateMode::kPreGated || unif(gen) < 0.5f) ? -1000.0f : 1000.0f;
    g.set(i, x);
  }
  for (size_t i = 0; i < beta.size(); ++i)
    beta.set(i, c.beta_mode == BetaMode::kGiven ? unif(gen) : normal(gen));
  // Model initialisation: A = exp(A_log) ~ U[1, 16]; dt_bias = softplus^-1(dt), dt log-uniform
  // in [1e-3, 1e-1] (so g + dt_bias is mostly negative and decays are mild, as in real models).
  if (c.A_log)
    for (int h = 0; h < c.HV; ++h) A_log.push_back(std::log(1.0f + 15.0f * unif(gen)));
  if (c.dt_bias)
    for (int i = 0; i < c.HV * c.K; ++i) {
      const double dt = std::exp(std::log(1e-3) + unif(gen) * (std::log(1e-1) - std::log(1e-3)));
      dt_bias.push_back(float(dt + std::log(-std::expm1(-dt))));
    }
  if (c.initial_state) {
    s0 = Buf(c.state_dtype, state_elems());
    for (size_t i = 0; i < s0.size(); ++i) s0.set(i, 0.5f * normal(gen));
  }
}

std::string Problem::describe() const {
  return fastkda_test::describe(c) + " seed=" + std::to_string(seed) +
         " (replay: FASTKDA_TEST_SEED=" + std::to_string(seed) + ")";
}

fastkda::ForwardParams Problem::params(Algorithm alg, Buf& out, Buf* final_state) const {
  fastkda::ForwardParams p;
  p.device = fastkda::Device::kCPU;
  p.H = c.H;
  p.HV = c.HV;
  p.K = c.K;
  p.V = c.V;
  p.io_dtype = c.io;
  p.g_dtype = c.g_dtype;
  p.beta_dtype = c.beta_dtype;
  auto& self = const_cast<Problem&>(*this);  // the API takes const void* inputs
  p.q = self.q.data();
  p.k = self.k.data();
  p.v = self.v.data();
  p.g = self.g.data();
  p.beta = self.beta.data();
  p.out = out.data();
  p.gate_mode = c.gate;
  p.lower_bound = c.lower_bound;
  p.A_log = A_log.empty() ? nullptr : A_log.data();
  p.dt_bias = dt_bias.empty() ? nullptr : dt_bias.data();
  p.beta_mode = c.beta_mode;
  p.l2norm_qk = c.l2norm;
  p.scale = c.scale;
  p.B = c.B;
  p.T = c.T;
  if (!c.seqlens.empty()) {
    p.N = int64_t(c.seqlens.size());
    p.cu_seqlens_dtype = c.cu_dtype;
    p.cu_seqlens = c.cu_dtype == DType::kI64 ? (const void*)cu64.data() : (const void*)cu32.data();
  }
  if (c.initial_state) {
    p.initial_state = self.s0.data();
    p.initial_state_dtype = c.state_dtype;
  }
  if (final_state) {
    p.final_state = final_state->data();
    p.final_state_dtype = final_state->dtype;
  }
  p.state_layout = c.layout;
  p.algorithm = alg;
  return p;
}

Buf slice_rows(const Buf& b, int64_t r0, int64_t r1, int64_t width) {
  Buf r(b.dtype, size_t((r1 - r0) * width));
  if (b.dtype == DType::kF32)
    std::copy(b.f.begin() + r0 * width, b.f.begin() + r1 * width, r.f.begin());
  else
    std::copy(b.h.begin() + r0 * width, b.h.begin() + r1 * width, r.h.begin());
  return r;
}

const void* element_ptr(const Buf& b, int64_t i) {
  return b.dtype == DType::kF32 ? (const void*)(b.f.data() + i) : (const void*)(b.h.data() + i);
}

Problem sub_problem(const Problem& p, int64_t t0, int64_t t1, const Buf* state, int64_t row) {
  Problem s = p;
  const Config& c = p.c;
  s.c.seqlens.clear();
  s.cu32.clear();
  s.cu64.clear();
  s.c.B = 1;
  s.c.T = t1 - t0;
  s.q = slice_rows(p.q, t0, t1, c.H * c.K);
  s.k = slice_rows(p.k, t0, t1, c.H * c.K);
  s.v = slice_rows(p.v, t0, t1, c.HV * c.V);
  s.g = slice_rows(p.g, t0, t1, c.HV * c.K);
  s.beta = slice_rows(p.beta, t0, t1, c.HV);
  s.c.initial_state = state != nullptr;
  if (state) {
    s.c.state_dtype = state->dtype;
    s.s0 = slice_rows(*state, row, row + 1, int64_t(c.HV) * c.K * c.V);
  }
  return s;
}

Result run(const Problem& p, Algorithm alg) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Result r{Buf(p.c.io, size_t(p.c.rows() * p.c.HV * p.c.V), nan),
           Buf(p.c.state_dtype, p.state_elems(), nan)};
  fastkda::forward(p.params(alg, r.out, &r.state));
  return r;
}

Err compare(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  const size_t n = std::min(got.size(), ref.size());
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) return {INFINITY, INFINITY};
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * ref[i];
    mx = std::max(mx, std::abs(d));
  }
  return {den > 0 ? std::sqrt(num / den) : std::sqrt(num), mx};
}

std::ostream& operator<<(std::ostream& os, const Err& e) {
  return os << "rms_rel=" << e.rms_rel << " max_abs=" << e.max_abs;
}

std::string str(const Err& e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

double max_bf16_steps(const std::vector<float>& got, const std::vector<float>& ref, double atol) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) return INFINITY;
    const double m = std::max(std::abs(got[i]), std::abs(ref[i]));
    int e;
    std::frexp(m, &e);  // m in [2^(e-1), 2^e): bf16 spacing there is 2^(e-1-7)
    const double ulp = m > 0 ? std::ldexp(1.0, e - 8) : 0.0;
    const double excess = std::abs(double(got[i]) - ref[i]) - atol;
    if (excess > 0) worst = std::max(worst, ulp > 0 ? excess / ulp : INFINITY);
  }
  return worst;
}

void expect_matches_oracle(const Buf& got, const Buf& ref, const char* what,
                           const std::string& desc) {
  const std::vector<float> g = got.floats(), r = ref.floats();
  const Err e = compare(g, r);
  if (got.dtype == DType::kF32) {
    EXPECT_LE(e.rms_rel, 1e-5) << what << ": " << e << "\n  " << desc;
  } else {
    double ss = 0;
    for (float x : r) ss += double(x) * x;
    const double rms = r.empty() ? 0.0 : std::sqrt(ss / double(r.size()));
    const double steps = max_bf16_steps(g, r, 2e-5 * rms);
    EXPECT_LE(steps, 1.0) << what << " (bf16): worst element off by " << steps
                          << " bf16 rounding steps; " << e << "\n  " << desc;
  }
  std::printf("    %-5s %-4s %s\n", what, fastkda::to_string(got.dtype), str(e).c_str());
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace fastkda_test
