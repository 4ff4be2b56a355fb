// Tile constants, the workspace layout and the shared-memory plans of the two prefill kernels
// (intra_warp.cuh, prefill_kernel.cuh). docs/prefill.md explains the choices; every byte budget
// is checked here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace fastkda::prefill_cuda {

constexpr int kK = 128;   // key dim (the only one the CUDA kernels support)
constexpr int kV = 128;   // value dim
constexpr int kC = 16;    // chunk length: one m16 MMA tile of tokens
constexpr int kHalf = 8;  // sub-block: rows 8..15 of a chunk are anchored at row 7 (§ anchoring)
// Chunks per boundary-state interval (ForwardParams::kBoundaryInterval = 64 tokens, checked in
// launch.cu): the scan stores S before every chunk c with c % kBoundaryChunks == 0.
constexpr int kBoundaryChunks = 4;
// The f16-operand scan's bound on its state rows is tightened every kBoundTighten chunks (a
// multiple of kBoundaryChunks: scan.cuh WarpScale).
constexpr int kBoundTighten = 4 * kBoundaryChunks;

constexpr int kPrepWarps = 4;                  // warps per prepare group
constexpr int kPrepThreads = 32 * kPrepWarps;  // one thread per key column in the gate scan
static_assert(kPrepThreads == kK, "prepare threads own one key column each");

// Workspace: per (chunk slot, value head) the intra kernel writes Tb = (I + N)^-1 diag(beta) and
// A_qk, kC x kC f32 each, and the chunk's inverse row norms of q and k (kC f32 each, so that the
// scan's prepare does not reduce them again): 2176 B per chunk and head, 136 B per token and
// head. A chunk slot of
// chunk c of sequence n is (bos_n / kC) + n + c: injective, computable by both kernels without
// any host work; every slot is < total_tokens / kC + N.
constexpr int kWsFloats = 2 * kC * kC + 2 * kC;  // Tb, A_qk, then 1 / ||q||, 1 / ||k|| per row
constexpr size_t kWsBytes = kWsFloats * sizeof(float);

// Split T (split.cuh): segment j of sequence n has segment slot bos_n / (seg_chunks kC) + n + j
// (the chunk-slot rule with longer slots). Per segment slot and value head, f32, V-first rows:
//   E (kV x kK)  the segment's end state from a zero start (segment 0: from the true start
//                state); combine_kernel overwrites it with the true start state of segment j + 1;
//   M (kK x kK)  the segment's transition, S_end^T = S_start^T M + E^T (the scan of identity rows).
//                M is stored in combine_kernel's shared-memory layout (combine_m_offset), so
//                that the combine copies it with one bulk copy per step.
constexpr int kSegFloats = 2 * kK * kV;
constexpr size_t kSegBytes = kSegFloats * sizeof(float);
// Element (k, n) of M: row k (kK floats), its 16-byte chunk n / 4 XORed with 2 ((k / 2) % 4), so
// that the combine's B fragment loads (rows 2 t and 2 t + 1 of a k step of 8, 8 columns) hit 32
// distinct banks.
__host__ __device__ constexpr int combine_m_offset(int k, int n) {
  return k * kK + (((n >> 2) ^ (((k >> 1) & 3) << 1)) << 2) + (n & 3);
}
// Each row a permutation of itself, and every B fragment load of the combine (lanes g, t: row
// 8 s + 2 t + p, column 8 b + g) on 32 distinct banks.
constexpr bool combine_layout_ok() {
  for (int k = 0; k < kK; ++k) {
    bool seen[kK] = {};
    for (int n = 0; n < kK; ++n) {
      const int o = combine_m_offset(k, n) - k * kK;
      if (o < 0 || o >= kK || seen[o]) return false;
      seen[o] = true;
    }
  }
  for (int s = 0; s < kK / 8; ++s)
    for (int b = 0; b < kK / 8; ++b)
      for (int p = 0; p < 2; ++p) {
        bool bank[32] = {};
        for (int lane = 0; lane < 32; ++lane) {
          const int o = combine_m_offset(8 * s + 2 * (lane % 4) + p, 8 * b + lane / 4) % 32;
          if (bank[o]) return false;
          bank[o] = true;
        }
      }
  return true;
}
static_assert(combine_m_offset(2, 0) == 2 * kK + 8 && combine_m_offset(7, 13) == 7 * kK + 21 &&
                  combine_layout_ok(),
              "combine layout");

// Prepare groups in the scan kernel: each alternates chunks with the others (group p: chunks
// p, p + G, ...), owns two raw stages (next chunk loads while it works) and one scan stage.
// kVs = 128: two groups + 8 scan warps = 512 threads; kVs = 64, 32: three groups + one scan
// warpgroup (4 scan warps; at kVs = 32 two per 16 value rows, key_split below) = 512 threads.
// In both setmaxnreg moves registers from the prepare warpgroups (112 each: ptxas needs ~100
// there) to the scan warpgroups: 176 at kVs = 64 / 32 (3 x 128 x 112 + 128 x 176 = 65536), 144
// at kVs = 128 (2 x 128 x 112 + 2 x 128 x 144; the wgmma scan loop 398 -> 359 SASS
// instructions, no spill). Session 5 measured three groups at kVs = 32 under a flat
// 128-register cap 20 % slower (the scan warps' chain then cannot hoist its fragment loads);
// session 6's reading is that the step is bound by the latency of a chunk's preparation over the
// chunks in flight, which a third group shortens by a third. Measured (session 7): -1 to -4 % on
// every row with the register move; an Nsight Compute profile then shows the kVs = 128 scan
// warps waiting for the prepare (44 % of their samples on the Full barrier) and the kVs = 32
// prepare waiting for the scan (51 % on Empty).
// kPairs: split T's pass-1 CTA for a segment's value and transition rows (Pass::kPairs,
// prefill_kernel.cuh scan_pair_job, kVs = 128): one prepare group for the two scan warpgroups'
// 256 rows (384 threads), 88 / 208 registers (the pair chunk needs ~208 per scan thread: at 200
// ptxas serialises it). Its stages, hand-off slots and barrier ids stay the two-group layout's
// (the defaults below), which one group uses as well.
template <int kVs, bool kPairs = false>
constexpr int prep_groups() {
  return kPairs ? 1 : kVs == 128 ? 2 : 3;
}
// Key split of the mma.sync scan: at kVs = 32 the scan warpgroup's 4 warps own 16 value rows x 64
// keys of S^T each (a pair of warps per 16 value rows, one per key half), instead of 2 warps with
// all 128 keys and 2 idle ones: each warp's chain per chunk is half as long (V_new / O partials
// over its keys, 16 + 16 MMAs, and 24 of the state update's 48), at the cost of one exchange of the
// partials through shared memory per chunk (KeySplitExchange). kVs = 64 and 128 have no idle warps.
template <int kVs>
constexpr int key_split() {
  return kVs == 32 ? 2 : 1;
}
template <int kVs>
constexpr int scan_warps() {
  return kVs / 16 * key_split<kVs>();
}
// Scan threads: scan_warps warps, rounded up to whole warpgroups (setmaxnreg acts per warpgroup).
template <int kVs>
constexpr int scan_threads_padded() {
  return kVs == 128 ? 2 * kVs : 128;
}
// Two scan warpgroups (kVs = 128) share the SM's issue slots: their wgmma chunk takes three
// variants that measured faster there and slower with one warpgroup (kVs = 64, where they sit on
// its chain): Tb split into bf16 hi / lo by the prepare (tb_col), the output staged by stmatrix,
// the state's decay per P^T / O^T batch (session 14, bench/results/2026-11-30_s14_ab4 / _ab6).
template <int kVs>
constexpr bool two_scan_warpgroups() {
  return scan_threads_padded<kVs>() == 256;
}
static_assert(scan_warps<32>() * 32 == scan_threads_padded<32>() &&
                  scan_warps<64>() * 32 == scan_threads_padded<64>() &&
                  scan_warps<128>() * 32 == scan_threads_padded<128>(),
              "every scan warp has work");
// Threads of a stage hand-off barrier: one prepare group and the scan warps.
template <int kVs>
constexpr int handoff_threads() {
  return kPrepThreads + 32 * scan_warps<kVs>();
}
template <int kVs, bool kPairs = false>
constexpr int block_threads() {
  return prep_groups<kVs, kPairs>() * kPrepThreads + scan_threads_padded<kVs>();
}
// setmaxnreg budgets: prepare and scan threads.
template <int kVs, bool kPairs = false>
constexpr int prep_regs() {
  return kPairs ? 88 : 112;
}
template <int kVs, bool kPairs = false>
constexpr int scan_regs() {
  return kPairs ? 208 : kVs == 128 ? 144 : 176;
}
// Registers of a CTA after setmaxnreg: within what the CTA was launched with (one CTA per SM:
// 64 K / threads per thread, rounded down to a multiple of 8), the pool setmaxnreg.inc draws
// from. More than that and the scan warps' setmaxnreg.inc waits forever (a hang, not an error:
// three groups at kVs = 128, 640 threads x 96, with 80 + 136 registers, session 11).
template <int kVs, bool kPairs = false>
constexpr bool fits_register_file() {
  constexpr int launched = 65536 / block_threads<kVs, kPairs>() / 8 * 8;
  return prep_groups<kVs, kPairs>() * kPrepThreads * prep_regs<kVs, kPairs>() +
             scan_threads_padded<kVs>() * scan_regs<kVs, kPairs>() <=
         block_threads<kVs, kPairs>() * launched;
}
static_assert(fits_register_file<32>() && fits_register_file<64>() && fits_register_file<128>() &&
                  fits_register_file<128, true>(),
              "register file");

// Largest exponent span (log2) of the bounded gate's two-anchor products (intra.cuh
// bounded_spans_fit): 2^100 * 2^-100 keeps every factor a normal f32, so tf32 operands stay exact
// in range. The other gates split every pair at an anchor between its tokens (intra_warp_hier).
constexpr float kMaxAnchorSpan = 100.0f;

// Leading dimensions (floats), chosen for conflict-free fragment loads:
//  - scalar fragment loads (row g, col t) need ld = 4 (mod 32): banks 4g + t;
//  - float2 fragment loads (row g, cols 2t, 2t+1) need ld = 8 (mod 32) within a half warp.
constexpr int kLdScan = kK + 8;     // w, qs: [kC][kLdScan]
constexpr int kLdVt = kC / 2 + 4;   // wgmma stage v^T rows (u32): the prepare's 16-byte stores
                                    // (rows 48 bytes apart) and the scan's A loads (banks 12g + t)
                                    // without conflicts
constexpr int kLdTok = kC + 8;      // aqk [kC][kLdTok] (scan stage)
constexpr int kLdN = kC + 4;        // nmat [kC][kLdN]
constexpr int kLdTb = kC + 8;       // wgmma stage Tb rows, one scan warpgroup: the scan's
                                    // float2 B loads (rows g, pairs t: banks 24g + 2t, disjoint
                                    // per half-warp)
constexpr int kLdKe2 = kC / 2;      // ke_hi / ke_lo, u32 token pairs [kK][kLdKe2], swizzled:
constexpr int kLdOut = 16 + 8;      // output staging, bf16 [kC][kLdOut] per scan warp (16-B rows)
static_assert(kLdScan % 32 == 8 && kLdTok % 32 == 24 && kLdN % 4 == 0 && kLdKe2 == 8,
              "fragment-load bank layout");
// Column of token pair c (tokens 2c, 2c + 1) of key row `key` in ke_hi / ke_lo. Pairs c and c + 4
// (the two B registers of the scan's m16n8k16 state update) sit side by side, so the scan loads
// both with one 8-byte load (rows 8j + g, columns 2t, 2t + 1: each half-warp reads 4 rows = 32
// different banks); the two 16-byte halves of a row swap for keys with bit 2 set, so that the
// prepare's 16-byte row stores (8 consecutive keys per quarter-warp) are conflict-free too, without
// padding (the unpadded rows save 4 KiB per stage).
__host__ __device__ constexpr int ke_col(int key, int c) {
  return (2 * (c % 4) + c / 4) ^ (((key >> 2) & 1) << 2);
}
static_assert(ke_col(3, 1) == 2 && ke_col(3, 5) == 3 && ke_col(4, 1) == 6 && ke_col(12, 6) == 1 &&
                  ke_col(8, 6) == 5,
              "ke layout");
// With two scan warpgroups the wgmma stage's Tb comes split into bf16 hi / lo (each of the 8 scan
// warps split its own copy before: -0.8 to -1.6 % on the kVs = 128 rows; at kVs = 64 +0.6 to
// +1.3 %). u32 column of the bf16 hi (h = 0) or lo (h = 1) pair of tokens 2q, 2q + 1 in a row of
// the split Tb: [hi q, hi q + 4, lo q, lo q + 4] for q < 4, 16 bytes per q (the B register pairs
// of the scan's m16n8k16: hi and lo).
__host__ __device__ constexpr int tb_col(int q, int h) { return 4 * (q % 4) + 2 * h + q / 4; }
static_assert(tb_col(0, 0) == 0 && tb_col(4, 0) == 1 && tb_col(0, 1) == 2 && tb_col(4, 1) == 3 &&
                  tb_col(3, 0) == 12 && tb_col(7, 1) == 15,
              "split Tb layout");

// ---- intra kernels (intra_warp.cuh) ---------------------------------------------------------

// A tile of the streamed intra kernel (intra_tile): a chunk and value head, and its ready counter.
struct IntraTile {
  int64_t slot, tok0, counter;
  int hv, nvalid;  // nvalid: rows of the chunk (0: an empty tile, -1: no tile)
};
// Streamed intra kernel: chunks per ready counter. The scan's prepare checks a counter (an
// acquire load: ~0.1 us on its path) once per block, not per chunk.
constexpr int kReadyChunks = 8;

// Longest-first CTA order (order.cuh): its O(N^2) ranking only up to this many sequences.
constexpr int64_t kOrderMaxSeqs = 4096;

// ---- scan kernel ------------------------------------------------------------------------------

// One chunk of inputs, filled by TMA (rows past the sequence end zeroed after the loads).
template <int kVs>
struct RawStage {
  float tb[kC][kC];     // Tb = (I + N)^-1 diag(beta) from the workspace
  float aqk[kC][kC];    // A_qk from the workspace
  alignas(16) float rq[kC];  // scale / ||q|| per row (no l2norm: scale), from the workspace
  alignas(16) float rk[kC];  // 1 / ||k|| per row (no l2norm: 1), from the workspace
  uint16_t q[kC][kK];   // bf16
  uint16_t k[kC][kK];   // bf16
  uint16_t v[kC * kVs];  // bf16, this CTA's value columns: element v_index<kVs>(row, col)
  float g[kC][kK];      // f32 gate; a bf16 gate uses the first half as uint16_t [kC][kK]
};

// What the scan warps consume for one chunk (tf32-rounded except u, decay and the split-bf16 ke).
template <int kVs>
struct ScanStage {
  float w[kC][kLdScan];        // -W = -Tb (k^ . 2^G)
  float qs[kC][kLdScan];       // scale q^ . 2^G
  uint32_t ke_hi[kK][kLdKe2];  // (k^ . 2^(G_C - G))^T as split bf16: hi, pairs of tokens
  uint32_t ke_lo[kK][kLdKe2];  //   and lo (ke = hi + lo to ~16 bits)
  float aqk[kC][kLdTok];       // A_qk
  float u[kC][kVs + 4];        // U = Tb v  (f32, MMA accumulator init)
  float decay[kK];             // 2^G_C
};

// The wgmma scan (kVs = 128: two warpgroups of scan warps, kVs = 64: one; device/wgmma.cuh) reads
// its B operands in the no-swizzle K-major core-matrix layout: core matrix (n / 8, k / kPerCore)
// of 8 rows x 16 bytes at (n / 8) * sbo + (k / kPerCore) * 128 bytes. Its tf32 operands keep the
// keys (or source tokens) of every group of 8 in the order the accumulators feed them: slot t
// holds index 2t, slot t + 4 index 2t + 1 (wg_slot).
template <int kVs>
constexpr bool uses_wgmma() {
  // Measured on the H200 (A/B, session 4, after removing ptxas' C7520 serialisation): kVs = 128
  // rows 7-10 % faster than mma.sync; kVs = 64 (one warpgroup) then no faster (H64 fixed T8192
  // 1.250 vs 1.237 ms). Session 9, with the no-W/U stage: kVs = 64 on wgmma 17 % faster (H64 fixed
  // T8192 0.974 -> 0.811 ms; ~1.00 us per chunk against 1.34 on mma.sync).
  return kVs >= 64;
}
// RawStage::v at kVs = 32 in blocks of 8 columns, [kVs / 8][kC][8], as a 3-D TMA box lands them
// (launch.cu tensor_map, blocks8): the U products' B fragments (rows 2t, 2t + 1, column g of a
// block) fall in banks 8t + g / 2 (+ 4) instead of 4-way conflicts. On the wgmma stage
// (kVs = 128 / 64) the prepare forms no U; its v^T copy (copy_tb_vt: thread = column, one row at a
// time) is conflict-free in row-major order and 4-way conflicted in blocks, so v stays row-major
// there.
template <int kVs>
constexpr bool v_in_blocks() {
  return !uses_wgmma<kVs>();
}
template <int kVs>
__host__ __device__ constexpr int v_index(int row, int col) {
  if constexpr (v_in_blocks<kVs>()) return (col / 8) * (kC * 8) + row * 8 + col % 8;
  return row * kVs + col;
}
constexpr uint32_t kWgLbo = 128;  // K-adjacent core matrices (A_qk^T, ke)
// W and qs: K-adjacent core matrices 144 bytes apart (16 bytes of padding each), so that the
// prepare's stores of qs (thread = key, one token row at a time: 32 keys of one row in 8 core
// matrices) fall in 32 different banks; at 128 bytes they fell in 4 (8-way conflicts: 27 % of the
// prepare's shared-memory wavefronts at kVs = 128, Nsight Compute, session 7). The W stores
// (lane = (token g, key pair t)) stay conflict-free.
constexpr uint32_t kWgLboKeys = 144;
constexpr uint32_t kWgSboKeys = kWgLboKeys * 32;  // W, qs: N = 16 tokens, K = 128 keys (32 groups)
// kw / qs as f16 (the kVs = 128 scan with f16 operands, scan_chunk_wg<.., true> and
// scan_chunk_pair<true>): n = token, k = key, K-major in the natural key order (the accumulator
// S^T is the A operand as it is), qs at tokens 16..31 of the same array `w`; 8 tokens x 16
// k-groups of 8 keys per SBO (LBO 144: conflict-free 2-byte stores of 32 consecutive keys).
constexpr uint32_t kWgSboKeysH = kWgLboKeys * 16;
__host__ __device__ constexpr int wg_f16_offset(int n, int k) {
  return int((n / 8) * kWgSboKeysH + (k / 8) * kWgLboKeys) + (n % 8) * 16 + (k % 8) * 2;
}
static_assert(wg_f16_offset(2 * kC - 1, kK - 1) + 2 <= int(2 * kWgSboKeys),
              "kw and qs as f16 fit the tf32 kw array");
constexpr uint32_t kWgSboTok = 128 * 4;    // A_qk^T: N = 16 tokens, K = 16 tokens (tf32)
constexpr uint32_t kWgSboKe = 128 * 2;     // ke: N = 128 keys, K = 16 tokens (bf16)
__host__ __device__ constexpr int wg_slot(int k) {
  return (k & ~7) + ((k & 1) ? 4 + ((k & 7) >> 1) : (k & 7) >> 1);
}
// Byte offsets of element (n, k) in the three layouts.
__host__ __device__ constexpr int wg_tf32_offset(int n, int k, uint32_t sbo,
                                               uint32_t lbo = kWgLbo) {
  const int s = wg_slot(k);
  return int((n / 8) * sbo + (s / 4) * lbo) + (n % 8) * 16 + (s % 4) * 4;
}
// Banks of the qs stores (32 consecutive keys of one token row) and of the W stores (tokens g,
// keys 2t + {0, 1} of one 8-key group), as 4-byte words mod 32: all different.
constexpr bool wg_keys_conflict_free() {
  for (int row = 0; row < 16; ++row)
    for (int f = 0; f < 2; ++f) {
      unsigned qs = 0, w = 0;
      for (int lane = 0; lane < 32; ++lane) {
        qs |= 1u << ((wg_tf32_offset(row, 32 + lane, kWgSboKeys, kWgLboKeys) / 4) % 32);
        w |= 1u << ((wg_tf32_offset(lane / 4 + 8 * (row & 1), 8 * (row / 2) + 2 * (lane % 4) + f,
                                    kWgSboKeys, kWgLboKeys) / 4) % 32);
      }
      if (qs != ~0u || w != ~0u) return false;
    }
  return true;
}
static_assert(wg_keys_conflict_free(), "W / qs stores of the wgmma stage without bank conflicts");
__host__ __device__ constexpr int wg_ke_offset(int key, int tok) {
  return int((key / 8) * kWgSboKe) + (tok / 8) * 128 + (key % 8) * 16 + (tok % 8) * 2;
}
static_assert(wg_slot(0) == 0 && wg_slot(1) == 4 && wg_slot(6) == 3 && wg_slot(15) == 15 &&
                  wg_slot(9) == 12,
              "slot t <- 2t, slot t + 4 <- 2t + 1 within every group of 8");

// What the wgmma scan consumes for one chunk (byte layouts above).
template <int kVs>
struct WgScanStage {
  alignas(128) unsigned char w[2 * kWgSboKeys];   // kw = k^ . 2^G (tf32 operand bits): n = token,
                                                  // k = key
  alignas(128) unsigned char qs[2 * kWgSboKeys];  // scale q^ . 2^G, the same layout, right after
                                                  // w: tokens 16..31 of one N = 32 operand
  alignas(128) unsigned char ke_hi[kK * kC * 2];  // ke: n = key, k = token, bf16 hi
  alignas(128) unsigned char ke_lo[kK * kC * 2];  //   and lo
  alignas(128) unsigned char aqk[kC * kC * 4];    // A_qk^T: n = token r, k = source token s
  // V_new^T = (v^T - (S^T kw^T)) Tb^T is formed by the scan warps (scan_chunk_wg), which wait for
  // the prepare ~44 % of the time at kVs = 128 (Nsight Compute, session 7): the prepare writes kw
  // (into `w`, as a tf32 operand) and copies v^T and Tb, and forms neither W nor U.
  uint32_t vt[kVs][kLdVt];  // v^T, bf16 token pairs: vt[col][p] = v[2p][col] | v[2p + 1][col] << 16
  // Tb: split (two_scan_warpgroups: a scan thread's B fragments of one row, pairs t and t + 4, hi
  // and lo, are one 16-byte load at tb_col(t, 0)) or f32.
  std::conditional_t<two_scan_warpgroups<kVs>(), uint32_t[kC][kC], float[kC][kLdTb]> tb;
  float decay[kK];          // 2^G_C
};
template <int kVs>
using ScanStageOf = std::conditional_t<uses_wgmma<kVs>(), WgScanStage<kVs>, ScanStage<kVs>>;

// Key split (key_split<kVs>() == 2): each warp's V_new^T and O^T partials over its 64 keys (two
// token tiles each, 16 floats per lane as 4 float4 in lane order: conflict-free), per pair of
// warps, per chunk parity (the write of chunk f + 2 comes after the pair barrier of chunk f + 1,
// which the partner reaches after its reads of chunk f), per key half.
template <int kVs>
struct KeySplitExchange {
  float4 x[kVs / 16][2][2][4][32];  // [pair][parity][key half][quad][lane]
};
struct NoExchange {};

// Scan stages: chunk f (of the CTA's sequence of chunks) goes through scan[f % scan_stages], and
// the prepare group f % prep_groups writes it. kVs = 128 (two groups) has the shared memory for a
// third stage, so that a group's writes of chunk f + 3 wait for the scan of chunk f, not f + 1.
template <int kVs>
constexpr int scan_stages() {
  return kVs == 128 ? 3 : prep_groups<kVs>();
}
// Hand-off slots: chunk f (the CTA's flat chunk index) goes through scan stage f % scan_stages,
// is prepared by group f % prep_groups, and signals Full / is released on barrier slot
// f % handoff_slots, the least common multiple: every slot's Full barrier has one writer group,
// and the group that waits on an Empty slot (for the release of chunk f - scan_stages, before
// writing chunk f) is always the same one. With ids per stage, as before session 11, the two
// groups of kVs = 128 took turns on the three stages' barriers: a group could complete the other
// group's Empty barrier with the scan's release meant for it (a named barrier counts threads,
// not chunks) and overwrite a stage not yet read. That needed one group to fall a whole chunk of
// work behind the other (never observed, tests bitwise stable), but nothing excluded it.
template <int kVs>
constexpr int handoff_slots() {
  int a = prep_groups<kVs>(), b = scan_stages<kVs>();  // lcm by Euclid (std::lcm is host code)
  const int product = a * b;
  while (b != 0) {
    const int r = a % b;
    a = b;
    b = r;
  }
  return product / a;
}
// Named barrier ids of the scan kernel (0 is __syncthreads): Full and Empty per hand-off slot,
// one per prepare group, and the key split's warp pairs (kVs = 32).
template <int kVs>
struct BarrierIds {
  static constexpr int kFull0 = 1;
  static constexpr int kEmpty0 = kFull0 + handoff_slots<kVs>();
  static constexpr int kPrep0 = kEmpty0 + handoff_slots<kVs>();
  static constexpr int kPair0 = kPrep0 + prep_groups<kVs>();
  static constexpr int kEnd = kPair0 + (key_split<kVs>() > 1 ? kVs / 16 : 0);
};
static_assert(BarrierIds<32>::kEnd <= 16 && BarrierIds<64>::kEnd <= 16 &&
                  BarrierIds<128>::kEnd <= 16,
              "16 named barriers per CTA");

template <int kVs>
struct SharedPlan {
  RawStage<kVs> raw[prep_groups<kVs>()][2];   // group p: its chunks alternate raw[p][0], [p][1]
  ScanStageOf<kVs> scan[scan_stages<kVs>()];  // chunk f in scan[f % scan_stages]
  uint16_t ostage[scan_warps<kVs>()][kC][kLdOut];  // per scan warp: bf16 output tile, 16-B stores
  std::conditional_t<(key_split<kVs>() > 1), KeySplitExchange<kVs>, NoExchange> xch;
  uint64_t raw_full[prep_groups<kVs>()][2];  // mbarriers: the TMA loads into raw[p][b] landed
};

template <int kVs>
constexpr size_t shared_bytes() {
  return sizeof(SharedPlan<kVs>);
}
static_assert(shared_bytes<128>() <= 227 * 1024 && shared_bytes<64>() <= 227 * 1024 &&
                  shared_bytes<32>() <= 227 * 1024,
              "shared memory over the sm_90 limit");
// TMA writes its boxes to 128-byte aligned shared memory: the raw stages and their q, k, v, g.
static_assert(sizeof(RawStage<128>) % 128 == 0 && sizeof(RawStage<64>) % 128 == 0 &&
                  sizeof(RawStage<32>) % 128 == 0 && offsetof(RawStage<32>, q) % 128 == 0 &&
                  offsetof(RawStage<32>, k) % 128 == 0 && offsetof(RawStage<32>, v) % 128 == 0 &&
                  offsetof(RawStage<32>, g) % 128 == 0 && offsetof(RawStage<64>, g) % 128 == 0 &&
                  offsetof(RawStage<128>, g) % 128 == 0 && offsetof(SharedPlan<128>, raw) == 0,
              "raw stage layout for TMA");
static_assert(sizeof(RawStage<128>) % 16 == 0 && sizeof(ScanStage<128>) % 16 == 0 &&
                  sizeof(RawStage<32>) % 16 == 0 && sizeof(ScanStage<32>) % 16 == 0 &&
                  sizeof(RawStage<64>) % 16 == 0 && sizeof(ScanStage<64>) % 16 == 0 &&
                  sizeof(WgScanStage<64>) % 128 == 0 && sizeof(WgScanStage<128>) % 128 == 0 &&
                  offsetof(WgScanStage<128>, qs) ==
                      offsetof(WgScanStage<128>, w) + 2 * kWgSboKeys,
              "16-byte aligned stages");
static_assert(offsetof(RawStage<128>, rk) == offsetof(RawStage<128>, tb) + (kWsFloats - kC) * 4 &&
                  offsetof(RawStage<32>, q) == offsetof(RawStage<32>, tb) + kWsBytes,
              "the workspace record is one contiguous copy into the raw stage");

// The 64-token WY pipeline's workspace per (chunk, sequence, head): its image and Tb (wy64.cuh
// kImgBytes + kTbBytes, asserted there), for the plan's size limit (plan.cu use_wy64).
constexpr size_t kWy64ItemBytes = 88576;

}  // namespace fastkda::prefill_cuda
