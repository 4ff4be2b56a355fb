// PrefillArgs: the resolved, validated ForwardParams as the prefill kernel reads them.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: no driver-API call is linked)
#include <vector_types.h>  // int2

#include <cstdint>

namespace fastkda::prefill_cuda {

enum class Gate : int { kBounded = 0, kSoftplus = 1, kPreGated = 2 };    // == GateMode
enum class BetaAct : int { kSigmoid = 0, kGiven = 1, kTwoSigmoid = 2 };  // == BetaMode

// Which launch of the scan kernel (a template argument of prefill_kernel; split.cuh,
// docs/prefill.md "Split T"): the whole sequence per CTA, or the two passes of the split-T scan
// around combine_kernel.
enum class Pass : int {
  kWhole = 0,        // one CTA walks all chunks of its sequence
  kTransitions = 1,  // per segment but the last: its end state (segment 0 from the initial
                     // state, the others from zero) and its K x K transition (from identity)
  kOutputs = 2,      // every segment from its true start state: outputs, final state
  kPairs = 3,        // pass 1 at vsplit 1 with first_out but segment 0: a segment's value and
                     // transition rows in one CTA (two m-blocks per scan warpgroup, one prepare
                     // group: prefill_kernel.cuh scan_pair_job), beside kFirst
  kFirst = 4,        // with kPairs: segment 0's output jobs (first_out), launched just before it
};

// The streamed intra kernel's shared counters (intra_warp_streamed_kernel), zeroed before each
// launch.
struct StreamQueue {
  unsigned long long next;     // tiles claimed so far
  unsigned long long keepers;  // CTAs that run until the last tile, once started
};

struct PrefillArgs {
  // TMA descriptors of the scan kernel's per-chunk loads (launch.cu make_load_maps): boxes of kC
  // token rows x kK (q, k, g) or kVs (v) columns, rows past the tensor zero-filled.
  CUtensorMap tm_q, tm_k, tm_g, tm_v;
  const uint16_t* q;  // [B*T, q_stride] bf16, head h at h*K
  const uint16_t* k;  // [B*T, k_stride] bf16
  const uint16_t* v;  // [B*T, v_stride] bf16, value head j at j*V
  const void* g;      // [B*T, g_stride] f32 or bf16, value head j at j*K
  const void* beta;   // [B*T, beta_stride] f32 or bf16
  uint16_t* out;      // [B*T, HV*V] bf16
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, out_stride;  // elements per token
  const float* A_log;                                                       // [HV] optional
  const float* dt_bias;                                                     // [HV, K] optional
  const void* cu_seqlens;        // [N + 1] i32 or i64, device; null: fixed-length batch
  const void* initial_state;     // [slots, HV, V, K] or [slots, HV, K, V], optional
  void* final_state;             // same layout, optional
  const int32_t* state_indices;  // [N] optional
  int64_t num_state_slots;
  void* boundary_states;        // [num_boundary_states, HV, V, K] or [.., K, V], optional
  int64_t num_boundary_states;  // rows >= this are skipped (cu_seqlens unchecked on the host)
  float* ws;         // [chunk slots, HV, kWsFloats] workspace: Tb and A_qk per chunk (config.h)
  int64_t num_seq;   // N
  int64_t chunk_slots;  // chunk slots of the workspace (launch.cu chunk_slots)
  int64_t T;         // tokens per batch row (fixed-length)
  int H, HV, group;  // group = HV / H
  int vsplit;        // CTAs per (sequence, value head), each kV / vsplit columns
  int seg_chunks;    // split T: chunks per segment (0 with Pass::kWhole) after the first,
  int seg0_chunks;   // which has seg0_chunks >= seg_chunks (common.cuh seg_first, seg_count)
  bool first_out;    // split T: segment 0's value slices write their outputs in pass 1 (and
                     // E_0, or a one-segment sequence's final state); pass 2 skips segment 0
  float* seg_ws;     // split T: [segment slots, HV, kSegFloats] (config.h)
  const int32_t* order;  // [N] varlen sequences, longest first (order.cuh); null: in order
  // Varlen intra grid: per chunk slot its first token and rows (slot_map_kernel, order.cuh;
  // rows 0: no chunk), so that an intra CTA reads one entry instead of searching cu_seqlens.
  const int2* slot_map;  // [chunk slots] {tok0, nvalid}; null: the CTA searches
  // Streamed intra kernel (plan.h Plan::streamed; null ready: the scan waits for the whole
  // intra grid instead): per (sequence, value head, block of kReadyChunks chunks) the number of
  // its chunk records in the workspace, and the tile queue; tiles N * HV per chunk index,
  // intra_tiles in all.
  uint32_t* ready;  // [N, HV, ready_blocks]
  int ready_blocks;
  StreamQueue* queue;
  int64_t intra_tiles, retire_tile;  // retire_tile: see intra_warp_streamed_kernel
  int keep_sms;
  // The 64-token WY pipeline (wy64.cuh, Plan::wy64): per (sequence, head, chunk) item its image
  // and Tb (made by the producer, read by the scan), its ready flag; the producer's item counter.
  // The flags and the counter are zeroed before each launch. tm_v is then wy64's v map.
  unsigned char* wy_img;
  unsigned char* wy_tb;
  uint32_t* wy_ready;    // [N, H, wy_chunks]
  uint32_t* wy_counter;  // [0] items taken, [1] the producer CTAs that started on the scan's SMs
  int wy_chunks;         // chunks of 64 tokens per sequence (T / 64)
  int wy_idle_sms;       // the producer's CTAs on SMs below this take no item (the scan's SMs)
  int64_t jobs;          // scan jobs (CTA-sized units); the grid may be smaller (persistent
                         // Pass::kWhole: CTA b does jobs b, b + grid, ...)
  Gate gate;
  BetaAct beta_act;
  float lower_bound_log2;  // lambda * log2(e)
  float scale;
  bool g_f32, beta_f32, l2norm, cu_i64;
  bool init_f32, final_f32, boundary_f32, k_first;
  CUtensorMap tm_out;  // wy64: out as [B T][H 128] bf16, stored in boxes of 64 tokens x 64 values
};

}  // namespace fastkda::prefill_cuda
