// fastkda public C++ API: Kimi Delta Attention (KDA) forward, decode and helpers.
//
// Dimension letters, used everywhere in fastkda (code, comments, tests, docs):
//   B   batch of equal-length sequences (B == 1 when cu_seqlens is given)
//   T   tokens per batch row (with cu_seqlens: total packed tokens)
//   N   number of sequences (B without cu_seqlens, len(cu_seqlens) - 1 with it)
//   H   query/key heads;  HV value heads (HV % H == 0; value head j reads q/k head j / (HV / H))
//   K   key dim;  V value dim  (each in {64, 128, 256}; CUDA kernels: K == V == 128)
//   C   chunk length of the chunked algorithm
//
// Per value head the state S is K x V. It is stored V-first ([.., V, K], i.e. S^T, the layout of
// FlashKDA and serving pools) or K-first ([.., K, V], fla's default). The layout is always an
// explicit parameter: it is never inferred from shapes (K == V makes shapes ambiguous).
//
// Math (DESIGN.md §2), per token t of a sequence and value head:
//   q^ = q / sqrt(sum q^2 + 1e-6), k^ likewise                  (if l2norm_qk)
//   a  = gate(g)  (natural-log decay, <= 0);  b = beta_act(beta)
//   S <- Diag(exp(a)) S;  S <- S + k^ b (v - S^T k^)^T;  o = scale * S^T q^
//
// Memory: every pointer is caller-owned. Tensors are dense row-major with the shape in the
// trailing comment, except that the outermost (token) stride of q, k, v, g, beta may be larger
// than the dense one (views into a fused projection); inner dims are always contiguous.
// Nothing here allocates device memory: CUDA entry points take a caller-supplied workspace sized by
// the matching *_workspace_size() query, run on `stream`, and never synchronise the host.
//
// Errors: every entry point validates all parameters before anything is written and throws
// fastkda::Error naming the argument, what was expected and what was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace fastkda {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Device : int { kCPU = 0, kCUDA = 1 };

enum class DType : int { kF32 = 0, kBF16 = 1, kI32 = 2, kI64 = 3 };

// How the raw gate input g becomes the log-decay a (<= 0). lower_bound = λ, A = exp(A_log[h]).
enum class GateMode : int {
  kBounded = 0,   // a = λ · sigmoid(A · (g + dt_bias))   (A = 1 when A_log is null), λ in [-5, 0)
  kSoftplus = 1,  // a = -A · softplus(g + dt_bias)        (unbounded below)
  kPreGated = 2,  // a = g as given (caller promises g <= 0); A_log and dt_bias must be null
};

enum class BetaMode : int {
  kSigmoid = 0,     // b = sigmoid(beta)
  kGiven = 1,       // b = beta
  kTwoSigmoid = 2,  // b = 2 · sigmoid(beta)  (allows negative eigenvalues)
};

enum class StateLayout : int {
  kVFirst = 0,  // [.., V, K]  (S^T; FlashKDA, serving pools)
  kKFirst = 1,  // [.., K, V]  (fla's default)
};

// Which algorithm computes the forward. Both are exact to their working precision.
enum class Algorithm : int {
  kChunked = 0,    // chunked form (DESIGN §2): fp32 on CPU, the Hopper kernels on CUDA
  kRecurrent = 1,  // token-by-token recurrence: fp64 on CPU (the oracle); CPU only for now
};

const char* to_string(Device d);
const char* to_string(DType d);
const char* to_string(GateMode m);
const char* to_string(BetaMode m);
const char* to_string(StateLayout l);
const char* to_string(Algorithm a);

// Inputs shared by the forward (prefill) and the decode step.
struct KdaInputs {
  Device device = Device::kCPU;
  int device_index = 0;     // CUDA ordinal the pointers live on (ignored on CPU)
  void* stream = nullptr;   // cudaStream_t (nullptr: legacy default stream); ignored on CPU

  int H = 0, HV = 0, K = 0, V = 0;

  DType io_dtype = DType::kBF16;  // dtype of q, k, v and out: bf16, or f32 (CPU only)
  const void* q = nullptr;        // [B, T, H, K]   io_dtype
  const void* k = nullptr;        // [B, T, H, K]   io_dtype
  const void* v = nullptr;        // [B, T, HV, V]  io_dtype
  const void* g = nullptr;        // [B, T, HV, K]  g_dtype (raw gate, or log-decay if pre-gated)
  const void* beta = nullptr;     // [B, T, HV]     beta_dtype
  void* out = nullptr;            // [B, T, HV, V]  io_dtype, written
  DType g_dtype = DType::kBF16;     // bf16 or f32
  DType beta_dtype = DType::kBF16;  // bf16 or f32
  // Token strides in elements (0: dense, i.e. H*K, H*K, HV*V, HV*K, HV, HV*V). Must be >= dense.
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, g_stride = 0, beta_stride = 0;

  GateMode gate_mode = GateMode::kBounded;
  float lower_bound = -5.0f;        // λ for kBounded: in [-5, 0)
  const float* A_log = nullptr;     // [HV]     optional (f32)
  const float* dt_bias = nullptr;   // [HV, K]  optional (f32)
  BetaMode beta_mode = BetaMode::kSigmoid;
  bool l2norm_qk = true;
  float scale = 0.0f;               // 0: K^-1/2
};

// Chunked forward over B equal-length sequences, or N varlen sequences packed along T.
struct ForwardParams : KdaInputs {
  int64_t B = 1, T = 0;              // tensors are [B, T, ...]
  const void* cu_seqlens = nullptr;  // [N + 1] optional; requires B == 1; cu[0] = 0, cu[N] = T
  DType cu_seqlens_dtype = DType::kI32;  // i32 or i64
  // Optional host copy of cu_seqlens (same dtype). On CPU cu_seqlens itself is validated; on CUDA
  // cu_seqlens is a device array that cannot be read without a host sync, so it is validated
  // (monotone, cu[0] == 0, cu[N] == T) only when this copy is given.
  const void* cu_seqlens_host = nullptr;  // [N + 1] optional
  int64_t N = 0;                     // sequences when cu_seqlens is given (ignored otherwise: N = B)

  // States, per sequence and value head. Optional each; null initial state means zeros.
  // With state_indices, sequence n reads initial_state[state_indices[n]] and writes
  // final_state[state_indices[n]] (serving pools; the same buffer may be both, updated in place);
  // a negative index means: start from zeros and write no final state.
  const void* initial_state = nullptr;  // [N or num_state_slots, HV, V, K] (V-first) or [.., K, V]
  void* final_state = nullptr;          // [N or num_state_slots, HV, V, K] (V-first) or [.., K, V]
  DType initial_state_dtype = DType::kF32;  // f32 or bf16
  DType final_state_dtype = DType::kF32;    // f32 or bf16
  StateLayout state_layout = StateLayout::kVFirst;
  // On CUDA state_indices is a device array: indices >= num_state_slots are treated like negative
  // ones (nothing read or written) so a bad index can never touch memory outside the pool; on CPU
  // they are rejected by validation. Non-negative indices must be distinct when final_state is
  // written (checked on CPU; on CUDA two sequences writing one row race).
  const int32_t* state_indices = nullptr;   // [N] optional
  int64_t num_state_slots = 0;              // rows of the state buffers when state_indices is set

  // Chunk-boundary states for prefix caching (optional; fla's `h` convention): row
  // boundary_row(n, j) = sum_{m < n} ceil(L_m / 64) + j holds the state of sequence n before its
  // token 64·j, for j = 0 .. ceil(L_n / 64) - 1 (j = 0: the initial state), L_n its length.
  // num_boundary_states must be sum_n ceil(L_n / 64) (checked where cu_seqlens is on the host).
  // On CUDA with a device cu_seqlens and no cu_seqlens_host it cannot be checked: rows
  // >= num_boundary_states are skipped (never written), so a short buffer is never overrun.
  void* boundary_states = nullptr;  // [num_boundary_states, HV, V, K] or [.., K, V] (state_layout)
  DType boundary_states_dtype = DType::kF32;  // f32 or bf16
  int64_t num_boundary_states = 0;
  static constexpr int kBoundaryInterval = 64;  // tokens between boundary states

  Algorithm algorithm = Algorithm::kChunked;
  void* workspace = nullptr;     // CUDA: forward_workspace_size(params) bytes, 256-byte aligned
  size_t workspace_bytes = 0;
};

// One decode step of 1..8 tokens per sequence on an fp32 (or bf16) state pool, in place.
struct DecodeParams : KdaInputs {
  int64_t N = 0;           // sequences (rows of the batch, including padding rows)
  int tokens = 1;          // tokens per sequence, 1..8; tensors are [N, tokens, ...]
  void* state_pool = nullptr;          // [num_slots, HV, V, K] (V-first) or [.., K, V], in place
  DType state_dtype = DType::kF32;     // f32 or bf16
  StateLayout state_layout = StateLayout::kVFirst;
  int64_t num_slots = 0;
  // slots[n * slot_stride + j]: without per_token_states, j = 0 is read and written back;
  // with it, the state after token t is written to slot column t (j = t), and the initial state is
  // read from column num_accepted[n] - 1 (column 0 when num_accepted is null).
  // A negative slot in the read column marks a padding row: nothing read or written, out = 0.
  // A negative slot in a write column skips that write. On CPU slots >= num_slots are rejected by
  // validation; on CUDA (a device array) they are treated like negative slots. Two rows must not
  // write one slot (checked on CPU; on CUDA they would race).
  const int32_t* slots = nullptr;      // [N, slot_stride]
  int64_t slot_stride = 1;
  bool per_token_states = false;
  const int32_t* num_accepted = nullptr;  // [N] optional, each in [1, tokens]
};

// Validates everything and throws fastkda::Error on the first violated precondition.
void validate(const ForwardParams& p);
void validate(const DecodeParams& p);

// Bytes of CUDA workspace the forward needs (0 on CPU). Depends only on shapes and modes.
size_t forward_workspace_size(const ForwardParams& p);

// Runs the forward: writes out, and final_state when given.
void forward(const ForwardParams& p);

// Runs one decode step: writes out and updates state_pool in place.
void decode(const DecodeParams& p);

// True when this build contains the CUDA kernels.
bool built_with_cuda();

}  // namespace fastkda
