// The CPU decode step on a state pool, through fastkda::decode: equality with the token
// recurrence (decode runs the oracle's code in double, so equality is bitwise), padding rows,
// per-token states with num_accepted, and prefill followed by decode steps.
#include <limits>

#include "test_util.h"

namespace fastkda_test {
namespace {

constexpr double kRmsTol = 1e-5;
constexpr float kSentinel = 1e30f;

// Decode parameters for a problem of B = N rows of T = tokens tokens: its [B, T, ...] inputs are
// exactly decode's [N, tokens, ...] inputs.
fastkda::DecodeParams decode_params(const Problem& p, Buf& out, Buf& pool, int64_t num_slots,
                                    const std::vector<int32_t>& slots, int64_t slot_stride) {
  const fastkda::ForwardParams fp = p.params(Algorithm::kRecurrent, out, nullptr);
  fastkda::DecodeParams d;
  static_cast<fastkda::KdaInputs&>(d) = static_cast<const fastkda::KdaInputs&>(fp);
  d.N = p.c.B;
  d.tokens = int(p.c.T);
  d.state_pool = pool.data();
  d.state_dtype = pool.dtype;
  d.state_layout = p.c.layout;
  d.num_slots = num_slots;
  d.slots = slots.data();
  d.slot_stride = slot_stride;
  return d;
}

std::vector<float> rows_of(const Buf& b, int64_t r0, int64_t r1, int64_t width) {
  return slice_rows(b, r0, r1, width).floats();
}

// Rows of sequences n of `p` as decode rows: reads pool slot slot_of[n] (negative: padding).
// Checks out and pool against the recurrent forward from the same states, bitwise.
TEST(Decode, EqualsRecurrentForwardWithPaddingRows) {
  for (int tokens : {1, 3, 8})
    for (DType pool_dtype : {DType::kF32, DType::kBF16})
      for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
        Config c;
        c.B = 5;
        c.T = tokens;
        c.H = 2;
        c.HV = 4;
        c.state_dtype = pool_dtype;
        c.layout = layout;
        c.extreme_gates = 0.05;
        const Problem p(c);
        SCOPED_TRACE(p.describe());
        const int64_t sw = int64_t(c.HV) * c.K * c.V, ow = int64_t(c.HV) * c.V, num_slots = 12;
        const std::vector<int32_t> slot_of = {9, -1, 0, 4, -1};
        Buf pool(pool_dtype, size_t(num_slots * sw), kSentinel);
        for (int64_t n = 0; n < c.B; ++n)
          if (slot_of[n] >= 0)
            for (int64_t i = 0; i < sw; ++i)
              pool.set(size_t(slot_of[n] * sw + i), p.s0.get(size_t(n * sw + i)));
        const Buf before = pool;
        Buf out(c.io, size_t(c.rows() * ow), std::numeric_limits<float>::quiet_NaN());
        fastkda::decode(decode_params(p, out, pool, num_slots, slot_of, 1));

        const Result ref = run(p, Algorithm::kRecurrent);
        const Result chunked = run(p, Algorithm::kChunked);
        for (int64_t n = 0; n < c.B; ++n) {
          const int64_t s = slot_of[n];
          const std::vector<float> o = rows_of(out, n * tokens, (n + 1) * tokens, ow);
          if (s < 0) {
            EXPECT_TRUE(bitwise_equal(o, std::vector<float>(o.size(), 0.0f)))
                << "padding row " << n << " must get out = 0";
            continue;
          }
          EXPECT_TRUE(bitwise_equal(o, rows_of(ref.out, n * tokens, (n + 1) * tokens, ow)))
              << "out of row " << n << " differs from the recurrent forward";
          EXPECT_TRUE(bitwise_equal(rows_of(pool, s, s + 1, sw), rows_of(ref.state, n, n + 1, sw)))
              << "pool slot " << s << " differs from the recurrent forward's final state";
          if (pool_dtype == DType::kF32) {
            const Err e = compare(o, rows_of(chunked.out, n * tokens, (n + 1) * tokens, ow));
            EXPECT_LE(e.rms_rel, kRmsTol) << "out of row " << n << " vs chunked: " << e;
          }
        }
        for (int64_t s = 0; s < num_slots; ++s)
          if (s != 9 && s != 0 && s != 4)
            EXPECT_TRUE(bitwise_equal(rows_of(pool, s, s + 1, sw), rows_of(before, s, s + 1, sw)))
                << "slot " << s << " (unaddressed or read by a padding row) was written";
      }
}

// per_token_states: the state after token t goes to slots[n, t] (skipped where negative); the
// initial state comes from slots[n, num_accepted[n] - 1] (column 0 without num_accepted).
TEST(Decode, PerTokenStatesAndNumAccepted) {
  for (bool with_accepted : {true, false}) {
    Config c;
    c.B = 3;
    c.T = 4;  // tokens
    c.H = 1;
    c.HV = 2;
    c.K = 64;
    c.V = 128;
    c.layout = StateLayout::kVFirst;
    const Problem p(c);
    SCOPED_TRACE(p.describe() + (with_accepted ? " num_accepted" : " no num_accepted"));
    const int tokens = 4;
    const int64_t sw = int64_t(c.HV) * c.K * c.V, ow = int64_t(c.HV) * c.V, stride = 5;
    const int64_t num_slots = 16;
    std::vector<int32_t> slots(size_t(c.B * stride));
    for (int64_t n = 0; n < c.B; ++n) {
      for (int64_t t = 0; t < tokens; ++t)
        slots[size_t(n * stride + t)] = int32_t(15 - (n * tokens + t));
      slots[size_t(n * stride + tokens)] = 123456;  // beyond `tokens` columns: never read
    }
    slots[2 * stride + 1] = -1;  // row 2 keeps no state after its second token
    const std::vector<int32_t> accepted = {1, 3, 4};

    Buf pool(DType::kF32, size_t(num_slots * sw), kSentinel);
    Buf s0(DType::kF32, size_t(c.B * sw));  // the initial state of each row, for the reference
    for (int64_t n = 0; n < c.B; ++n) {
      const int64_t col = with_accepted ? accepted[n] - 1 : 0, s = slots[size_t(n * stride + col)];
      for (int64_t i = 0; i < sw; ++i) {
        pool.set(size_t(s * sw + i), p.s0.get(size_t(n * sw + i)));
        s0.set(size_t(n * sw + i), p.s0.get(size_t(n * sw + i)));
      }
    }
    const Buf before = pool;
    Buf out(c.io, size_t(c.rows() * ow), std::numeric_limits<float>::quiet_NaN());
    fastkda::DecodeParams d = decode_params(p, out, pool, num_slots, slots, stride);
    d.per_token_states = true;
    d.num_accepted = with_accepted ? accepted.data() : nullptr;
    fastkda::decode(d);

    std::vector<bool> written(num_slots, false);
    for (int64_t n = 0; n < c.B; ++n) {
      const Result whole =
          run(sub_problem(p, n * tokens, (n + 1) * tokens, &s0, n), Algorithm::kRecurrent);
      EXPECT_TRUE(bitwise_equal(rows_of(out, n * tokens, (n + 1) * tokens, ow), whole.out.floats()))
          << "out of row " << n;
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t s = slots[size_t(n * stride + t)];
        if (s < 0) continue;
        written[s] = true;
        const Result prefix =
            run(sub_problem(p, n * tokens, n * tokens + t + 1, &s0, n), Algorithm::kRecurrent);
        EXPECT_TRUE(bitwise_equal(rows_of(pool, s, s + 1, sw), prefix.state.floats()))
            << "slot " << s << " must hold row " << n << "'s state after token " << t;
      }
    }
    for (int64_t s = 0; s < num_slots; ++s)
      if (!written[s])
        EXPECT_TRUE(bitwise_equal(rows_of(pool, s, s + 1, sw), rows_of(before, s, s + 1, sw)))
            << "slot " << s << " is not a write target but was written";
  }
}

// Chunked prefill of T1 tokens into a pool slot, then decode steps of 1, 1, 1 and 4 tokens ==
// one longer prefill (the oracle over all T1 + 7 tokens), within fp32 error.
TEST(Decode, PrefillThenDecodeEqualsLongerPrefill) {
  Config c;
  c.T = 77;
  c.H = 2;
  c.HV = 4;
  c.K = c.V = 128;
  c.extreme_gates = 0.05;
  const Problem p(c);
  SCOPED_TRACE(p.describe());
  const int64_t T1 = 70, sw = int64_t(c.HV) * c.K * c.V, ow = int64_t(c.HV) * c.V, slot = 2;
  const Result ref = run(p, Algorithm::kRecurrent);

  const Result pre = run(sub_problem(p, 0, T1, &p.s0, 0), Algorithm::kChunked);
  Buf pool(DType::kF32, size_t(4 * sw), kSentinel);
  for (int64_t i = 0; i < sw; ++i) pool.set(size_t(slot * sw + i), pre.state.get(size_t(i)));
  std::vector<float> out = pre.out.floats();
  const std::vector<int32_t> slots = {int32_t(slot)};
  int64_t t0 = T1;
  for (int64_t step : {1, 1, 1, 4}) {
    Problem rows =
        sub_problem(p, t0, t0 + step, nullptr, 0);  // [1, step, ...] = decode's [N=1, tokens]
    Buf o(c.io, size_t(step * ow));
    fastkda::decode(decode_params(rows, o, pool, 4, slots, 1));
    const std::vector<float> of = o.floats();
    out.insert(out.end(), of.begin(), of.end());
    t0 += step;
  }
  const Err eo = compare(out, ref.out.floats());
  const Err es = compare(rows_of(pool, slot, slot + 1, sw), ref.state.floats());
  EXPECT_LE(eo.rms_rel, kRmsTol) << "out: " << eo;
  EXPECT_LE(es.rms_rel, kRmsTol) << "state: " << es;
}

}  // namespace
}  // namespace fastkda_test
