// The prefill's launch plan (src/cuda/prefill/plan.h) on the host, no GPU needed: the plans of
// DESIGN §6's benchmark shapes on a 132-SM H200 (each the cost model's choice, confirmed by forced
// plans on the GPU: BENCHMARKS.md), the invariants the launches rely on over a grid of shapes,
// gates and SM counts, and the FASTKDA_PREFILL_* tuning knobs (forced values, bad values).
// Built where the library has the CUDA kernels (FASTKDA_CUDA).
#ifdef FASTKDA_WITH_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common.h"
#include "cuda/prefill/plan.h"
#include "fastkda/fastkda.h"
#include "scoped_env.h"

namespace {

using fastkda::ForwardParams;
using fastkda::GateMode;
using fastkda::cuda::choose_plan;
using fastkda::cuda::Plan;
using fastkda_test::ScopedEnv;

constexpr int kH200Sms = 132;

// K = V = 128 (the CUDA prefill's head dims). Varlen: num_seq sequences of T tokens in all (the
// plan knows only their number and the total: cu_seqlens is a device array it never reads).
ForwardParams shape(int64_t T, int64_t HV, int64_t num_seq = 1, bool varlen = false,
                    GateMode gate = GateMode::kBounded) {
  static const int32_t kCuSeqlens[2] = {0, 0};
  ForwardParams p;
  p.device = fastkda::Device::kCUDA;
  p.B = varlen ? 1 : num_seq, p.T = T, p.H = HV, p.HV = HV, p.K = 128, p.V = 128;
  p.gate_mode = gate;
  if (varlen) p.cu_seqlens = kCuSeqlens, p.N = num_seq;
  return p;
}

Plan plan_of(const ForwardParams& p, int sms = kH200Sms) {
  return choose_plan(p, fastkda::num_sequences(p), sms);
}

std::string describe(const Plan& q) {
  return "vsplit " + std::to_string(q.vsplit) + ", segments " + std::to_string(q.seg_chunks) +
         " / " + std::to_string(q.seg0_chunks) + " chunks, first_out " +
         std::to_string(q.first_out) + ", pairs " + std::to_string(q.pairs) + ", streamed " +
         std::to_string(q.streamed) + " (keep_sms " + std::to_string(q.keep_sms) + ", retire " +
         std::to_string(q.retire_tile) + " of " + std::to_string(q.intra_tiles) +
         " tiles), longest_first " + std::to_string(q.longest_first) + ", persistent " +
         std::to_string(q.persistent) + ", slot_map " + std::to_string(q.slot_map) + ", f16 " +
         std::to_string(q.f16) + ", combine_rows " + std::to_string(q.combine_rows) + ", wy64 " +
         std::to_string(q.wy64);
}
// The 64-token WY pipeline's plan: nothing else of the plan is used.
Plan wy64_plan() {
  Plan q;
  q.wy64 = true;
  return q;
}

// The expected plans of the benchmark rows (BenchmarkShapesOnH200).
Plan unsplit(int vsplit) {
  Plan q;
  q.vsplit = vsplit;
  return q;
}
Plan varlen_rows(Plan q, bool persistent) {  // more scan CTAs than SMs: longest first
  q.longest_first = true, q.persistent = persistent, q.slot_map = true;
  return q;
}
// The unsplit streamed plan: the keepers make all but `retire` of the tiles beside the scan
// (session 32: H96 T8192 at 8.5 % of its tiles, the measured best 6-8 %; 11.9 % since session 36's
// f16 chunk cost, measured the same; H32 T4096 softplus at 0).
Plan streamed(Plan q, int64_t tiles, int keep_sms, int64_t retire) {
  q.streamed = true, q.intra_tiles = tiles, q.keep_sms = keep_sms, q.retire_tile = retire;
  return q;
}
// Split T with pairs (vsplit 1, segment 0's outputs in pass 1); streamed: beside the intra
// kernel, whose CTAs off the keepers' SMs stop at once (sessions 30, 31). The combine at 32 rows
// per CTA where 8 CTAs of 16 rows per head would take two waves (H32), else 16.
Plan split(int seg, int seg0, bool stream, int64_t tiles, int combine_rows = 16) {
  Plan q;
  q.seg_chunks = seg, q.seg0_chunks = seg0, q.first_out = true, q.pairs = true;
  q.combine_rows = combine_rows;
  if (stream) q.streamed = true, q.intra_tiles = tiles, q.keep_sms = kH200Sms - 32;
  return q;
}
// The twelve benchmark rows (tests/gpu/test_prefill_bench.cpp) with the bounded gate and with the
// softplus gate (FASTKDA_BENCH_GATE=softplus). A change of any of these plans changes a
// benchmarked time: re-measure the row and update BENCHMARKS.md with it. The softplus gate's
// intra kernel (intra_warp_hier, the binary anchor split, session 34) costs ~0.86 SM-us per grid
// tile and ~0.9 streamed (0.57 / 0.58 for the bounded gate's two anchors), so the keepers make
// less of the tiles and the non-keepers retire later (H96 T8192 at 41 % of its tiles; 40 %
// measured best of 20-65 %), H64 T8192 runs the two kernels at vsplit 2 (0.698 ms against 0.744
// streamed at vsplit 1), and the split of H8 T65536 stays after the intra grid (beside the
// streamed kernel 1.097 ms against 1.074; the split's keepers are costed at 0.97).
TEST(PrefillPlan, BenchmarkShapesOnH200) {
  struct Row {
    const char* name;
    int64_t T, HV, num_seq;
    bool varlen;
    Plan bounded, softplus;
  };
  const Plan longest = varlen_rows(unsplit(1), false), short64 = varlen_rows(unsplit(1), true);
  const Row rows[] = {
      {"H96 fixed T8192", 8192, 96, 1, false, streamed(unsplit(1), 512 * 96, 36, 5829),
       streamed(unsplit(1), 512 * 96, 36, 21233)},
      {"H96 varlen six", 8192, 96, 6, true, longest, longest},
      {"H96 varlen 1024x8", 8192, 96, 8, true, longest, longest},
      {"H64 fixed T8192", 8192, 64, 1, false, unsplit(2), unsplit(2)},
      {"H64 varlen six", 8192, 64, 6, true, longest, longest},
      {"H64 varlen 1024x8", 8192, 64, 8, true, longest, longest},
      {"H32 T4096", 4096, 32, 1, false, wy64_plan(), streamed(unsplit(2), 256 * 32, 68, 0)},
      {"H32 T16384", 16384, 32, 1, false, wy64_plan(), split(148, 432, true, 1024 * 32, 32)},
      {"H32 T65536", 65536, 32, 1, false, wy64_plan(), split(592, 1728, true, 4096 * 32, 32)},
      {"H8 T65536", 65536, 8, 1, false, split(236, 344, false, 0), split(236, 344, false, 0)},
      {"H4 T65536", 65536, 4, 1, false, split(120, 176, false, 0), split(120, 176, false, 0)},
      {"64 x 128, H32", 8192, 32, 64, true, short64, short64},
  };
  for (const Row& r : rows)
    for (const GateMode gate : {GateMode::kBounded, GateMode::kSoftplus}) {
      Plan want = gate == GateMode::kBounded ? r.bounded : r.softplus;
      want.sms = kH200Sms;
      want.f16 = !want.wy64;  // l2norm'd keys, sigmoid beta (ForwardParams' defaults), gate <= 0
      EXPECT_EQ(describe(plan_of(shape(r.T, r.HV, r.num_seq, r.varlen, gate))), describe(want))
          << r.name << ", " << fastkda::to_string(gate);
    }
}

// The kVs = 128 scan's operands are part of the plan and of its key: f16 where the state rows
// have a bound (plan.h f16_scan), at 1.33 us per chunk; tf32 otherwise, at 1.38. For H32 T4096
// that moves the choice between split T with pairs (f16) and the unsplit streamed scan at
// vsplit 2 (tf32), so a plan kept for one mode must not serve another of the same shape.
TEST(PrefillPlan, ScanOperandsInThePlanAndItsKey) {
  // The split-T and streamed plans (the WY pipeline, which this shape takes by default, keeps its
  // own operands: Wy64WhereItRuns).
  ScopedEnv no_wy64("FASTKDA_PREFILL_WY64", "0");
  const Plan f16_split = split(40, 96, true, 256 * 32, 32);
  const Plan tf32_streamed = streamed(unsplit(2), 256 * 32, 68, 0);
  ForwardParams p = shape(4096, 32);
  for (int round = 0; round < 2; ++round) {  // each mode after another: the kept plan is keyed
    ForwardParams given = p, raw = p, pregated = p;
    given.beta_mode = fastkda::BetaMode::kGiven;
    raw.l2norm_qk = false;
    pregated.gate_mode = GateMode::kPreGated;
    for (const auto& [name, q, want_f16] :
         {std::tuple{"sigmoid beta, l2norm, bounded", p, true},
          std::tuple{"given beta", given, false}, std::tuple{"l2norm off", raw, false},
          std::tuple{"pre-gated", pregated, false}}) {
      EXPECT_EQ(fastkda::cuda::f16_scan(q), want_f16) << name;
      const Plan got = plan_of(q);
      EXPECT_EQ(got.f16, want_f16) << name;
      if (q.gate_mode == GateMode::kBounded) {  // the pre-gated gate has its own intra costs
        Plan want = want_f16 ? f16_split : tf32_streamed;
        want.sms = kH200Sms, want.f16 = want_f16;
        EXPECT_EQ(describe(got), describe(want)) << name << ", round " << round;
      }
    }
  }
}

// What the launches rely on, for every plan of a grid of shapes, gates and SM counts (H100 PCIe
// 114, H200 / H100 SXM 132, and a partitioned 66).
TEST(PrefillPlan, InvariantsOverShapesGatesAndSmCounts) {
  int checked = 0;
  for (const int sms : {66, 114, 132})
    for (const GateMode gate : {GateMode::kBounded, GateMode::kSoftplus, GateMode::kPreGated})
      for (const int64_t hv : {1, 4, 8, 24, 32, 48, 64, 96, 128})
        for (const int64_t T : {16, 1000, 4096, 16384, 65536, 262144})
          for (const auto& [num_seq, varlen] : std::vector<std::pair<int64_t, bool>>{
                   {1, false}, {2, false}, {4, false}, {1, true}, {6, true}, {64, true}}) {
            if (varlen && T < num_seq) continue;
            const ForwardParams p = shape(T, hv, num_seq, varlen, gate);
            const Plan q = plan_of(p, sms);
            const std::string what = "sms " + std::to_string(sms) + " gate " +
                                     fastkda::to_string(gate) + " HV " + std::to_string(hv) +
                                     " T " + std::to_string(T) + " sequences " +
                                     std::to_string(num_seq) + (varlen ? " varlen" : " fixed") +
                                     ": " + describe(q);
            const int64_t heads = num_seq * hv, jobs = heads * q.vsplit;
            EXPECT_EQ(q.sms, sms) << what;
            EXPECT_TRUE(q.vsplit == 1 || q.vsplit == 2 || q.vsplit == 4) << what;
            if (q.seg_chunks == 0) {
              EXPECT_TRUE(q.seg0_chunks == 0 && !q.first_out && !q.pairs) << what;
              EXPECT_EQ(q.combine_rows, 16) << what;
            } else {  // segments of whole boundary intervals (64 tokens), segment 0 the longest;
              // the combine in one wave of CTAs where 16 rows per CTA would take two
              EXPECT_EQ(q.combine_rows, heads * 8 > sms ? 32 : 16) << what;
              EXPECT_EQ(q.seg_chunks % 4, 0) << what;
              EXPECT_EQ(q.seg0_chunks % 4, 0) << what;
              EXPECT_GE(q.seg0_chunks, q.seg_chunks) << what;
              EXPECT_TRUE(!q.persistent && !q.longest_first) << what;
            }
            if (q.pairs) EXPECT_TRUE(q.vsplit == 1 && q.first_out) << what;
            if (q.persistent) EXPECT_GT(jobs, sms) << what;
            EXPECT_EQ(q.slot_map, varlen && num_seq > 1 && !q.streamed) << what;
            if (q.streamed) {  // tiles in time order of one length: a fixed batch or one sequence
              EXPECT_TRUE(!varlen || num_seq == 1) << what;
              EXPECT_EQ(q.intra_tiles, fastkda::cuda::longest_chunks(p) * heads) << what;
              EXPECT_TRUE(q.retire_tile >= 0 && q.retire_tile <= q.intra_tiles) << what;
              EXPECT_TRUE(!q.persistent && !q.longest_first) << what;
              if (q.seg_chunks) {  // kFirst, one CTA per head, on the SMs the intra CTAs leave
                EXPECT_TRUE(q.pairs && q.retire_tile == 0) << what;
                EXPECT_EQ(q.keep_sms, sms - heads) << what;
              } else {  // the one-wave scan beside at least 8 keepers
                EXPECT_EQ(q.keep_sms, sms - jobs) << what;
                EXPECT_GE(q.keep_sms, 8) << what;
              }
            } else {
              EXPECT_TRUE(q.intra_tiles == 0 && q.keep_sms == 0 && q.retire_tile == 0) << what;
            }
            ++checked;
          }
  EXPECT_GT(checked, 2500);
}

// Each knob forces what it names where that is possible.
TEST(PrefillPlan, KnobsForceThePlan) {
  {
    ScopedEnv vsplit("FASTKDA_PREFILL_VSPLIT", "4");
    const Plan q = plan_of(shape(8192, 64));
    EXPECT_EQ(q.vsplit, 4) << describe(q);
  }
  {
    ScopedEnv seg("FASTKDA_PREFILL_SEG", "1024"), seg0("FASTKDA_PREFILL_SEG0", "2048");
    const Plan q = plan_of(shape(65536, 8));
    EXPECT_TRUE(q.seg_chunks == 64 && q.seg0_chunks == 128 && q.vsplit == 1 && q.pairs &&
                !q.streamed)
        << describe(q);
  }
  {
    ScopedEnv seg("FASTKDA_PREFILL_SEG", "0");
    const Plan q = plan_of(shape(65536, 8));
    EXPECT_EQ(q.seg_chunks, 0) << describe(q);
  }
  {
    ScopedEnv pair("FASTKDA_PREFILL_PAIR", "0");
    const Plan q = plan_of(shape(65536, 8));
    EXPECT_TRUE(q.seg_chunks > 0 && q.first_out && !q.pairs) << describe(q);
  }
  {
    ScopedEnv first_out("FASTKDA_PREFILL_FIRST_OUT", "0");
    const Plan q = plan_of(shape(65536, 8));
    EXPECT_TRUE(q.seg_chunks > 0 && !q.first_out && !q.pairs) << describe(q);
  }
  {
    ScopedEnv stream("FASTKDA_PREFILL_STREAM", "0");
    const Plan q = plan_of(shape(8192, 96));
    EXPECT_FALSE(q.streamed) << describe(q);
  }
  {
    ScopedEnv retire("FASTKDA_PREFILL_RETIRE", "50");
    const Plan q = plan_of(shape(8192, 96));
    EXPECT_TRUE(q.streamed && q.retire_tile == 512 * 96 / 2) << describe(q);
  }
  {  // the split beside the streamed intra kernel, at a forced segment length
    ScopedEnv stream("FASTKDA_PREFILL_STREAM", "1"), seg("FASTKDA_PREFILL_SEG", "3072");
    const Plan q = plan_of(shape(16384, 32));
    EXPECT_TRUE(q.streamed && q.pairs && q.seg_chunks == 192 && q.keep_sms == kH200Sms - 32)
        << describe(q);
    // The softplus gate's split beside its streamed intra kernel too (since session 34).
    const Plan s = plan_of(shape(16384, 32, 1, false, GateMode::kSoftplus));
    EXPECT_TRUE(s.streamed && s.pairs && s.seg_chunks == 192 && s.keep_sms == kH200Sms - 32)
        << describe(s);
  }
  {
    ScopedEnv order("FASTKDA_PREFILL_ORDER", "0");
    const Plan q = plan_of(shape(8192, 96, 6, true));
    EXPECT_FALSE(q.longest_first) << describe(q);
  }
  {
    ScopedEnv persist("FASTKDA_PREFILL_PERSIST", "0");
    const Plan q = plan_of(shape(8192, 32, 64, true));
    EXPECT_FALSE(q.persistent) << describe(q);
  }
  for (const char* rows : {"16", "32"}) {  // H32 T16384 takes 32 rows, H8 T65536 16
    ScopedEnv combine("FASTKDA_PREFILL_COMBINE_ROWS", rows);
    for (const int64_t hv : {32, 8}) {
      const Plan q = plan_of(shape(hv == 32 ? 16384 : 65536, hv));
      EXPECT_TRUE(q.seg_chunks > 0 && q.combine_rows == std::stoi(rows)) << describe(q);
    }
  }
}

// A bad value is an error naming the variable, the expectation and the value, also where the knob
// would have no effect (the size query raises it before any launch).
// The 64-token WY pipeline (plan.cu use_wy64): chosen by itself for 24-40 sequences x heads of a
// fixed-length batch with T in [4096, 65536] (20-40 at T = 4096; session 44's measurements), the
// bounded gate, bf16 g, HV = H, no knob of the other plans set; never where it cannot run
// (forcing it there is an error naming the knob and what it needs); forced on, it runs any
// supported shape.
TEST(PrefillPlan, Wy64WhereItRuns) {
  EXPECT_TRUE(plan_of(shape(4096, 32)).wy64);
  EXPECT_TRUE(plan_of(shape(4096, 28)).wy64);
  EXPECT_TRUE(plan_of(shape(16384, 28)).wy64);
  EXPECT_TRUE(plan_of(shape(16384, 32)).wy64);
  EXPECT_TRUE(plan_of(shape(65536, 32)).wy64);
  EXPECT_TRUE(plan_of(shape(8192, 20, 2)).wy64);  // 40 sequences x heads
  EXPECT_TRUE(plan_of(shape(4096, 24)).wy64);
  EXPECT_TRUE(plan_of(shape(4096, 20)).wy64);
  EXPECT_TRUE(plan_of(shape(65536, 28)).wy64);
  EXPECT_TRUE(plan_of(shape(65536, 24)).wy64);
  EXPECT_TRUE(plan_of(shape(16384, 12, 2)).wy64);  // 24 sequences x heads
  EXPECT_FALSE(plan_of(shape(8192, 20)).wy64);
  EXPECT_FALSE(plan_of(shape(4096, 16)).wy64);
  EXPECT_FALSE(plan_of(shape(8192, 16)).wy64);
  EXPECT_FALSE(plan_of(shape(4096, 44)).wy64);
  EXPECT_FALSE(plan_of(shape(65536, 44)).wy64);
  EXPECT_FALSE(plan_of(shape(4096, 16, 3)).wy64);  // 48 sequences x heads
  EXPECT_FALSE(plan_of(shape(131072, 32)).wy64);
  EXPECT_FALSE(plan_of(shape(2048, 32)).wy64);
  EXPECT_FALSE(plan_of(shape(8192, 64)).wy64);
  {
    ScopedEnv seg("FASTKDA_PREFILL_SEG", "1024");  // a knob of the other plans: those
    EXPECT_FALSE(plan_of(shape(4096, 32)).wy64);
  }
  EXPECT_FALSE(plan_of(shape(4096, 32, 1, false, GateMode::kSoftplus)).wy64);
  EXPECT_FALSE(plan_of(shape(4096, 32, 8, true)).wy64);  // varlen
  ForwardParams f32_g = shape(4096, 32), gva = shape(4096, 32), odd_t = shape(4100, 32);
  f32_g.g_dtype = fastkda::DType::kF32;
  gva.H = 8;
  EXPECT_FALSE(plan_of(f32_g).wy64);
  EXPECT_FALSE(plan_of(gva).wy64);
  EXPECT_FALSE(plan_of(odd_t).wy64);
  ScopedEnv on("FASTKDA_PREFILL_WY64", "1");
  EXPECT_TRUE(plan_of(shape(64, 2)).wy64);
  EXPECT_TRUE(plan_of(shape(65536, 32)).wy64);
  for (const auto& [q, needs] :
       {std::pair{f32_g, "a bf16 g"}, std::pair{gva, "HV = H"}, std::pair{odd_t, "multiple of 64"},
        std::pair{shape(4096, 32, 8, true), "fixed-length"},
        std::pair{shape(4096, 125), "SMs - 8"}}) {
    try {
      plan_of(q);
      ADD_FAILURE() << needs << ": forced on, accepted";
    } catch (const fastkda::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("FASTKDA_PREFILL_WY64"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needs), std::string::npos) << msg;
    }
  }
  ScopedEnv off("FASTKDA_PREFILL_WY64", "0");
  EXPECT_FALSE(plan_of(shape(4096, 32)).wy64);
}

TEST(PrefillPlan, BadKnobValuesRaiseNamingTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"FASTKDA_PREFILL_VSPLIT", "3"},        {"FASTKDA_PREFILL_VSPLIT", "2x"},
      {"FASTKDA_PREFILL_SEG", "100"},         {"FASTKDA_PREFILL_SEG", "-64"},
      {"FASTKDA_PREFILL_FIRST_OUT", "2"},     {"FASTKDA_PREFILL_PAIR", "yes"},
      {"FASTKDA_PREFILL_STREAM", "-1"},       {"FASTKDA_PREFILL_RETIRE", "101"},
      {"FASTKDA_PREFILL_ORDER", "1.0"},       {"FASTKDA_PREFILL_PERSIST", " 1"},
      {"FASTKDA_PREFILL_COMBINE_ROWS", "64"}, {"FASTKDA_PREFILL_WY64", "2"},
  };
  for (const auto& [name, value] : bad) {
    ScopedEnv knob(name, value);
    try {
      plan_of(shape(4096, 32));
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const fastkda::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + value + "'"), std::string::npos) << msg;
    }
  }
  // Segment 0's length needs a segment length at most as long.
  ScopedEnv seg0("FASTKDA_PREFILL_SEG0", "1024");
  EXPECT_THROW(plan_of(shape(65536, 8)), fastkda::Error);
  ScopedEnv seg("FASTKDA_PREFILL_SEG", "2048");
  EXPECT_THROW(plan_of(shape(65536, 8)), fastkda::Error);
}

}  // namespace

#endif  // FASTKDA_WITH_CUDA
