// Tile constants and the shared-memory plan of the fused chunked prefill kernel
// (prefill_kernel.cuh). docs/prefill.md explains the choices; every byte budget is checked here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastkda::prefill_cuda {

constexpr int kK = 128;   // key dim (the only one the CUDA kernels support)
constexpr int kV = 128;   // value dim
constexpr int kC = 16;    // chunk length: one m16 MMA tile of tokens
constexpr int kHalf = 8;  // sub-block: rows 8..15 of a chunk are anchored at row 7 (§ anchoring)

constexpr int kPrepWarps = 4;                  // warps per prepare group (chunk-parallel work)
constexpr int kPrepThreads = 32 * kPrepWarps;  // one thread per key column in the gate scan
static_assert(kPrepThreads == kK, "prepare threads own one key column each");

// Prepare groups: 1 (warps 0..3 prepare every chunk, raw inputs double-buffered) or 2 (groups
// alternate chunks, each with its own raw stage and private buffers: twice the time per chunk for
// the latency-bound prepare). Scan warps follow the prepare warps. A full-width slice (kVs = 128)
// then has 512 threads: 128 registers each (ptxas: 24 bytes of spill, outside the chunk loop).
template <int kVs>
constexpr int prep_groups() {
  return 2;
}
template <int kVs>
constexpr int block_threads() {
  return prep_groups<kVs>() * kPrepThreads + 2 * kVs;  // 2 * kVs = 32 * (kVs / 16) scan threads
}

// Largest exponent span (log2) the anchored MMA form of the diagonal blocks may use; rows whose
// decay inside their 8-row block exceeds it are recomputed with exact pairwise exponentials.
// 2^100 * 2^-100 keeps every factor a normal f32, so tf32 operands stay exact in range.
constexpr float kMaxAnchorSpan = 100.0f;

// Leading dimensions (floats), chosen for conflict-free fragment loads:
//  - scalar fragment loads (row g, col t) need ld = 4 (mod 32): banks 4g + t;
//  - float2 fragment loads (row g, cols 2t, 2t+1) need ld = 8 (mod 32) within a half warp.
constexpr int kLdPrep = kK + 4;  // G, kt, qt, kd, ko: [kC][kLdPrep]
constexpr int kLdScan = kK + 8;  // w, qs: [kC][kLdScan]
constexpr int kLdTok = kC + 8;   // ke [kK][kLdTok], aqk [kC][kLdTok]
constexpr int kLdN = kC + 4;     // nmat [kC][kLdN] (rows read as float4)
constexpr int kLdOut = 16 + 8;   // output staging, bf16 [kC][kLdOut] per scan warp (16-B rows)
static_assert(kLdPrep % 32 == 4 && kLdScan % 32 == 8 && kLdTok % 32 == 24 && kLdN % 4 == 0,
              "fragment-load bank layout");

// Barrier ids (0 is __syncthreads).
enum Barrier : int {
  kBarFull0 = 2,   // scan stage s filled: kBarFull0 + s
  kBarEmpty0 = 4,  // scan stage s consumed: kBarEmpty0 + s
  kBarPrep0 = 6,   // prepare group p among itself: kBarPrep0 + p
};

// One chunk of raw inputs, filled by cp.async (rows past the sequence end are zero-filled).
template <int kVs>
struct RawStage {
  uint16_t q[kC][kK];   // bf16
  uint16_t k[kC][kK];   // bf16
  uint16_t v[kC][kVs];  // bf16, this CTA's value columns
  float g[kC][kK];      // f32 gate; a bf16 gate uses the first half as uint16_t [kC][kK]
};

// What the scan warps consume for one chunk (all tf32-rounded except u and decay).
template <int kVs>
struct ScanStage {
  float w[kC][kLdScan];   // -W = -(I + N)^-1 diag(beta) (k^ . 2^G)
  float qs[kC][kLdScan];  // scale q^ . 2^G
  float ke[kK][kLdTok];   // (k^ . 2^(G_C - G))^T
  float aqk[kC][kLdTok];  // lower-incl(scale q^ k^T . pairwise decays)
  float u[kC][kVs + 4];   // U = (I + N)^-1 diag(beta) v  (f32, MMA accumulator init)
  float decay[kK];        // 2^G_C
};

// Private to one prepare group, alive within one chunk's prepare.
struct PrepPrivate {
  float G[kC][kLdPrep];      // cumulative log2 decay inside the chunk (exact pairwise fallback)
  float kt[kC][kLdPrep];     // row operand of A': k^ . 2^(G - anchor)
  float qt[kC][kLdPrep];     // row operand of A_qk: scale q^ . 2^(G - anchor)
  float kd[kC][kLdPrep];     // column operand, diagonal blocks: k^ . 2^min(anchor - G, span)
  float ko[kHalf][kLdPrep];  // column operand, block (rows 8..15, cols 0..7): k^ . 2^(G_7 - G)
  float nmat[kC][kLdN];      // N = strictly_lower(diag(beta) A')
  float rq[kC], rk[kC];      // 1 / ||q||, 1 / ||k|| per row (1 without l2norm)
  float beta[kC];            // activated beta (0 past the sequence end)
  uint32_t span[kPrepWarps][kC];  // per prepare warp: max over its columns of anchor - G (f32 bits)
};

template <int kVs>
struct SharedPlan {
  RawStage<kVs> raw[2];    // raw inputs of chunk c in raw[c % 2]
  ScanStage<kVs> scan[2];  // prepared operands of chunk c in scan[c % 2]
  PrepPrivate prep[prep_groups<kVs>()];
  uint16_t ostage[kVs / 16][kC][kLdOut];  // per scan warp: bf16 output tile before 16-B stores
};

template <int kVs>
constexpr size_t shared_bytes() {
  return sizeof(SharedPlan<kVs>);
}
static_assert(shared_bytes<128>() <= 227 * 1024 && shared_bytes<64>() <= 227 * 1024,
              "shared memory over the sm_90 limit");
static_assert(sizeof(PrepPrivate) % 16 == 0 && sizeof(RawStage<128>) % 16 == 0 &&
                  sizeof(ScanStage<128>) % 16 == 0 && sizeof(RawStage<32>) % 16 == 0 &&
                  sizeof(ScanStage<32>) % 16 == 0,
              "16-byte aligned stages");

}  // namespace fastkda::prefill_cuda
