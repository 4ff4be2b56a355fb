// Invariants of DESIGN §5 on the CPU paths, through the public API: varlen == separate calls,
// split prefill == whole prefill, causality, determinism, state-pool semantics, zero-length
// sequences, strided inputs, and near-collinear keys.
#include <limits>

#include "test_util.h"

namespace fastkda_test {
namespace {

constexpr Algorithm kBoth[] = {Algorithm::kChunked, Algorithm::kRecurrent};
constexpr double kRmsTol = 1e-5;

std::vector<float> rows_of(const Buf& b, int64_t r0, int64_t r1, int64_t width) {
  return slice_rows(b, r0, r1, width).floats();
}

// Varlen packing changes nothing: chunks restart at every sequence start, so each sequence is
// computed exactly as in a call of its own (bitwise, both algorithms).
TEST(Invariants, VarlenEqualsSeparateCalls) {
  Config c;
  c.seqlens = {37, 0, 64, 1, 129, 16};
  c.H = 2;
  c.HV = 4;
  c.extreme_gates = 0.1;
  const Problem p(c);
  SCOPED_TRACE(p.describe());
  const int64_t ow = int64_t(c.HV) * c.V, sw = int64_t(c.HV) * c.K * c.V;
  for (Algorithm alg : kBoth) {
    SCOPED_TRACE(fastkda::to_string(alg));
    const Result whole = run(p, alg);
    for (size_t n = 0; n < c.seqlens.size(); ++n) {
      const Result one = run(sub_problem(p, p.cu64[n], p.cu64[n + 1], &p.s0, int64_t(n)), alg);
      EXPECT_TRUE(bitwise_equal(one.out.floats(), rows_of(whole.out, p.cu64[n], p.cu64[n + 1], ow)))
          << "out of sequence " << n;
      EXPECT_TRUE(bitwise_equal(one.state.floats(), rows_of(whole.state, n, n + 1, sw)))
          << "final state of sequence " << n;
    }
  }
}

// prefill(T1) then prefill(T2) from the carried f32 state == prefill(T1 + T2), within fp32
// error (the chunk grid moves, so not bitwise), and both stay within 1e-5 of the oracle.
TEST(Invariants, SplitPrefillEqualsWhole) {
  Config c;
  c.T = 177;
  c.K = c.V = 128;
  c.extreme_gates = 0.1;
  const Problem p(c);
  SCOPED_TRACE(p.describe());
  const int64_t ow = int64_t(c.HV) * c.V;
  const Result whole = run(p, Algorithm::kChunked);
  const Result ref = run(p, Algorithm::kRecurrent);
  for (int64_t T1 : {1, 64, 100, 176}) {
    SCOPED_TRACE("T1 = " + std::to_string(T1));
    const Result a = run(sub_problem(p, 0, T1, &p.s0, 0), Algorithm::kChunked);
    const Result b = run(sub_problem(p, T1, c.T, &a.state, 0), Algorithm::kChunked);
    std::vector<float> out = a.out.floats();
    const std::vector<float> tail = b.out.floats();
    out.insert(out.end(), tail.begin(), tail.end());
    const Err eo = compare(out, whole.out.floats()),
              es = compare(b.state.floats(), whole.state.floats());
    EXPECT_LE(eo.rms_rel, kRmsTol) << "out vs whole: " << eo;
    EXPECT_LE(es.rms_rel, kRmsTol) << "state vs whole: " << es;
    const Err ro = compare(out, ref.out.floats()),
              rs = compare(b.state.floats(), ref.state.floats());
    EXPECT_LE(ro.rms_rel, kRmsTol) << "out vs oracle: " << ro;
    EXPECT_LE(rs.rms_rel, kRmsTol) << "state vs oracle: " << rs;
    // The first part is causal: its outputs are the whole run's first T1 rows, bit for bit.
    EXPECT_TRUE(bitwise_equal(a.out.floats(), rows_of(whole.out, 0, T1, ow)));
  }
}

// Changing tokens after t leaves every output row <= t bit-identical (fla issue 1240: anchoring
// the decay split on a future row breaks this), for t inside and at the edges of chunks.
TEST(Invariants, Causality) {
  for (GateMode gate : {GateMode::kSoftplus, GateMode::kBounded, GateMode::kPreGated}) {
    Config c;
    c.T = 200;
    c.H = 1;
    c.HV = 2;
    c.gate = gate;
    c.extreme_gates = 0.05;
    const Problem p(c);
    SCOPED_TRACE(p.describe());
    Config c2 = c;
    c2.extreme_gates = 0.5;  // the changed future holds +-1000 gates
    const Problem other(c2);
    const int64_t ow = int64_t(c.HV) * c.V;
    for (Algorithm alg : kBoth) {
      const Result base = run(p, alg);
      for (int64_t t : {0, 15, 16, 40, 63, 64, 100, 198}) {
        SCOPED_TRACE(std::string(fastkda::to_string(alg)) + " t = " + std::to_string(t));
        Problem changed = p;
        auto overwrite = [&](Buf& dst, const Buf& src, int64_t width) {
          for (int64_t i = (t + 1) * width; i < int64_t(dst.size()); ++i) dst.set(i, src.get(i));
        };
        overwrite(changed.q, other.q, c.H * c.K);
        overwrite(changed.k, other.k, c.H * c.K);
        overwrite(changed.v, other.v, c.HV * c.V);
        overwrite(changed.g, other.g, c.HV * c.K);
        overwrite(changed.beta, other.beta, c.HV);
        const Result r = run(changed, alg);
        EXPECT_TRUE(bitwise_equal(rows_of(r.out, 0, t + 1, ow), rows_of(base.out, 0, t + 1, ow)))
            << "an output row <= t changed when only tokens > t changed";
        EXPECT_FALSE(
            bitwise_equal(rows_of(r.out, t + 1, c.T, ow), rows_of(base.out, t + 1, c.T, ow)))
            << "the change of tokens > t did not reach the output (test is not testing anything)";
      }
    }
  }
}

// Two runs on the same inputs are bitwise identical, also when the inputs are copies at other
// addresses and the heap is laid out differently (an address-dependent code path, e.g. a
// vectorised loop guarded by a run-time overlap check, once made results differ by 1 ulp).
TEST(Invariants, RepeatedRunsAreBitwiseIdentical) {
  Config c;
  c.seqlens = {300, 5, 128, 77};
  c.H = 2;
  c.HV = 4;
  c.K = c.V = 128;
  c.extreme_gates = 0.1;
  const Problem p(c);
  SCOPED_TRACE(p.describe());
  std::mt19937 gen(uint32_t(p.seed));
  for (Algorithm alg : kBoth) {
    const Result a = run(p, alg);
    for (int rep = 0; rep < 8; ++rep) {
      std::vector<std::vector<float>> junk;  // shifts where the next allocations land
      for (int i = 0; i < 8; ++i) junk.emplace_back(1 + gen() % 5000, 1.0f);
      const Problem copy = p;
      const Result b = run(copy, alg);
      EXPECT_TRUE(bitwise_equal(a.out.floats(), b.out.floats()))
          << fastkda::to_string(alg) << " out, repetition " << rep;
      EXPECT_TRUE(bitwise_equal(a.state.floats(), b.state.floats()))
          << fastkda::to_string(alg) << " state, repetition " << rep;
    }
  }
}

// state_indices into a pool updated in place: addressed rows are read then overwritten,
// unaddressed rows (filled with 1e30) stay untouched, index -1 starts from zeros and writes
// nothing, an empty sequence passes its slot through.
TEST(Invariants, StateIndicesPool) {
  for (DType pool_dtype : {DType::kF32, DType::kBF16}) {
    for (Algorithm alg : kBoth) {
      Config c;
      c.seqlens = {50, 0, 70, 20};
      c.H = 1;
      c.HV = 2;
      c.K = 64;
      c.V = 128;
      c.layout = StateLayout::kKFirst;
      c.initial_state = false;
      const Problem p(c);
      SCOPED_TRACE(p.describe() + " pool " + fastkda::to_string(pool_dtype) + " " +
                   fastkda::to_string(alg));
      const int64_t sw = int64_t(c.HV) * c.K * c.V, ow = int64_t(c.HV) * c.V, slots = 6;
      const std::vector<int32_t> idx = {4, 2, -1, 1};
      Buf pool(pool_dtype, size_t(slots * sw), 1e30f);
      std::mt19937 gen(p.seed);
      std::normal_distribution<float> normal(0.0f, 0.5f);
      for (int32_t s : idx)
        if (s >= 0)
          for (int64_t i = 0; i < sw; ++i) pool.set(size_t(s * sw + i), normal(gen));
      const Buf before = pool;

      Buf out(c.io, size_t(p.c.rows() * ow), std::numeric_limits<float>::quiet_NaN());
      fastkda::ForwardParams prm = p.params(alg, out, &pool);
      prm.initial_state = pool.data();
      prm.initial_state_dtype = pool_dtype;
      prm.state_indices = idx.data();
      prm.num_state_slots = slots;
      fastkda::forward(prm);

      for (size_t n = 0; n < idx.size(); ++n) {
        const Result one = run(
            sub_problem(p, p.cu64[n], p.cu64[n + 1], idx[n] >= 0 ? &before : nullptr, idx[n]), alg);
        EXPECT_TRUE(bitwise_equal(one.out.floats(), rows_of(out, p.cu64[n], p.cu64[n + 1], ow)))
            << "out of sequence " << n;
        if (idx[n] >= 0)
          EXPECT_TRUE(bitwise_equal(one.state.floats(), rows_of(pool, idx[n], idx[n] + 1, sw)))
              << "pool slot " << idx[n] << " (sequence " << n << ")";
      }
      EXPECT_TRUE(bitwise_equal(rows_of(pool, 2, 3, sw), rows_of(before, 2, 3, sw)))
          << "the empty sequence's slot must pass through unchanged";
      for (int64_t s : {0, 3, 5})
        EXPECT_TRUE(bitwise_equal(rows_of(pool, s, s + 1, sw), rows_of(before, s, s + 1, sw)))
            << "unaddressed pool slot " << s << " was written";
    }
  }
}

// Chunk-boundary states (prefix caching): row base_n + j holds sequence n's state before its token
// 64 j, i.e. the final state of a run over its first 64 j tokens (bitwise: same chunk grid, same
// rounding of the state), for j = 0 .. ceil(L_n / 64) - 1; and the chunked rows match the oracle's.
TEST(Invariants, BoundaryStatesArePrefixStates) {
  for (DType bdtype : {DType::kF32, DType::kBF16}) {
    Config c;
    if (bdtype == DType::kF32) {
      c.seqlens = {0, 1, 64, 65, 130, 200};
    } else {  // B equal-length rows
      c.B = 3;
      c.T = 130;
    }
    c.H = 1;
    c.HV = 2;
    c.layout = bdtype == DType::kF32 ? StateLayout::kVFirst : StateLayout::kKFirst;
    c.extreme_gates = 0.05;
    const Problem p(c);
    SCOPED_TRACE(p.describe() + " boundary states " + fastkda::to_string(bdtype));
    const int64_t sw = int64_t(c.HV) * c.K * c.V, C = fastkda::ForwardParams::kBoundaryInterval;
    const int64_t N = p.c.num_seqs();
    auto seq_begin = [&](int64_t n) { return c.seqlens.empty() ? n * c.T : p.cu64[size_t(n)]; };
    auto seq_len = [&](int64_t n) { return c.seqlens.empty() ? c.T : c.seqlens[size_t(n)]; };
    int64_t rows = 0;
    for (int64_t n = 0; n < N; ++n) rows += (seq_len(n) + C - 1) / C;
    ASSERT_EQ(rows, c.seqlens.empty() ? 9 : 11);
    std::vector<float> by_alg[2];
    for (Algorithm alg : kBoth) {
      Buf out(c.io, size_t(p.c.rows() * c.HV * c.V)), fin(c.state_dtype, p.state_elems());
      Buf bstates(bdtype, size_t(rows * sw), std::numeric_limits<float>::quiet_NaN());
      fastkda::ForwardParams prm = p.params(alg, out, &fin);
      prm.boundary_states = bstates.data();
      prm.boundary_states_dtype = bdtype;
      prm.num_boundary_states = rows;
      fastkda::forward(prm);
      int64_t row = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j * C < seq_len(n); ++j, ++row) {
          const Result r = run(sub_problem(p, seq_begin(n), seq_begin(n) + j * C, &p.s0, n), alg);
          Buf expected(bdtype, r.state.size());  // the prefix's f32 final state, stored as bdtype
          for (size_t i = 0; i < expected.size(); ++i) expected.set(i, r.state.get(i));
          EXPECT_TRUE(bitwise_equal(rows_of(bstates, row, row + 1, sw), expected.floats()))
              << fastkda::to_string(alg) << ": boundary row " << row << " (sequence " << n
              << ", before token " << j * C << ")";
        }
      by_alg[alg == Algorithm::kChunked ? 0 : 1] = bstates.floats();
    }
    const Err e = compare(by_alg[0], by_alg[1]);
    if (bdtype == DType::kF32) {
      EXPECT_LE(e.rms_rel, kRmsTol) << "chunked boundary states vs oracle: " << e;
    } else {
      EXPECT_LE(max_bf16_steps(by_alg[0], by_alg[1], 1e-5), 1.0) << "bf16 boundary states: " << e;
    }
  }
}

// A zero-length sequence passes its state through: final == initial (bitwise), or zeros.
TEST(Invariants, ZeroLengthSequencesPassStateThrough) {
  for (Algorithm alg : kBoth)
    for (bool has_initial : {true, false}) {
      Config c;
      c.B = 3;
      c.T = 0;
      c.initial_state = has_initial;
      c.layout = StateLayout::kKFirst;
      const Problem p(c);
      SCOPED_TRACE(p.describe() + " " + fastkda::to_string(alg));
      const Result r = run(p, alg);
      if (has_initial)
        EXPECT_TRUE(bitwise_equal(r.state.floats(), p.s0.floats()));
      else
        EXPECT_TRUE(bitwise_equal(r.state.floats(), std::vector<float>(p.state_elems(), 0.0f)));
    }
}

// Inputs given as views into wider rows (a fused projection) give the dense result bitwise.
TEST(Invariants, StridedInputsEqualDense) {
  Config c;
  c.T = 90;
  c.H = 2;
  c.HV = 4;
  c.io = DType::kBF16;
  const Problem p(c);
  SCOPED_TRACE(p.describe());
  auto widen = [](const Buf& b, int64_t rows, int64_t width, int64_t stride) {
    Buf w(b.dtype, size_t(rows * stride), 777.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < width; ++i)
        w.set(size_t(r * stride + i), b.get(size_t(r * width + i)));
    return w;
  };
  const int64_t R = c.rows(), qw = c.H * c.K, vw = c.HV * c.V, gw = c.HV * c.K;
  Buf q = widen(p.q, R, qw, qw + 8), k = widen(p.k, R, qw, qw + 72), v = widen(p.v, R, vw, vw + 16),
      g = widen(p.g, R, gw, 2 * gw), beta = widen(p.beta, R, c.HV, c.HV + 3);
  for (Algorithm alg : kBoth) {
    const Result dense = run(p, alg);
    Result r{Buf(c.io, dense.out.size()), Buf(c.state_dtype, dense.state.size())};
    fastkda::ForwardParams prm = p.params(alg, r.out, &r.state);
    prm.q = q.data();
    prm.k = k.data();
    prm.v = v.data();
    prm.g = g.data();
    prm.beta = beta.data();
    prm.q_stride = qw + 8;
    prm.k_stride = qw + 72;
    prm.v_stride = vw + 16;
    prm.g_stride = 2 * gw;
    prm.beta_stride = c.HV + 3;
    fastkda::forward(prm);
    EXPECT_TRUE(bitwise_equal(r.out.floats(), dense.out.floats())) << fastkda::to_string(alg);
    EXPECT_TRUE(bitwise_equal(r.state.floats(), dense.state.floats())) << fastkda::to_string(alg);
  }
}

// Near-collinear keys: 32 (and then 64) identical keys with no decay (raw gate -12) and
// beta -> 1 (logit +8). (I + A) is then as ill-conditioned as it gets; forward substitution in
// fp32 must stay finite and accurate (an fp16 Neumann series returns NaN here).
TEST(Adversarial, IdenticalKeys) {
  for (int run_len : {32, 64})
    for (GateMode gate : {GateMode::kSoftplus, GateMode::kBounded}) {
      Config c;
      c.T = 150;
      c.H = 2;
      c.HV = 4;
      c.K = c.V = 128;
      c.gate = gate;
      Problem p(c);
      const int64_t t0 =
          run_len == 32 ? 10 : 64;  // inside one chunk across sub-blocks / a whole chunk
      for (int64_t t = t0; t < t0 + run_len; ++t) {
        for (int64_t i = 0; i < c.H * c.K; ++i)
          p.k.set(size_t(t * c.H * c.K + i), p.k.get(size_t(t0 * c.H * c.K + i)));
        for (int64_t i = 0; i < c.HV * c.K; ++i) p.g.set(size_t(t * c.HV * c.K + i), -12.0f);
        for (int64_t h = 0; h < c.HV; ++h) p.beta.set(size_t(t * c.HV + h), 8.0f);
      }
      SCOPED_TRACE(p.describe() + " identical keys: " + std::to_string(run_len));
      const Result ref = run(p, Algorithm::kRecurrent), got = run(p, Algorithm::kChunked);
      const Err eo = compare(got.out.floats(), ref.out.floats());
      const Err es = compare(got.state.floats(), ref.state.floats());
      EXPECT_LE(eo.rms_rel, kRmsTol) << "out: " << eo;
      EXPECT_LE(es.rms_rel, kRmsTol) << "state: " << es;
    }
}

}  // namespace
}  // namespace fastkda_test
