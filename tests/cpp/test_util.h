// Shared helpers of the CPU tests: random KDA problems, runs through the public API, error norms.
//
// Every test draws fresh random inputs; the seed is printed in every failure message (through
// Problem::describe) and can be pinned with FASTKDA_TEST_SEED=<n> to replay a failure.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "fastkda/fastkda.h"

namespace fastkda_test {

using fastkda::Algorithm;
using fastkda::BetaMode;
using fastkda::DType;
using fastkda::GateMode;
using fastkda::StateLayout;

inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("FASTKDA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
}

// A host tensor of f32 or bf16 values, read and written as float.
struct Buf {
  DType dtype = DType::kF32;
  std::vector<float> f;
  std::vector<uint16_t> h;
  Buf() = default;
  Buf(DType d, size_t n, float fill = 0.0f) : dtype(d) {
    if (d == DType::kF32)
      f.assign(n, fill);
    else
      h.assign(n, fastkda::float_to_bf16(fill));
  }
  size_t size() const { return dtype == DType::kF32 ? f.size() : h.size(); }
  void* data() { return dtype == DType::kF32 ? (void*)f.data() : (void*)h.data(); }
  float get(size_t i) const { return dtype == DType::kF32 ? f[i] : fastkda::bf16_to_float(h[i]); }
  void set(size_t i, float x) {  // bf16: rounded once, so both paths see identical inputs
    if (dtype == DType::kF32)
      f[i] = x;
    else
      h[i] = fastkda::float_to_bf16(x);
  }
  std::vector<float> floats() const {
    std::vector<float> r(size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = get(i);
    return r;
  }
  bool operator==(const Buf& o) const { return dtype == o.dtype && f == o.f && h == o.h; }
};

// Shape and modes of one forward problem. Defaults: a small Kimi-Linear-like problem.
struct Config {
  int64_t B = 1, T = 64;
  std::vector<int64_t> seqlens;  // non-empty: varlen (B = 1, T = sum), cu_seqlens of this dtype
  DType cu_dtype = DType::kI32;
  int H = 2, HV = 2, K = 64, V = 64;
  DType io = DType::kF32, g_dtype = DType::kF32, beta_dtype = DType::kF32;
  GateMode gate = GateMode::kSoftplus;
  float lower_bound = -5.0f;
  bool A_log = true, dt_bias = true;  // forced off for the pre-gated mode
  double extreme_gates = 0.0;         // fraction of gates at +-1000 (pre-gated: at -1000)
  BetaMode beta_mode = BetaMode::kSigmoid;
  bool l2norm = true;
  float scale = 0.0f;
  bool initial_state = true;
  DType state_dtype = DType::kF32;  // initial and final state
  StateLayout layout = StateLayout::kVFirst;
  int64_t num_seqs() const { return seqlens.empty() ? B : int64_t(seqlens.size()); }
  int64_t rows() const { return B * T; }
};

std::string describe(const Config& c);

// Random inputs of one problem (fixed once drawn) and the states / outputs of one run.
struct Problem {
  Config c;
  uint64_t seed;
  Buf q, k, v, g, beta, s0;
  std::vector<float> A_log, dt_bias;
  std::vector<int32_t> cu32;
  std::vector<int64_t> cu64;

  explicit Problem(Config config, uint64_t seed = fresh_seed());
  std::string describe() const;
  // Public-API parameters reading this problem's inputs, writing `out` and `final_state`.
  fastkda::ForwardParams params(Algorithm alg, Buf& out, Buf* final_state) const;
  size_t state_elems() const { return size_t(c.num_seqs()) * c.HV * c.K * c.V; }
};

// Rows [r0, r1) of a [rows, width] tensor.
Buf slice_rows(const Buf& b, int64_t r0, int64_t r1, int64_t width);
// Address of element i of a tensor (for views: decode steps on rows of a forward problem).
const void* element_ptr(const Buf& b, int64_t i);
// Tokens [t0, t1) of p's flattened token axis as one sequence (B = 1), with the same weights,
// starting from state matrix row `row` ([HV, K*V] elements) of `state`, or from zeros.
Problem sub_problem(const Problem& p, int64_t t0, int64_t t1, const Buf* state, int64_t row);

struct Result {
  Buf out, state;  // out [B, T, HV, V] (io dtype), final state [N, HV, ...] (state dtype)
};
// Runs the forward through fastkda::forward. Outputs are poisoned with NaN first, so an element
// left unwritten shows up as a non-finite error.
Result run(const Problem& p, Algorithm alg);

// ||got - ref||_2 / ||ref||_2 and max |got - ref|; any non-finite value in got gives inf.
struct Err {
  double rms_rel = 0, max_abs = 0;
};
Err compare(const std::vector<float>& got, const std::vector<float>& ref);
std::ostream& operator<<(std::ostream& os, const Err& e);
std::string str(const Err& e);
// Largest (|got - ref| - atol) / ulp_bf16(max(|got|, |ref|)) over all elements: <= 1 means every
// element is within one bf16 rounding step (plus atol) of the reference.
double max_bf16_steps(const std::vector<float>& got, const std::vector<float>& ref, double atol);
// The chunked path's bound against the oracle (see test_chunked.cpp): f32 tensors RMS-rel <= 1e-5;
// bf16 tensors within one bf16 rounding step element-wise (atol 2e-5 x RMS(ref)). Prints the
// errors on one line (they are the figures the docs quote).
void expect_matches_oracle(const Buf& got, const Buf& ref, const char* what,
                           const std::string& desc);
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace fastkda_test
