// Decode kernel configuration: tile constants with their budgets, and the device-side argument
// struct (DecodeParams resolved on the host: strides filled in, scale resolved, flags split out).
#pragma once

#include <cstdint>

namespace fastkda::decode_cuda {

// One CTA owns kBlockV rows of S^T (value dims v0 .. v0 + kBlockV) of one (sequence, value head)
// and all K columns, so both reductions over K (k̂·S and q̂·S) stay inside the CTA.
constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kBlockV = 32;
constexpr int kMaxTokens = 8;  // DecodeParams::tokens is 1..8
constexpr int kVec = 4;        // state elements per access: 16 B of fp32 (8 B of bf16)

// V-first tile [kBlockV][K]: a row of S^T is shared by kLanesPerRow lanes (reduction = 3 shuffles),
// each holding K / (kVec * kLanesPerRow) chunks of 4 columns; a warp covers 32 / kLanesPerRow rows
// per step and each thread owns kRowsPerThread rows.
constexpr int kLanesPerRow = 8;
constexpr int kRowsPerThread = kBlockV / (kWarps * (32 / kLanesPerRow));
static_assert(kRowsPerThread * kWarps * (32 / kLanesPerRow) == kBlockV, "V-first tile mapping");

// K-first tile [K][kBlockV]: a row (one k) of kBlockV floats is read by kBlockV / kVec lanes; a
// warp covers 32 / (kBlockV / kVec) k-rows per step. Reduction over k: 2 shuffles + one smem pass.
constexpr int kLanesPerKRow = kBlockV / kVec;          // 8
constexpr int kKRowsPerWarpStep = 32 / kLanesPerKRow;  // 4
static_assert(kLanesPerKRow * kKRowsPerWarpStep == 32, "K-first tile mapping");

// Launched as a programmatic dependent of the previous kernel on the stream (PDL): the CTAs are
// staged while it drains and wait for it (griddepcontrol.wait) before their first global read.
// Measured on the H200 (BENCHMARKS.md, Decode): -0.25 us per call at batch 1, neutral at large
// batch.
constexpr bool kUsePdl = true;

// Register budget: 5 CTAs per SM (ptxas: 92 registers for K = 128, f32, V-first, no spills; 102
// without a cap = 4 CTAs per SM). Measured on the H200 (BENCHMARKS.md, Decode, same process):
// 1.5-2 % faster at batch >= 256 (K-first 4-5 %), 1 % at batch 32; 6 and 7 CTAs per SM (80 / 72
// registers, 7 spills) were slower than 5 on every row, 8 (64 registers) 12 % slower at batch 256.
constexpr int kMinCtasPerSm = 5;

// L2 prefetches of state tiles (prefetch.global.L2: hints, no registers, no waits), measured on the
// H200 (BENCHMARKS.md, Decode, same process):
// - one wave ahead: CTA b prefetches the tile of CTA b + kPrefetchWaves x (resident CTAs), so DRAM
//   keeps streaming while CTAs wait on their slot lookup and prologue: batch >= 256 91 -> 94 %,
//   K-first 83 -> 89 %; two waves ahead was slower than none (L2 thrash). 0 = off.
// - the first wave (CTAs b < resident) prefetches its own tile before the PDL wait, overlapping the
//   previous kernel's tail: batch 1 3.99 -> 3.25 us, batch 32 37.3 -> 35.9 us. Done by every CTA
//   it costs 5 % at batch 256, so only the first wave does it.
// Not with num_accepted (the read column is another load away).
constexpr int kPrefetchWaves = 1;

enum class GateKind : int { kBounded = 0, kSoftplus = 1, kPreGated = 2 };
enum class BetaKind : int { kSigmoid = 0, kGiven = 1, kTwoSigmoid = 2 };

// Everything the kernel reads, resolved on the host (validated DecodeParams, device pointers).
struct DecodeArgs {
  const uint16_t* q;  // [N * tokens, q_stride]  bf16, head h at h * K
  const uint16_t* k;  // [N * tokens, k_stride]  bf16
  const uint16_t* v;  // [N * tokens, v_stride]  bf16, head hv at hv * V
  const void* g;      // [N * tokens, g_stride]  bf16 or f32 (g_f32), head hv at hv * K
  const void* beta;   // [N * tokens, beta_stride]  bf16 or f32 (beta_f32)
  uint16_t* out;      // [N, tokens, HV, V]  bf16, dense
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride;  // token strides, elements
  const float* A_log;                                           // [HV]     optional
  const float* dt_bias;                                         // [HV, K]  optional
  float lower_bound;
  float scale;
  void* pool;  // [num_slots, HV, V, K] or [num_slots, HV, K, V], f32 or bf16
  int64_t num_slots;
  const int32_t* slots;  // [N, slot_stride]
  int64_t slot_stride;
  const int32_t* num_accepted;  // [N] optional (only read with per_token_states)
  int64_t N;
  int64_t prefetch_ahead;  // CTA b prefetches the state tile of CTA b + prefetch_ahead (0: none)
  int64_t early_prefetch_ctas;  // CTAs b < this prefetch their own tile before the PDL wait
  int H, HV, V, tokens;
  GateKind gate;
  BetaKind beta_kind;
  bool g_f32, beta_f32, l2norm, per_token_states;
};

}  // namespace fastkda::decode_cuda
