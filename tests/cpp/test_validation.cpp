// Every bad-input rule of the public API: the right fastkda::Error (naming the argument), raised
// before anything is written (out and state buffers keep their sentinel values).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common.h"
#include "fastkda/fastkda.h"

namespace {

constexpr float kSentinel = 12345.0f;

// A valid small CPU forward problem with f32 tensors; each test breaks one thing.
struct ForwardCase {
  int64_t B = 2, T = 5;
  int H = 2, HV = 4, K = 64, V = 64;
  std::vector<float> q, k, v, g, beta, out, A_log, dt_bias, s0, s1;
  std::vector<int32_t> cu{0, 3, 3, 10};
  fastkda::ForwardParams p;

  ForwardCase() {
    q.assign(B * T * H * K, 0.5f);
    k.assign(B * T * H * K, 0.25f);
    v.assign(B * T * HV * V, 1.0f);
    g.assign(B * T * HV * K, -0.5f);
    beta.assign(B * T * HV, 0.3f);
    out.assign(B * T * HV * V, kSentinel);
    A_log.assign(HV, 0.1f);
    dt_bias.assign(HV * K, 0.0f);
    s0.assign(3 * HV * K * V, 0.01f);  // room for the 3 sequences of the varlen cases
    s1.assign(3 * HV * K * V, kSentinel);
    p.device = fastkda::Device::kCPU;
    p.B = B; p.T = T; p.H = H; p.HV = HV; p.K = K; p.V = V;
    p.io_dtype = p.g_dtype = p.beta_dtype = fastkda::DType::kF32;
    p.q = q.data(); p.k = k.data(); p.v = v.data(); p.g = g.data(); p.beta = beta.data();
    p.out = out.data();
    p.gate_mode = fastkda::GateMode::kBounded;
    p.lower_bound = -5.0f;
    p.A_log = A_log.data();
    p.dt_bias = dt_bias.data();
    p.initial_state = s0.data();
    p.final_state = s1.data();
  }
  bool untouched() const {
    for (float x : out) if (x != kSentinel) return false;
    for (float x : s1) if (x != kSentinel) return false;
    return true;
  }
};

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected fastkda::Error mentioning '" << needle << "', nothing thrown";
  } catch (const fastkda::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
    EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos)
        << "message '" << e.what() << "' does not say what was expected";
  }
}

void expect_forward_error(const std::function<void(ForwardCase&)>& mutate, const std::string& needle) {
  ForwardCase c;
  mutate(c);
  expect_error([&] { fastkda::forward(c.p); }, needle);
  EXPECT_TRUE(c.untouched()) << "buffers written before the error on '" << needle << "'";
}

TEST(Validation, ValidCaseRuns) {
  ForwardCase c;
  EXPECT_NO_THROW(fastkda::forward(c.p));
  EXPECT_FALSE(c.untouched());
}

TEST(Validation, Shapes) {
  expect_forward_error([](ForwardCase& c) { c.p.HV = 3; }, "HV");
  expect_forward_error([](ForwardCase& c) { c.p.H = 0; }, "H");
  expect_forward_error([](ForwardCase& c) { c.p.K = 96; }, "K");
  expect_forward_error([](ForwardCase& c) { c.p.V = 32; }, "V");
  expect_forward_error([](ForwardCase& c) { c.p.T = -1; }, "T");
  expect_forward_error([](ForwardCase& c) { c.p.B = -2; }, "B");
  expect_forward_error([](ForwardCase& c) { c.p.q_stride = 10; }, "q_stride");
  expect_forward_error([](ForwardCase& c) { c.p.beta_stride = 1; }, "beta_stride");
}

TEST(Validation, DtypesAndPointers) {
  expect_forward_error([](ForwardCase& c) { c.p.io_dtype = fastkda::DType::kI32; }, "io_dtype");
  expect_forward_error([](ForwardCase& c) { c.p.g_dtype = fastkda::DType::kI64; }, "g_dtype");
  expect_forward_error([](ForwardCase& c) { c.p.beta_dtype = fastkda::DType::kI32; }, "beta_dtype");
  expect_forward_error([](ForwardCase& c) { c.p.q = nullptr; }, "q");
  expect_forward_error([](ForwardCase& c) { c.p.beta = nullptr; }, "beta");
  expect_forward_error([](ForwardCase& c) { c.p.out = nullptr; }, "out");
  expect_forward_error([](ForwardCase& c) { c.p.initial_state_dtype = fastkda::DType::kI32; },
                       "initial_state");
  expect_forward_error([](ForwardCase& c) { c.p.final_state_dtype = fastkda::DType::kI64; },
                       "final_state");
  expect_forward_error(
      [](ForwardCase& c) {
        c.p.final_state = c.s0.data();  // in place, but with a different dtype
        c.p.final_state_dtype = fastkda::DType::kBF16;
      },
      "final_state");
  expect_forward_error([](ForwardCase& c) { c.p.state_layout = fastkda::StateLayout(7); },
                       "state_layout");
}

TEST(Validation, GateAndBeta) {
  expect_forward_error([](ForwardCase& c) { c.p.lower_bound = -6.0f; }, "lower_bound");
  expect_forward_error([](ForwardCase& c) { c.p.lower_bound = 0.0f; }, "lower_bound");
  expect_forward_error([](ForwardCase& c) { c.p.lower_bound = NAN; }, "lower_bound");
  expect_forward_error([](ForwardCase& c) { c.p.gate_mode = fastkda::GateMode(9); }, "gate_mode");
  expect_forward_error([](ForwardCase& c) { c.p.gate_mode = fastkda::GateMode::kPreGated; },
                       "A_log");
  expect_forward_error(
      [](ForwardCase& c) {
        c.p.gate_mode = fastkda::GateMode::kPreGated;
        c.p.A_log = nullptr;
      },
      "dt_bias");
  expect_forward_error([](ForwardCase& c) { c.p.beta_mode = fastkda::BetaMode(5); }, "beta_mode");
  expect_forward_error([](ForwardCase& c) { c.p.scale = INFINITY; }, "scale");
  expect_forward_error([](ForwardCase& c) { c.p.algorithm = fastkda::Algorithm(3); }, "algorithm");
}

TEST(Validation, CuSeqlens) {
  auto varlen = [](ForwardCase& c) {
    c.p.B = 1;
    c.p.T = 10;
    c.p.N = 3;
    c.p.cu_seqlens = c.cu.data();
    c.p.cu_seqlens_dtype = fastkda::DType::kI32;
  };
  {
    ForwardCase c;
    varlen(c);
    EXPECT_NO_THROW(fastkda::forward(c.p));
  }
  expect_forward_error([&](ForwardCase& c) { varlen(c); c.p.B = 2; c.p.T = 5; }, "B");
  expect_forward_error([&](ForwardCase& c) { varlen(c); c.cu[0] = 1; }, "cu_seqlens");
  expect_forward_error([&](ForwardCase& c) { varlen(c); c.cu[2] = 2; }, "cu_seqlens");
  expect_forward_error([&](ForwardCase& c) { varlen(c); c.cu[3] = 9; }, "cu_seqlens");
  expect_forward_error([&](ForwardCase& c) { varlen(c); c.p.cu_seqlens_dtype = fastkda::DType::kF32; },
                       "cu_seqlens");
  expect_forward_error([&](ForwardCase& c) { varlen(c); c.p.N = -1; }, "N");
  expect_forward_error([](ForwardCase& c) { c.p.cu_seqlens_host = c.cu.data(); },
                       "cu_seqlens_host");
}

TEST(Validation, StateIndices) {
  std::vector<int32_t> idx{0, 5};
  expect_forward_error(
      [&](ForwardCase& c) {
        c.p.state_indices = idx.data();
        c.p.num_state_slots = 0;
      },
      "num_state_slots");
  expect_forward_error(
      [&](ForwardCase& c) {
        c.p.state_indices = idx.data();
        c.p.num_state_slots = 2;  // index 5 is out of range
      },
      "state_indices");
}

TEST(Validation, CudaRequirements) {
  if (fastkda::built_with_cuda()) {
    // CUDA-specific rules are checked before any device access: these pointers are host memory
    // and are never dereferenced, because each case fails validation first.
    expect_forward_error(
        [](ForwardCase& c) {
          c.p.device = fastkda::Device::kCUDA;
          c.p.K = c.p.V = 128;
        },
        "io_dtype");
    expect_forward_error(
        [](ForwardCase& c) {
          c.p.device = fastkda::Device::kCUDA;
          c.p.io_dtype = fastkda::DType::kBF16;
        },
        "K, V");
    expect_forward_error(
        [](ForwardCase& c) {
          c.p.device = fastkda::Device::kCUDA;
          c.p.algorithm = fastkda::Algorithm::kRecurrent;
          c.p.K = c.p.V = 128;
          c.p.io_dtype = fastkda::DType::kBF16;
        },
        "algorithm");
  } else {
    expect_forward_error([](ForwardCase& c) { c.p.device = fastkda::Device::kCUDA; },
                         "built without CUDA");
  }
}

// B * T >= 2^31 on CUDA (TMA coordinates are 32-bit): the workspace size query raises the same
// error as forward, before any device access (no GPU needed; the host buffers are never read).
TEST(Validation, CudaTokenLimitInSizeQuery) {
  if (!fastkda::built_with_cuda()) {
    expect_forward_error([](ForwardCase& c) { c.p.device = fastkda::Device::kCUDA; },
                         "built without CUDA");
    return;
  }
  auto big = [](ForwardCase& c) {
    c.p.device = fastkda::Device::kCUDA;
    c.p.K = c.p.V = 128;
    c.p.io_dtype = fastkda::DType::kBF16;
    c.p.B = 1;
    c.p.T = int64_t(1) << 31;
  };
  ForwardCase c;
  big(c);
  expect_error([&] { fastkda::forward_workspace_size(c.p); }, "T:");
  expect_forward_error(big, "T:");
  c.p.B = 2;  // B * T = 2^31 again, as two sequences
  c.p.T = int64_t(1) << 30;
  expect_error([&] { fastkda::forward_workspace_size(c.p); }, "T:");
}

// ---- decode --------------------------------------------------------------------------------
struct DecodeCase {
  int64_t N = 3;
  int H = 1, HV = 2, K = 64, V = 64, tokens = 2;
  std::vector<float> q, k, v, g, beta, out, pool;
  std::vector<int32_t> slots{0, 1, 2, 3, -1, -1};
  std::vector<int32_t> accepted{1, 2, 1};
  std::vector<float> pool_before;
  fastkda::DecodeParams p;
  DecodeCase() {
    q.assign(N * tokens * H * K, 0.5f);
    k.assign(N * tokens * H * K, 0.5f);
    v.assign(N * tokens * HV * V, 1.0f);
    g.assign(N * tokens * HV * K, -0.1f);
    beta.assign(N * tokens * HV, 0.0f);
    out.assign(N * tokens * HV * V, kSentinel);
    pool.assign(4 * HV * V * K, 0.5f);
    pool_before = pool;
    p.device = fastkda::Device::kCPU;
    p.N = N; p.tokens = tokens; p.H = H; p.HV = HV; p.K = K; p.V = V;
    p.io_dtype = p.g_dtype = p.beta_dtype = fastkda::DType::kF32;
    p.q = q.data(); p.k = k.data(); p.v = v.data(); p.g = g.data(); p.beta = beta.data();
    p.out = out.data();
    p.gate_mode = fastkda::GateMode::kSoftplus;
    p.state_pool = pool.data();
    p.num_slots = 4;
    p.slots = slots.data();
    p.slot_stride = 2;
  }
  bool untouched() const {
    for (float x : out) if (x != kSentinel) return false;
    return pool == pool_before;
  }
};

void expect_decode_error(const std::function<void(DecodeCase&)>& mutate, const std::string& needle) {
  DecodeCase c;
  mutate(c);
  expect_error([&] { fastkda::decode(c.p); }, needle);
  EXPECT_TRUE(c.untouched()) << "buffers written before the error on '" << needle << "'";
}

TEST(Validation, Decode) {
  {
    DecodeCase c;
    EXPECT_NO_THROW(fastkda::decode(c.p));
  }
  expect_decode_error([](DecodeCase& c) { c.p.tokens = 9; }, "tokens");
  expect_decode_error([](DecodeCase& c) { c.p.tokens = 0; }, "tokens");
  expect_decode_error([](DecodeCase& c) { c.p.N = -1; }, "N");
  expect_decode_error([](DecodeCase& c) { c.p.state_pool = nullptr; }, "state_pool");
  expect_decode_error([](DecodeCase& c) { c.p.num_slots = 0; }, "num_slots");
  expect_decode_error([](DecodeCase& c) { c.p.slots = nullptr; }, "slots");
  expect_decode_error([](DecodeCase& c) { c.slots[2] = 4; }, "slots");
  expect_decode_error([](DecodeCase& c) { c.p.state_dtype = fastkda::DType::kI32; }, "state_dtype");
  expect_decode_error([](DecodeCase& c) { c.p.per_token_states = true; c.p.slot_stride = 1; },
                      "slot_stride");
  expect_decode_error([](DecodeCase& c) { c.p.num_accepted = c.accepted.data(); }, "num_accepted");
  expect_decode_error(
      [](DecodeCase& c) {
        c.p.per_token_states = true;
        c.p.num_accepted = c.accepted.data();
        c.accepted[1] = 3;
      },
      "num_accepted");
  expect_decode_error([](DecodeCase& c) { c.p.lower_bound = 1.0f; c.p.gate_mode = fastkda::GateMode::kBounded; },
                      "lower_bound");
  expect_decode_error([](DecodeCase& c) { c.p.HV = 0; }, "HV");
}

}  // namespace

namespace {

TEST(Validation, DuplicateSlotsRejected) {
  // Two rows writing one pool row would race on the GPU: rejected before anything is written.
  expect_decode_error([](DecodeCase& c) { c.slots[2] = 0; }, "slots");
  std::vector<int32_t> idx{1, 1};
  expect_forward_error(
      [&](ForwardCase& c) {
        c.p.state_indices = idx.data();
        c.p.num_state_slots = 3;
      },
      "state_indices");
  // Padding rows and negative indices may repeat.
  DecodeCase c;
  c.slots = {-1, 0, -1, 0, 1, 2};
  c.p.slots = c.slots.data();
  EXPECT_NO_THROW(fastkda::decode(c.p));
}

}  // namespace

// The tuning knobs' parser (FASTKDA_PREFILL_*): unset or empty means "not forced"; a whole valid
// number is taken; anything else is an error naming the variable and the value.
TEST(Validation, EnvKnobParser) {
  const char* name = "FASTKDA_TEST_KNOB";
  auto knob = [&] {
    return fastkda::env_knob(name, "0 or 1", [](int64_t v) { return v == 0 || v == 1; });
  };
  unsetenv(name);
  EXPECT_FALSE(knob().has_value());
  setenv(name, "", 1);
  EXPECT_FALSE(knob().has_value());
  setenv(name, "1", 1);
  EXPECT_EQ(knob().value_or(-1), 1);
  setenv(name, "0", 1);
  EXPECT_EQ(knob().value_or(-1), 0);
  for (const char* bad : {"2", "-1", "yes", "1x", " 1", "1 ", "99999999999999999999"}) {
    setenv(name, bad, 1);
    try {
      (void)knob();
      ADD_FAILURE() << "'" << bad << "' must throw";
    } catch (const fastkda::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
  }
  unsetenv(name);
}

