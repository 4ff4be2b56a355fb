// The prefill's launch plan (plan.h): one cost model of the passes, fitted to measured H200
// times, and the tuning knobs that override it.
#include "cuda/prefill/plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common.h"
#include "cuda/prefill/config.h"

namespace fastkda::cuda {

// Chunks of the longest sequence as far as the host knows (a fixed-length batch: T; one varlen
// sequence: at most all tokens): the streamed kernel's chunk indices and its ready blocks.
int64_t longest_chunks(const ForwardParams& p) {
  const int64_t tokens = p.cu_seqlens ? p.B * p.T : p.T;
  return (tokens + prefill_cuda::kC - 1) / prefill_cuda::kC;
}

namespace {

// CTAs per (sequence, value head): FASTKDA_PREFILL_VSPLIT=1|2|4 forces the value split (1, 2 or
// 4 CTAs of kVs = 128, 64 or 32 value rows); 0 returned when not forced (choose_split decides).
int env_vsplit() {
  return int(env_knob("FASTKDA_PREFILL_VSPLIT", "1, 2 or 4",
                      [](int64_t v) { return v == 1 || v == 2 || v == 4; })
                 .value_or(0));
}

// Longest-first CTA order (order.cuh) for varlen batches whose scan grid needs more than one wave
// and whose N is small enough for the O(N^2) ranking. FASTKDA_PREFILL_ORDER=1 / 0 forces it on (any
// varlen batch up to kOrderMaxSeqs) / off (tests, benchmarks).
// The variable is checked for every problem (a bad value is an error even where it has no effect).
bool use_longest_first(const ForwardParams& p, int64_t num_seq, const Plan& plan, int sms) {
  const std::optional<int64_t> forced =
      env_knob("FASTKDA_PREFILL_ORDER", "0 or 1", [](int64_t v) { return v == 0 || v == 1; });
  if (!p.cu_seqlens || plan.seg_chunks || num_seq > prefill_cuda::kOrderMaxSeqs) return false;
  return forced ? *forced == 1 : num_seq * p.HV * plan.vsplit > sms;
}

// Streamed intra kernel: FASTKDA_PREFILL_STREAM=0 / 1 forces it off / on (where possible: an
// unsplit one-wave scan of a fixed-length batch or one sequence, at least kStreamMinFree SMs
// free); FASTKDA_PREFILL_RETIRE=<percent> sets the retire tile as a share of all tiles (tests,
// sweeps). Both are checked for every problem.
constexpr int kStreamMinFree = 8;
std::optional<int64_t> env_stream() {
  return env_knob("FASTKDA_PREFILL_STREAM", "0 or 1", [](int64_t v) { return v == 0 || v == 1; });
}
std::optional<int64_t> env_retire() {
  return env_knob("FASTKDA_PREFILL_RETIRE", "a percentage, 0 to 100",
                  [](int64_t v) { return v >= 0 && v <= 100; });
}

// The value split, split T and the streamed intra kernel from one cost model of the passes (H200,
// refitted in session 9 from forced plans, bench/results/2026-11-29_s9_ab2, kVs = 64 and the
// streamed plan in session 10): a 16-token chunk of a scan CTA (one CTA per SM) takes
// ~1.38 / 0.96 / 1.15 us at kVs = 128 / 64 / 32, CTAs run in whole
// waves, and each wave costs ~20 us more (start state, pipeline fill, state stores). Unsplit: one
// CTA walks all chunks of its (sequence, head, value slice). Split into nseg segments: pass 1 runs
// heads x vsplit x (2 nseg - 3) CTAs without outputs (~0.85 of a chunk's time; with first_out,
// below, segment 0's are output jobs), pass 2 heads x vsplit x nseg CTAs (nseg - 1 with
// first_out), and the combine ~1.5 us per segment (session 29, Nsight Compute: 27.3 / 52.3 us
// for the 15 / 32 steps of H8 / H4 T65536; 2.6 before it, session 17: 40 us for the 16
// steps of H4 T65536's 18 segments on tensor cores; the bench shapes' plans are the same at
// either value; the f32 FMA combine took
// ~8.5 us per segment, least squares over 12 forced splits of H4 / H8 / H32 at 1024 - 4096-token
// segments). Session 17's forced splits of H4 / H8 T65536 at 1024 - 4096 tokens rank as this
// model ranks them (best 2048 / 4096 tokens), each 40 - 210 us under its estimate
// (bench/results/2026-11-30_s17_combine). Split only under 0.97 of the best unsplit estimate
// (measured at the edge in session 9: H32 T16384 split 1.280 ms, unsplit 1.320). Lengths are
// known only on average for varlen (cu_seqlens stays on the device). FASTKDA_PREFILL_VSPLIT
// forces the value split (of both), FASTKDA_PREFILL_SEG=<tokens, a multiple of 64> a segment
// length, 0 none.
Plan choose_split(const ForwardParams& p, int64_t num_seq, int sms) {
  Plan plan;
  const std::optional<int64_t> forced_stream = env_stream(), forced_retire = env_retire();
  const int64_t heads = num_seq * p.HV;
  const int forced_vs = env_vsplit();  // 0: not forced
  const int64_t interval = ForwardParams::kBoundaryInterval;
  const std::optional<int64_t> forced_seg =
      env_knob("FASTKDA_PREFILL_SEG", "0 or a multiple of 64 tokens up to 2^24", [&](int64_t v) {
        return v >= 0 && v % interval == 0 && v <= (int64_t(1) << 24);
      });
  const double chunks = num_seq > 0 ? double(p.B * p.T) / double(num_seq) / prefill_cuda::kC : 0;
  auto waves = [&](int64_t ctas) { return double((ctas + sms - 1) / sms); };
  // kVs = 128: 1.38 since session 15 (the prepare's truncated operands, gate FMA and v^T pairs:
  // -4 to -5 % on the kVs = 128 rows; the retire sweep then found 44 % of the tiles best for H96
  // T8192, 0.920 ms against 0.926 at the 41.3 % of 1.45 us, bench/results/2026-11-30_s15_final).
  // kVs = 64: 0.93 since session 30 (Nsight Compute since session 21: 0.93 us per chunk at H64
  // fixed); with 0.96 the streamed H32 T4096 plan came out 12 us above its measured 0.261 ms and
  // lost to a split with pairs that measured 0.264.
  // kVs = 128 on f16 operands (f16_scan, sessions 35-36): 1.33 (Nsight Compute, session 36: H96
  // fixed's scan 683 us for 512 chunks). Against 1.38 for every mode (session 36, call 9, six /
  // four alternating rounds): bounded H32 T4096 / T16384 / T65536 -0.9 / -1.6 / -1.2 % (T4096
  // split with pairs, 40 / 96 chunks, instead of the streamed vsplit-2 scan; the others with a
  // longer segment 0), softplus H32 T16384 / T65536 -1.3 / -1.3 % and H96 fixed -1.6 % (a later
  // retire tile); every other row -0.6 to +0.2 % (bench/results/2026-12-01_s36).
  const double chunk128_us = f16_scan(p) ? 1.33 : 1.38;
  auto chunk_us = [&](int vsplit) { return vsplit == 4 ? 1.15 : vsplit == 2 ? 0.93 : chunk128_us; };
  constexpr double kWaveUs = 20.0, kSegmentUs = 1.5;
  // The intra kernel (~0.92 SM-us per chunk and head at 5 CTAs per SM in session 13, ~3 % less at 6
  // CTAs per SM since session 14, not refitted: it only weighs plans against each other; 1.06
  // before: H96 T8192 0.396 ms, Nsight Compute) runs before the scan on all SMs, or streamed (~0.88
  // SM-us per tile since session 16, from the retire sweep below; 0.95 at 5 CTAs per SM; 1.11
  // before session 13: 0.414 ms alone): on all SMs for t1, then beside the scan on the sms - jobs
  // SMs it leaves free ("keepers"), t1 in the estimate long enough for the keepers to make the rest
  // during the scan and at least 4 chunks per head (the scan's start); the scan beside it ~2.5 %
  // slower (its ready checks, the shared memory system). The retire tile is the tiles the keepers
  // cannot make during the scan, 0 where they can (session 32: H32 T4096 0.2557 ms at retire tile 0
  // against 0.2593 at the 4 chunks per head the scan's start had been given: a non-keeper SM takes
  // its scan CTA only once its intra warps have finished their tiles, while the keepers make the
  // first ready blocks). Measured (session 10): H96 T8192 0.983 ms at the retire point this gives
  // (estimate 0.987), 1.003 / 1.026 ms at +5 / +10 % of the tiles; H64 T8192 streamed at vsplit 1
  // 0.781 ms against 0.766 for the two kernels at vsplit 2 (estimates 0.784 / 0.776). Session 13
  // (cheaper intra kernel; bench/results/2026-11-29_s13_sweep): H96 T8192 0.985 ms at the old
  // retire point (49.6 % of the tiles), 1.004 / 0.960 / 0.967 / 0.987 at 35 / 40 / 45 / 50 %; 41 %
  // is the retire point of a 0.95 us tile. Session 16 (the streamed kernel at 6 CTAs per SM,
  // bench/results/2026-11-30_s16_ab1): H96 T8192 0.939 / 0.914 / 0.890 / 0.895 / 0.900 / 0.913 /
  // 0.927 ms at 34 / 37 / 40 / 42 / 44 / 48 / 52 %; 40 % (39.7) is the retire point of a 0.88 us
  // tile.
  // Session 18: the bounded gate's warp intra kernels (intra_warp.cuh) take ~0.66 SM-us per grid
  // tile (H64 T8192: 163 us), ~0.57 since session 19 (141 us). Refitted for the grid in session
  // 28 (with split T's first_out and segment 0, H32 T65536 split measured 3.59 ms against 3.71
  // unsplit, which the 0.92 kept from splitting).
  // The streamed warp kernel (bounded gate) since session 31, its chunk inlined: 0.58 SM-us per
  // tile (Nsight Compute, H32 T16384 with 192 / 268-chunk segments: 191 us on 100 SMs, 233 out of
  // line). Session 32's retire sweep (bench/results/2026-11-30_s32): H96 T8192 0.760 / 0.746 /
  // 0.742 / 0.739 / 0.741 / 0.747 / 0.751 / 0.756 / 0.765 / 0.776 / 0.787 / 0.797 / 0.805 ms at
  // 0 / 2 / 4 / 6 / 8 / 10 / 12 / 15 / 20 / 25 / 30 / 35 / 40 % of the tiles, where 0.88 had put
  // it at 40 % and 0.58 puts it at 8.6 %.
  // The softplus and pre-gated gates' warp kernel (intra_warp_hier, session 34; sessions 18-33 a
  // 4-warp kernel with exact rows, last fitted at 1.43 grid / 1.6 streamed SM-us per tile,
  // bench/results/2026-11-30_s33): its tiles cost the same whatever the decays. Nsight Compute,
  // H96 T8192 softplus, two kernels: 341 us for 49152 tiles, ~0.92 SM-us per grid tile; 320 us,
  // ~0.86, with the grid kernel's k steps rolled (intra_warp_hier<true>; no plan of the twelve
  // softplus benchmark rows changes between 0.92 and 0.86, 60 of the 1188-shape grid do). Retire
  // sweep (bench/results/2026-11-30_s34): H96 T8192 softplus 1.037 / 0.995 / 0.955 / 0.912 /
  // 0.875 / 0.896 / 0.935 / 0.960 ms at 20 / 25 / 30 / 35 / 40 / 46 / 58 / 65 % of the tiles,
  // 0.895 at 38 and 44; a streamed tile at 0.9 SM-us puts it at 41 % (0.886 ms). Beside split T's
  // segment 0 (stream_split below) the keepers' tiles are costed at 0.97: at 0.9 the model put H8
  // T65536 softplus beside the streamed kernel (228 / 448 chunks), which measured 1.097 ms against
  // 1.074 after the grid (236 / 332; the bounded gate's H8 split measured the same way in session
  // 32), while the H32 splits gain beside it (T16384 / T65536 softplus 0.874 / 3.236 ms against
  // 0.917 / 3.45 after the grid); 0.97 keeps H8 after the grid and H32 T16384 at 152 / 416 chunks
  // (0.881 ms against 0.893 for the 148 / 432 of 1.0).
  constexpr double kIntraTileUs = 0.57, kStreamedTileUs = 0.58, kHierTileUs = 0.86,
                   kHierStreamedTileUs = 0.9, kHierSplitTileUs = 0.97, kStreamedScan = 1.025;
  // SM-us per tile of the grid and of the streamed intra kernel (beside the unsplit scan, and
  // beside split T's segment 0): the bounded gate's two anchors, or the other gates' binary split
  // (intra_warp_hier).
  const bool bounded = p.gate_mode == GateMode::kBounded;
  const double intra_tile_us = bounded ? kIntraTileUs : kHierTileUs;
  const double stream_tile_us = bounded ? kStreamedTileUs : kHierStreamedTileUs;
  const double split_tile_us = bounded ? kStreamedTileUs : kHierSplitTileUs;
  // Split T beside the streamed intra kernel (session 31): the memset and the start of the pass.
  constexpr double kStreamSplitUs = 5.0;
  // Tiles of the streamed kernel: every chunk index of the longest sequence for every sequence
  // and head (fixed length, or one sequence: no empty tile).
  const int64_t tiles = longest_chunks(p) * heads;
  const double intra_us =
      double(p.B * p.T / prefill_cuda::kC + num_seq) * p.HV * intra_tile_us / sms;
  // first_out (FASTKDA_PREFILL_FIRST_OUT=0 turns it off): segment 0's output job runs in pass 1
  // instead of its value-only job there and its output job in pass 2, so pass 2 has one segment
  // fewer per sequence, and pass 1 lasts at least one such job.
  const bool first_out = env_knob("FASTKDA_PREFILL_FIRST_OUT", "0 or 1", [](int64_t v) {
                           return v == 0 || v == 1;
                         }).value_or(1) == 1;
  // Segments: segment 0 has seg0 >= seg chunks, every later one seg (PrefillArgs::seg0_chunks).
  // With first_out segment 0's output jobs hold heads x vsplit SMs through pass 1 while the value
  // and transition jobs of segments 1 .. nseg - 2 run in waves on the others, so segment 0 may be
  // as long as those waves (balanced_seg0).
  constexpr int kQuantum = int(ForwardParams::kBoundaryInterval / prefill_cuda::kC);
  auto nseg_of = [&](int seg, int seg0) {
    return chunks <= seg0 ? int64_t(1) : 1 + int64_t(std::ceil((chunks - seg0) / seg));
  };
  // Pairs (Pass::kPairs, FASTKDA_PREFILL_PAIR=0 turns them off): at vsplit 1 with first_out a
  // segment's value and transition rows run in one CTA beside one prepare group: ~2.05-2.08 us
  // per chunk for the 256 rows (Nsight Compute, H8 T65536 with 128-chunk segments, and forced
  // plans, session 30; the chain bench's synthetic prepare gave 1.83-1.86) against 2 x ~1.2 in
  // two CTAs.
  const bool pairs_on = env_knob("FASTKDA_PREFILL_PAIR", "0 or 1", [](int64_t v) {
                          return v == 0 || v == 1;
                        }).value_or(1) == 1;
  // kPairsUs: the one more kernel of pass 1 (kFirst beside kPairs).
  constexpr double kPairChunk = 2.05, kPairsUs = 10.0;
  auto pairs_at = [&](int vs) { return pairs_on && first_out && vs == 1; };
  auto vt_span = [&](int vs, int seg, int64_t nseg) {  // pass 1 without segment 0 (< 0: n/a)
    const int64_t jobs = heads * vs, free = sms - jobs;
    const int64_t vt = pairs_at(vs) ? jobs * (nseg - 2) : jobs * 2 * (nseg - 2);
    if (free <= 0) return -1.0;
    const double job_us = seg * (pairs_at(vs) ? kPairChunk : 0.85 * chunk_us(vs)) + kWaveUs;
    return double((vt + free - 1) / free) * job_us;
  };
  // Split T's output jobs run ~5 % slower per chunk than the unsplit scan (kVs = 128: 1.45 us in
  // the output pass, Nsight Compute, session 26; 1.38 unsplit). Session 29: with 1.38 segment 0
  // of H8 T65536 came out 408 chunks, and forced lengths measured 1.078 / 1.067 / 1.060 / 1.062 ms
  // at 408 / 400 / 392 / 384 (232-chunk segments after it): segment 0 outlasted the other jobs.
  constexpr double kOutputChunk = 1.05;
  // Split T beside the streamed intra kernel (`stream`, pairs only; see split_streams below): no
  // intra pass first; segment 0's output jobs start at once (~2.5 % slower beside the intra grid,
  // as the unsplit streamed scan), the pair jobs once the keepers have made every tile.
  auto intra_keep_us = [&] { return double(tiles) * split_tile_us / double(sms - heads); };
  auto split_us = [&](int vs, int seg, int seg0, bool stream) {
    const int64_t nseg = nseg_of(seg, seg0), jobs = heads * vs;
    const double seg_us = seg * kOutputChunk * chunk_us(vs) + kWaveUs;
    const double out0_us =
        seg0 * kOutputChunk * chunk_us(vs) * (stream ? kStreamedScan : 1.0) + kWaveUs;
    double span = vt_span(vs, seg, nseg);
    if (stream && span >= 0) span += intra_keep_us();
    double pass1 = waves(jobs * (2 * nseg - 3)) * (seg * 0.85 * chunk_us(vs) + kWaveUs);
    if (first_out) pass1 = span >= 0 ? std::max(out0_us, span) : std::max(pass1, out0_us);
    return (stream ? kStreamSplitUs : intra_us) + pass1 +
           waves(jobs * (nseg - (first_out ? 1 : 0))) * seg_us + kSegmentUs * nseg +
           (pairs_at(vs) ? kPairsUs : 0.0);
  };
  auto balanced_seg0 = [&](int vs, int seg) {  // segment 0 as long as the other jobs of pass 1
    int seg0 = seg;
    for (int it = 0; it < 4; ++it) {
      const double span = vt_span(vs, seg, nseg_of(seg, seg0));
      const int fit =
          span < 0 ? seg
                   : int((span - kWaveUs) / (kOutputChunk * chunk_us(vs))) / kQuantum * kQuantum;
      const int next = std::max(seg, fit);
      if (next == seg0) break;
      seg0 = next;
    }
    return seg0;
  };
  // The streamed intra kernel beside `jobs` scan CTAs: a fixed-length batch or one sequence, at
  // least kStreamMinFree SMs for its keepers, tiles within intra_tile's 32-bit arithmetic.
  auto can_stream = [&](int64_t jobs) {
    return !(p.cu_seqlens && num_seq != 1) && jobs <= sms - kStreamMinFree && tiles > 0 &&
           tiles <= INT32_MAX;
  };
  auto streamed = [&](int vs, int64_t& retire) {  // < 0: not possible
    const int64_t jobs = heads * vs;
    if (!can_stream(jobs)) return -1.0;
    const double scan = chunks * chunk_us(vs) * kStreamedScan, all = sms / stream_tile_us,
                 keep = (sms - jobs) / stream_tile_us;
    const double fill = std::max(0.0, double(tiles) - keep * scan);  // tiles before the scan
    const double t1 = std::max(4.0 * heads / all, fill / all);
    retire = std::min(tiles, int64_t(std::ceil(fill)));
    if (forced_retire) retire = tiles * *forced_retire / 100;
    return t1 + scan + kWaveUs;
  };
  // Split T with the streamed intra kernel (pairs only, where the unsplit streamed plan could run:
  // a fixed-length batch or one sequence): the intra grid starts first, its CTAs on SMs >=
  // keep_sms = sms - heads stop at once (retire tile 0), and segment 0's output jobs (kFirst, one
  // CTA per head) take those SMs and wait on the ready counters; the keepers make every tile on
  // the other SMs, where the pair jobs then run. So segment 0 runs beside the intra pass instead
  // of after it, and can be longer. FASTKDA_PREFILL_STREAM=0 turns it off, =1 with a forced
  // segment length on (where possible). Every gate since session 34 (the bounded gate only in
  // session 33, when the other gates' 4-warp intra kernel cost what the input's decays made it:
  // H8 T65536 softplus measured 1.274-1.277 ms streamed, the model's choice, against 1.228-1.238).
  auto split_streams = [&](int vs) {  // kFirst: one CTA per head (pairs: vsplit 1)
    return pairs_at(vs) && forced_stream.value_or(1) == 1 && can_stream(heads);
  };
  auto stream_split = [&](Plan& q) {
    q.intra_tiles = tiles, q.keep_sms = sms - int(heads);
    q.retire_tile = forced_retire ? tiles * *forced_retire / 100 : 0;
  };
  double whole = 0;  // the best unsplit estimate
  for (int vs : {1, 2, 4}) {
    if (forced_vs && vs != forced_vs) continue;
    const double t = intra_us + waves(heads * vs) * (chunks * chunk_us(vs) + kWaveUs);
    if (whole == 0 || t < whole) whole = t, plan.vsplit = vs;
  }
  // FASTKDA_PREFILL_SEG0=<tokens>: segment 0's length (with a forced segment length, not shorter).
  const std::optional<int64_t> forced_seg0 =
      env_knob("FASTKDA_PREFILL_SEG0", "a multiple of 64 tokens up to 2^24", [&](int64_t v) {
        return v > 0 && v % interval == 0 && v <= (int64_t(1) << 24);
      });
  FASTKDA_CHECK(!forced_seg0 || (forced_seg && *forced_seg0 >= *forced_seg && *forced_seg > 0),
                "FASTKDA_PREFILL_SEG0: expected a length >= FASTKDA_PREFILL_SEG (set, not 0), got ",
                *forced_seg0, " with FASTKDA_PREFILL_SEG ",
                forced_seg ? std::to_string(*forced_seg) : std::string("unset"));
  if (forced_seg) {  // a forced segment length runs at the forced value split, else 1
    plan.seg_chunks = int(*forced_seg / prefill_cuda::kC);
    plan.seg0_chunks = forced_seg0 ? int(*forced_seg0 / prefill_cuda::kC) : plan.seg_chunks;
    if (plan.seg_chunks > 0) plan.vsplit = forced_vs ? forced_vs : 1;
    plan.first_out = plan.seg_chunks > 0 && first_out;
    plan.pairs = plan.first_out && pairs_at(plan.vsplit);
    plan.streamed = plan.seg_chunks > 0 && forced_stream == 1 && split_streams(plan.vsplit);
    if (plan.streamed) stream_split(plan);
    return plan;
  }
  if (!forced_stream || *forced_stream == 1) {
    for (int vs : {1, 2, 4}) {
      if (forced_vs && vs != forced_vs) continue;
      int64_t retire = 0;
      const double t = streamed(vs, retire);
      if (t < 0 || (!forced_stream && t >= whole)) continue;
      if (!plan.streamed || t < whole) {
        whole = t, plan.vsplit = vs, plan.streamed = true;
        plan.intra_tiles = tiles, plan.retire_tile = retire;
        plan.keep_sms = sms - int(heads * vs);
      }
    }
  }
  if (num_seq <= 0 || (plan.streamed && forced_stream)) return plan;
  double best = 0.97 * whole;  // split only for a gain
  // Segments up to 16384 tokens (8192 before session 29, which kept H32 T65536 from the 5
  // segments of one pass-2 wave: 736 / 1204 chunks measured 3.40 / 3.37 ms against 3.52 / 3.59
  // for the 336 / 1412 it chose).
  constexpr int kMaxSegTokens = 16384;
  auto take = [&](int vs, int seg, int seg0, bool stream) {  // the plan, if the model prefers it
    if (const double t = split_us(vs, seg, seg0, stream); t < best)
      best = t, plan.seg_chunks = seg, plan.seg0_chunks = seg0, plan.vsplit = vs,
      plan.streamed = stream;
  };
  for (int vs : {1, 2, 4}) {
    if (forced_vs && vs != forced_vs) continue;
    auto consider = [&](int seg) {
      if (seg < 512 / prefill_cuda::kC || seg > kMaxSegTokens / prefill_cuda::kC ||
          std::ceil(chunks / seg) < 3)
        return;
      for (const int seg0 : {seg, first_out ? balanced_seg0(vs, seg) : seg})
        take(vs, seg, seg0, false);
    };
    for (int seg_tokens = 512; seg_tokens <= kMaxSegTokens; seg_tokens += 256)
      consider(seg_tokens / prefill_cuda::kC);
    // And the shortest segments (a multiple of 64 tokens) whose pass 2 fits one or two waves:
    // m segments after segment 0 (m + 1 with segment 0 in pass 2), which with first_out is about
    // r = 0.85 x (waves of the other jobs of pass 1) segments long.
    const int64_t jobs = heads * vs;
    for (int w = 1; w <= 2 && jobs <= int64_t(w) * sms; ++w) {
      const int64_t m = int64_t(w) * sms / jobs - (first_out ? 0 : 1);
      if (m < 2) continue;
      // (pairs: one CTA per segment at kPairChunk against segment 0's output chunk)
      const int64_t vt = pairs_at(vs) ? jobs * (m - 1) : jobs * 2 * (m - 1);
      const double rate = pairs_at(vs) ? kPairChunk / (kOutputChunk * chunk_us(vs)) : 0.85;
      const double r =
          first_out && sms > jobs ? rate * double((vt + sms - jobs - 1) / (sms - jobs)) : 1.0;
      const int seg = int(std::ceil(chunks / (double(m) + std::max(r, 1.0))));
      consider((seg + kQuantum - 1) / kQuantum * kQuantum);
    }
    // Streamed (split_streams): for m segments after segment 0 (their pair jobs in one wave on
    // the keepers' SMs), the length L at which segment 0 ends with the pair jobs,
    //   out_chunk (chunks - m L) = intra_keep + kPairChunk L,
    // rounded down and up to kQuantum, segment 0 the rest (rounded up).
    if (!split_streams(vs)) continue;
    const double out_chunk = kOutputChunk * chunk_us(vs) * kStreamedScan;
    for (int64_t m = 2; (m - 1) * heads <= sms - heads; ++m) {
      const double len = (out_chunk * chunks - intra_keep_us()) / (out_chunk * m + kPairChunk);
      for (const int seg : {int(len) / kQuantum * kQuantum, (int(len) / kQuantum + 1) * kQuantum}) {
        if (seg < 512 / prefill_cuda::kC) continue;
        const int rest = int(std::ceil((chunks - double(m) * seg) / kQuantum)) * kQuantum;
        take(vs, seg, std::max(seg, rest), true);
      }
    }
  }
  plan.first_out = plan.seg_chunks > 0 && first_out;
  plan.pairs = plan.first_out && pairs_at(plan.vsplit);
  if (plan.seg_chunks) {  // the unsplit streamed candidate's tiles and keepers do not carry over
    plan.intra_tiles = plan.retire_tile = 0, plan.keep_sms = 0;
    if (plan.streamed) stream_split(plan);
  }
  return plan;
}

// Split T's combine (split.cuh): 16 rows of S^T per CTA, or 32 where N x HV x 8 CTAs of 16 rows
// (one per SM: ~220 KiB of shared memory) would take more than one wave (H32: 256 CTAs, 17-18 us
// in Nsight Compute for 3 steps, session 36, against 27 us for H8's 15 steps in one wave).
// FASTKDA_PREFILL_COMBINE_ROWS=16 / 32 forces it (tests: the same bits either way).
int use_combine_rows(const ForwardParams& p, int64_t num_seq, int sms) {
  const std::optional<int64_t> forced = env_knob("FASTKDA_PREFILL_COMBINE_ROWS", "16 or 32",
                                                 [](int64_t v) { return v == 16 || v == 32; });
  if (forced) return int(*forced);
  return num_seq * p.HV * (prefill_cuda::kV / 16) > sms ? 32 : 16;
}

// Persistent unsplit scan: with more jobs than SMs, one CTA per SM walks jobs b, b + SMs, ...,
// so that its prepare warps run into the next job while the scan warps finish the last one
// instead of every job starting with an empty pipeline. Measured (H200, session 5): -1.6 % at
// 64 x 128 tokens, +9 % forced on for the unequal varlen "six" batches (static assignment), so
// only for short sequences on average (<= 256 tokens). FASTKDA_PREFILL_PERSIST=0 / 1 forces it
// off / on (for any unsplit scan with more jobs than SMs).
bool use_persistent(const ForwardParams& p, int64_t num_seq, const Plan& plan, int sms) {
  const std::optional<int64_t> forced =
      env_knob("FASTKDA_PREFILL_PERSIST", "0 or 1", [](int64_t v) { return v == 0 || v == 1; });
  const int64_t jobs = num_seq * p.HV * plan.vsplit;
  if (plan.seg_chunks || jobs <= sms) return false;
  if (forced) return *forced == 1;
  return double(p.B * p.T) / double(num_seq) <= 256.0;
}

// The 64-token WY pipeline (wy64.cuh; docs/prefill.md, sessions 38-44): a producer kernel makes
// every chunk's operands on the SMs the scan leaves free (one scan CTA per sequence and head). Its
// time is about the larger of the scan's chain (~2.3-2.4 us per 64 tokens, whatever the head
// count) and the producer's share over the SMs the scan leaves; the other plans spread the work
// over every SM, so they win with few heads (the scan's chain alone is longer) and with many (the
// producer's SMs too few). Measured (H200, session 44 call 13, BENCHMARKS.md: wy64 / the other
// plans, ms, same call, two rounds):
//   T4096:  H20 0.184 / 0.188, H24 0.186 / 0.207, H44 0.257-0.258 / 0.257-0.259;
//   T8192:  H24 0.334 / 0.356, H44 0.486 / 0.492;
//   T16384: H24 0.626 / 0.653-0.656, H44 0.944 / 0.946-0.955;
//   T65536: H24 2.381-2.383 / 2.426-2.429, H28 2.400 / 2.852, H44 3.69-3.72 / 3.60-3.65;
// H32 0.192 / 0.643 / 2.46-2.49 against 0.239 / 0.772 / 2.880 (session 43's other plans), and
// session 43's H16 T8192 0.385 / 0.266, H16 T16384 0.736 / 0.477 (wy64 then ~7 % slower).
// So: 20-40 sequences x heads at T = 4096, 24-40 for T up to 65536 (measured points only:
// shorter and longer sequences keep the other plans; with fewer heads the scan's chain, the same
// for every head count, is longer than the other plans), its workspace (every chunk's image and
// Tb, 88576 B per 64 tokens and head) up to kWy64AutoBytes, and only where no knob of the other
// plans is set (those force a part of them). FASTKDA_PREFILL_WY64=0 / 1 forces it off / on (on:
// an error where it cannot run).
}  // namespace

constexpr double kWy64AutoBytes = 4.0 * (1ull << 30);
const char* wy64_unsupported(const ForwardParams& p, int64_t num_seq, int sms) {  // plan.h
  if (p.cu_seqlens) return "a fixed-length batch (no cu_seqlens)";
  if (p.HV != p.H) return "HV = H";
  if (p.gate_mode != GateMode::kBounded) return "the bounded gate";
  if (p.g_dtype != DType::kBF16) return "a bf16 g";
  if (!p.l2norm_qk || p.beta_mode == BetaMode::kGiven)
    return "l2norm'd q and k and an activated beta";
  if (p.boundary_states) return "no boundary states";
  if (p.T <= 0 || p.T % 64 != 0) return "T a positive multiple of 64";
  if (num_seq * p.H > sms - 8) return "at most (SMs - 8) sequences x heads";
  if (p.B * p.T / 64 * p.H > int64_t(INT32_MAX)) return "at most 2^31 - 1 chunks x heads";
  return nullptr;
}
namespace {
// The tuning knobs (the plan's cache key holds their values as set); FASTKDA_PREFILL_WY64 last.
constexpr const char* kPlanKnobs[11] = {
    "FASTKDA_PREFILL_VSPLIT",       "FASTKDA_PREFILL_SEG",     "FASTKDA_PREFILL_SEG0",
    "FASTKDA_PREFILL_FIRST_OUT",    "FASTKDA_PREFILL_STREAM",  "FASTKDA_PREFILL_RETIRE",
    "FASTKDA_PREFILL_ORDER",        "FASTKDA_PREFILL_PERSIST", "FASTKDA_PREFILL_PAIR",
    "FASTKDA_PREFILL_COMBINE_ROWS", "FASTKDA_PREFILL_WY64"};

static_assert(std::string_view(kPlanKnobs[std::size(kPlanKnobs) - 1]) == "FASTKDA_PREFILL_WY64");
using KnobValues = std::array<std::string, std::size(kPlanKnobs)>;

// knobs: the values of kPlanKnobs as set (empty: unset).
bool use_wy64(const ForwardParams& p, int64_t num_seq, int sms, const KnobValues& knobs) {
  const std::optional<int64_t> forced =
      env_knob("FASTKDA_PREFILL_WY64", "0 or 1", [](int64_t v) { return v == 0 || v == 1; });
  const char* why = wy64_unsupported(p, num_seq, sms);
  if (forced) {
    FASTKDA_CHECK(*forced == 0 || why == nullptr,
                  "FASTKDA_PREFILL_WY64: 1 (the 64-token WY pipeline) needs ", why);
    return *forced == 1;
  }
  for (size_t i = 0; i + 1 < knobs.size(); ++i)  // another plan's knob set: that plan
    if (!knobs[i].empty()) return false;
  const int64_t heads = num_seq * p.H;
  const double bytes = double(p.B * p.T / 64 * p.H) * double(prefill_cuda::kWy64ItemBytes);
  return why == nullptr && heads >= (p.T <= 4096 ? 20 : 24) && heads <= 40 && p.T >= 4096 &&
         p.T <= 65536 && bytes <= kWy64AutoBytes;
}

// What the plan depends on: the shape, the gate, the scan's operands, the SM count and the tuning
// knobs as set.
struct PlanKey {
  int64_t B = 0, T = 0, HV = 0, num_seq = 0;
  bool varlen = false;
  GateMode gate{};
  bool f16 = false;
  bool wy64_ok = false;  // wy64_unsupported() is null
  int sms = 0;
  KnobValues knobs;
  bool operator==(const PlanKey&) const = default;
};
}  // namespace

bool f16_scan(const ForwardParams& p) {  // plan.h
  return p.l2norm_qk && p.beta_mode != BetaMode::kGiven && p.gate_mode != GateMode::kPreGated;
}

// The split-T search costs a few microseconds of host time per plan (session 28: 4.7-6 us on the
// build machine for the few-head rows, ~0.5-2 us otherwise) and every call needs the plan twice
// (the size query in validation, then the launch): the last plan of each host thread is kept and
// reused for the same key. Knob values are compared as set, so a bad one is parsed, and raises its
// error, on every call (a plan is kept only once computed).
Plan choose_plan(const ForwardParams& p, int64_t num_seq, int sms) {
  const bool wy64_ok = wy64_unsupported(p, num_seq, sms) == nullptr;
  PlanKey key{p.B,         p.T,         p.HV,    num_seq, p.cu_seqlens != nullptr,
              p.gate_mode, f16_scan(p), wy64_ok, sms,     {}};
  for (size_t i = 0; i < std::size(kPlanKnobs); ++i)
    if (const char* v = std::getenv(kPlanKnobs[i])) key.knobs[i] = v;
  thread_local std::optional<std::pair<PlanKey, Plan>> last;
  if (last && last->first == key) return last->second;
  const bool wy64 = use_wy64(p, num_seq, sms, key.knobs);
  Plan plan = choose_split(p, num_seq, sms);
  plan.longest_first = use_longest_first(p, num_seq, plan, sms);
  plan.persistent = use_persistent(p, num_seq, plan, sms);
  plan.sms = sms;
  plan.slot_map = p.cu_seqlens && num_seq > 1 && !plan.streamed;
  plan.f16 = key.f16;
  const int combine_rows = use_combine_rows(p, num_seq, sms);  // (a bad knob raises for any plan)
  if (plan.seg_chunks) plan.combine_rows = combine_rows;
  if (wy64) {  // the other knobs were checked all the same
    plan = Plan{};
    plan.wy64 = true;
    plan.sms = sms;
  }
  last.emplace(key, plan);
  return plan;  // streamed plans are one-wave unsplit scans: neither ordered nor persistent
}

}  // namespace fastkda::cuda
