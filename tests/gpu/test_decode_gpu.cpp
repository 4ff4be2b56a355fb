// GPU tests of the decode step (cuda::decode through fastkda::decode on Device::kCUDA):
//   - against cpu::decode (fp64) and the fp64 oracle forward(kRecurrent), over gate / beta modes,
//     dtypes, layouts, GVA, strided inputs, 1..8 tokens;
//   - decode == one-token prefill (oracle) and multi-token decode == T-token prefill;
//   - pool slots nobody addresses stay bitwise unchanged; padding rows write nothing, out = 0;
//   - per-token states equal step-by-step decode (bitwise, fp32 pool); num_accepted semantics;
//   - gates down to -1000; two runs bitwise identical; CUDA-graph capture and replay.
// Tolerances (DESIGN §5): out is bf16, compared with a bf16-rounded fp64 reference: rms_rel
// <= 2e-3 (one bf16 rounding is <= 2^-9 relative per element); an fp32 state within 2e-6 rms_rel
// of fp64 after up to 8 tokens; a bf16 state within 4e-3.
#include <gtest/gtest.h>

#include <cstdio>

#include "decode_test_util.h"

namespace fastkda_decode_test {
namespace {

constexpr double kOutTol = 2e-3;
std::string str(const Err& e) {
  std::ostringstream os;
  os << e;
  return os.str();
}
double state_tol(const Case& c) { return c.state_dtype == DType::kF32 ? 2e-6 : 4e-3; }

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: GPU decode tests skipped"

// Rows of out that belong to non-padding sequences.
auto live_rows(const Problem& p) {
  return [&p](size_t i) {
    const int64_t n = int64_t(i) / (int64_t(p.c.tokens) * p.c.HV * p.c.V);
    return p.read_slot(n) >= 0;
  };
}
auto in_slots(const Problem& p, const std::vector<bool>& written) {
  const int64_t matrix = int64_t(p.c.HV) * p.c.K * p.c.V;
  return [&written, matrix](size_t i) { return bool(written[i / matrix]); };
}

// The checks every case gets: GPU vs cpu::decode on out and the written slots, padding rows
// exactly zero, untouched slots bitwise equal to the initial pool.
void check_against_cpu(const Problem& p, const Result& gpu, const Result& cpu) {
  SCOPED_TRACE(p.describe());
  const Err eo = compare(gpu.out, cpu.out, live_rows(p));
  EXPECT_LE(eo.rms_rel, kOutTol) << "out " << eo;
  const auto written = written_slots(p);
  const Err es = compare(gpu.pool, cpu.pool, in_slots(p, written));
  EXPECT_LE(es.rms_rel, state_tol(p.c)) << "state " << es;
  const int64_t row = int64_t(p.c.tokens) * p.c.HV * p.c.V;
  for (int64_t n = 0; n < p.c.N; ++n) {
    if (p.read_slot(n) >= 0) continue;
    for (int64_t i = 0; i < row; ++i)
      ASSERT_EQ(gpu.out.h[n * row + i], 0) << "padding row " << n << " element " << i;
  }
  const int64_t matrix = int64_t(p.c.HV) * p.c.K * p.c.V;
  for (int64_t s = 0; s < p.num_slots; ++s) {
    if (written[s]) continue;
    for (int64_t i = 0; i < matrix; ++i) {
      const size_t e = size_t(s * matrix + i);
      const bool same =
          p.pool.dtype == DType::kF32 ? gpu.pool.f[e] == p.pool.f[e] : gpu.pool.h[e] == p.pool.h[e];
      ASSERT_TRUE(same) << "slot " << s << " (not addressed) changed at element " << i;
    }
  }
  std::printf("  [%s] out %s | state %s\n", p.describe().c_str(), str(eo).c_str(), str(es).c_str());
}

void run_case(const Case& c) {
  Problem p(c);
  DeviceInputs d(p);
  const Result gpu = run_gpu(p, d);
  const Result cpu = run_cpu(p);
  check_against_cpu(p, gpu, cpu);
}

TEST(DecodeGpu, KimiLinearOneToken) {
  REQUIRE_GPU();
  Case c;
  c.N = 24, c.H = 8, c.HV = 8, c.gate = GateMode::kSoftplus;
  run_case(c);
}

TEST(DecodeGpu, BoundedGateModesAndBeta) {
  REQUIRE_GPU();
  for (bool A_log : {true, false})
    for (BetaMode bm : {BetaMode::kSigmoid, BetaMode::kGiven, BetaMode::kTwoSigmoid}) {
      Case c;
      c.gate = GateMode::kBounded, c.A_log = A_log, c.beta_mode = bm, c.lower_bound = -2.5f;
      c.g_dtype = A_log ? DType::kBF16 : DType::kF32;
      c.beta_dtype = bm == BetaMode::kGiven ? DType::kF32 : DType::kBF16;
      run_case(c);
    }
}

TEST(DecodeGpu, PreGatedNoL2NormCustomScale) {
  REQUIRE_GPU();
  Case c;
  c.gate = GateMode::kPreGated, c.l2norm = false, c.scale = 0.3f;
  run_case(c);
}

TEST(DecodeGpu, LayoutsStateDtypesTokens) {
  REQUIRE_GPU();
  for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst})
    for (DType sd : {DType::kF32, DType::kBF16})
      for (int tokens : {1, 3, 8}) {
        Case c;
        c.N = 9, c.tokens = tokens, c.layout = layout, c.state_dtype = sd;
        c.gate = tokens == 3 ? GateMode::kSoftplus : GateMode::kBounded;
        run_case(c);
      }
}

TEST(DecodeGpu, GvaStridedPadding) {
  REQUIRE_GPU();
  for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
    Case c;
    c.N = 40, c.H = 4, c.HV = 12, c.tokens = 2, c.layout = layout;
    c.strided = true, c.padding = 0.3, c.g_dtype = DType::kBF16, c.beta_dtype = DType::kBF16;
    run_case(c);
  }
}

TEST(DecodeGpu, ExtremeGates) {
  REQUIRE_GPU();
  for (GateMode gm : {GateMode::kPreGated, GateMode::kSoftplus, GateMode::kBounded})
    for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
      Case c;
      c.tokens = 4, c.gate = gm, c.layout = layout, c.extreme_gates = 0.3;
      run_case(c);
    }
}

TEST(DecodeGpu, PerTokenStatesNumAccepted) {
  REQUIRE_GPU();
  for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst})
    for (DType sd : {DType::kF32, DType::kBF16}) {
      Case c;
      c.N = 20, c.tokens = 4, c.layout = layout, c.state_dtype = sd;
      c.per_token = true, c.num_accepted = true, c.padding = 0.2, c.skip_writes = 0.25;
      run_case(c);
    }
}

TEST(DecodeGpu, LargeBatch) {
  REQUIRE_GPU();
  Case c;
  c.N = 256, c.H = 8, c.HV = 16, c.padding = 0.05;
  run_case(c);
}

// Oracle: decode of T tokens == fp64 recurrent prefill of T tokens from the same slot
// (T = 1: decode == one-token prefill).
TEST(DecodeGpu, EqualsRecurrentPrefillOracle) {
  REQUIRE_GPU();
  for (int tokens : {1, 5})
    for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
      Case c;
      c.N = 12, c.tokens = tokens, c.layout = layout, c.gate = GateMode::kSoftplus;
      Problem p(c);
      SCOPED_TRACE(p.describe());
      DeviceInputs d(p);
      const Result gpu = run_gpu(p, d);
      const Result ref = run_oracle(p);
      const Err eo = compare(gpu.out, ref.out);
      const Err es = compare(gpu.pool, ref.pool, in_slots(p, written_slots(p)));
      EXPECT_LE(eo.rms_rel, kOutTol) << "out " << eo;
      EXPECT_LE(es.rms_rel, state_tol(c)) << "state " << es;
      std::printf("  oracle tokens=%d %s: out %s | state %s\n", tokens, to_string(layout),
                  str(eo).c_str(), str(es).c_str());
    }
}

// Per-token states: the state after token t (slot column t) equals t + 1 one-token steps, and so
// do the outputs; fp32 pool and the same kernel, so bit for bit.
TEST(DecodeGpu, PerTokenStatesEqualStepByStep) {
  REQUIRE_GPU();
  for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
    Case c;
    c.N = 6, c.tokens = 4, c.layout = layout, c.per_token = true;
    Problem p(c);
    SCOPED_TRACE(p.describe());
    DeviceInputs d(p);
    const Result all = run_gpu(p, d);

    // One-token problems viewing token t of each row: pointers advanced by t rows, strides x T.
    Case c1 = c;
    c1.tokens = 1, c1.per_token = false;
    Problem p1 = p;
    p1.c = c1;
    p1.slot_stride = p.slot_stride;  // read column 0 = the row's first slot, updated in place
    HostBuf pool = p.pool;
    const int64_t T = c.tokens, matrix = int64_t(c.HV) * c.K * c.V, orow = int64_t(c.HV) * c.V;
    for (int t = 0; t < c.tokens; ++t) {
      fastkda::DecodeParams dp;
      DeviceBuf out(p1.out_elems() * 2), dpool(pool.data(), pool.bytes());
      auto at = [t](const DeviceBuf& b, int64_t stride, size_t esize) {
        return static_cast<const char*>(b.get()) + size_t(t * stride) * esize;
      };
      dp = p1.params(
          {at(d.q, p.q_stride, 2), at(d.k, p.k_stride, 2), at(d.v, p.v_stride, 2),
           at(d.g, p.g_stride, fastkda::dtype_size(c.g_dtype)),
           at(d.beta, p.beta_stride, fastkda::dtype_size(c.beta_dtype)),
           static_cast<const float*>(d.A_log.get()), static_cast<const float*>(d.dt_bias.get()),
           out.get(), dpool.get(), static_cast<const int32_t*>(d.slots.get()), nullptr},
          fastkda::Device::kCUDA);
      dp.q_stride = T * p.q_stride, dp.k_stride = T * p.k_stride, dp.v_stride = T * p.v_stride;
      dp.g_stride = T * p.g_stride, dp.beta_stride = T * p.beta_stride;
      fastkda::decode(dp);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      HostBuf o(DType::kBF16, p1.out_elems());
      out.to_host(o.data());
      dpool.to_host(pool.data());
      for (int64_t n = 0; n < c.N; ++n) {
        for (int64_t i = 0; i < orow; ++i)
          ASSERT_EQ(o.h[n * orow + i], all.out.h[(n * T + t) * orow + i])
              << "out n=" << n << " t=" << t << " i=" << i;
        const int64_t s_step = p.slots[n * p.slot_stride], s_all = p.slots[n * p.slot_stride + t];
        for (int64_t i = 0; i < matrix; ++i)
          ASSERT_EQ(pool.f[s_step * matrix + i], all.pool.f[s_all * matrix + i])
              << "state n=" << n << " t=" << t << " i=" << i;
      }
    }
  }
}

TEST(DecodeGpu, Deterministic) {
  REQUIRE_GPU();
  Case c;
  c.N = 33, c.tokens = 3, c.layout = StateLayout::kKFirst;
  Problem p(c);
  DeviceInputs d(p);
  const Result a = run_gpu(p, d), b = run_gpu(p, d);
  EXPECT_TRUE(a.out == b.out && a.pool == b.pool) << p.describe();
}

// Captured into a CUDA graph on a non-default stream and replayed: same result as a direct call.
TEST(DecodeGpu, GraphCaptureReplay) {
  REQUIRE_GPU();
  Case c;
  c.N = 5;
  Problem p(c);
  DeviceInputs d(p);
  const Result direct = run_gpu(p, d);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  HostBuf out(DType::kBF16, p.out_elems());
  DeviceBuf dout(p.out_elems() * 2), dpool(p.pool.data(), p.pool.bytes());
  fastkda::DecodeParams dp = p.params(
      {d.q.get(), d.k.get(), d.v.get(), d.g.get(), d.beta.get(),
       static_cast<const float*>(d.A_log.get()), static_cast<const float*>(d.dt_bias.get()),
       dout.get(), dpool.get(), static_cast<const int32_t*>(d.slots.get()), nullptr},
      fastkda::Device::kCUDA);
  dp.stream = stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  fastkda::decode(dp);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  dout.to_host(out.data());
  HostBuf pool = p.pool;
  dpool.to_host(pool.data());
  EXPECT_TRUE(out == direct.out && pool == direct.pool);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fastkda_decode_test
