// Tensor front end (fastkda/tensor_api.h): shapes, dtypes, devices and strides of tensor
// descriptions -> ForwardParams / DecodeParams, then the pointer API (which validates the rest).
#include "fastkda/tensor_api.h"

#include <initializer_list>
#include <string>

#include "common.h"

namespace fastkda {
namespace {

constexpr int64_t kAny = -1;  // a dim not constrained by an earlier argument

struct Shape {  // prints "[2, 16, 4, 128]"
  const TensorView& t;
  bool strides = false;
  void append_to(std::string& s) const {
    s += '[';
    for (int i = 0; i < t.ndim; ++i) {
      if (i) s += ", ";
      detail::append_one(s, (strides ? t.strides : t.shape)[i]);
    }
    s += ']';
  }
};
struct Expected {  // prints "[2, 16, *, 128]"
  std::initializer_list<int64_t> dims;
  void append_to(std::string& s) const {
    s += '[';
    int i = 0;
    for (int64_t d : dims) {
      if (i++) s += ", ";
      if (d == kAny)
        s += '*';
      else
        detail::append_one(s, d);
    }
    s += ']';
  }
};

void check_present(const TensorView& t, const char* name) {
  FASTKDA_CHECK(t.present(), name, ": expected a tensor, got none");
}

// ndim and every constrained dim; `pattern` names the dims, e.g. "[B, T, HV, V]".
void check_shape(const TensorView& t, const char* name, const char* pattern,
                 std::initializer_list<int64_t> dims) {
  bool ok = t.ndim == int(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    ok = ok && (d == kAny || t.shape[i] == d);
    ++i;
  }
  FASTKDA_CHECK(ok, name, ": expected shape ", pattern, " = ", Expected{dims}, ", got ", Shape{t});
}

void check_float(const TensorView& t, const char* name) {
  FASTKDA_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kBF16, name,
                ": expected dtype f32 or bf16, got ", to_string(t.dtype));
}
void check_dtype(const TensorView& t, const char* name, DType want, const char* why = "") {
  FASTKDA_CHECK(t.dtype == want, name, ": expected dtype ", to_string(want), why, ", got ",
                to_string(t.dtype));
}

// Same device (and CUDA ordinal) as the reference tensor q.
void check_device(const TensorView& t, const char* name, const TensorView& ref) {
  const bool same = t.device == ref.device &&
                    (ref.device == Device::kCPU || t.device_index == ref.device_index);
  FASTKDA_CHECK(same, name, ": expected device ", to_string(ref.device),
                ref.device == Device::kCUDA ? ":" : "",
                ref.device == Device::kCUDA ? std::to_string(ref.device_index) : "",
                " (the device of q), got ", to_string(t.device),
                t.device == Device::kCUDA ? ":" : "",
                t.device == Device::kCUDA ? std::to_string(t.device_index) : "");
}

// True when dims [first, ndim) are dense row-major (size-1 dims may have any stride).
bool dense_from(const TensorView& t, int first) {
  int64_t expect = 1;
  for (int i = t.ndim - 1; i >= first; --i) {
    if (t.shape[i] == 0) return true;
    if (t.shape[i] != 1 && t.strides[i] != expect) return false;
    expect *= t.shape[i];
  }
  return true;
}
void check_contiguous(const TensorView& t, const char* name) {
  FASTKDA_CHECK(dense_from(t, 0), name, ": expected a contiguous tensor, got shape ", Shape{t},
                " with strides ", Shape{t, true});
}

// Stride between rows of the flattened [B * T] token axis of a [B, T, ...] tensor whose dims
// after T are contiguous; 0 where it does not matter (at most one row).
int64_t token_stride(const TensorView& t, const char* name) {
  FASTKDA_CHECK(dense_from(t, 2), name, ": expected the dims after the token dim to be contiguous, ",
                "got shape ", Shape{t}, " with strides ", Shape{t, true});
  const int64_t B = t.shape[0], T = t.shape[1];
  int64_t row = 1;
  for (int i = 2; i < t.ndim; ++i) row *= t.shape[i];
  if (B * T <= 1 || row == 0) return 0;
  const int64_t s = T > 1 ? t.strides[1] : t.strides[0];
  FASTKDA_CHECK(s >= row, name, ": expected a token stride >= ", row, " elements, got ", s,
                " (strides ", Shape{t, true}, ")");
  FASTKDA_CHECK(B == 1 || T == 1 || t.strides[0] == T * s, name,
                ": expected batch stride = T * token stride = ", T * s, ", got ", t.strides[0],
                " (strides ", Shape{t, true}, ")");
  return s;
}

// Optional per-head gate parameters: A_log [HV] f32, dt_bias [HV, K] or [HV * K] f32.
void set_gate_params(const TensorView& A_log, const TensorView& dt_bias, const TensorView& q,
                     KdaInputs* p) {
  if (A_log.present()) {
    check_shape(A_log, "A_log", "[HV]", {p->HV});
    check_dtype(A_log, "A_log", DType::kF32);
    check_device(A_log, "A_log", q);
    check_contiguous(A_log, "A_log");
    p->A_log = static_cast<const float*>(A_log.data);
  }
  if (dt_bias.present()) {
    if (dt_bias.ndim == 1)
      check_shape(dt_bias, "dt_bias", "[HV * K]", {int64_t(p->HV) * p->K});
    else
      check_shape(dt_bias, "dt_bias", "[HV, K]", {p->HV, p->K});
    check_dtype(dt_bias, "dt_bias", DType::kF32);
    check_device(dt_bias, "dt_bias", q);
    check_contiguous(dt_bias, "dt_bias");
    p->dt_bias = static_cast<const float*>(dt_bias.data);
  }
}

// q, k, v, g, beta, out of shape [R, S, ...] (R, S = B, T for the forward, N, tokens for
// decode): fills the dims, dtypes, pointers and token strides of KdaInputs.
void set_inputs(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& g,
                const TensorView& beta, const TensorView& out, const char* rows_pattern,
                const KdaOptions& o, KdaInputs* p) {
  check_present(q, "q");
  FASTKDA_CHECK(q.ndim == 4, "q: expected 4 dims ", rows_pattern, ", H, K], got shape ", Shape{q});
  const int64_t R = q.shape[0], S = q.shape[1], H = q.shape[2], K = q.shape[3];
  check_float(q, "q");
  const TensorView* views[] = {&k, &v, &g, &beta, &out};
  const char* names[] = {"k", "v", "g", "beta", "out"};
  for (int i = 0; i < 5; ++i) {
    check_present(*views[i], names[i]);
    check_device(*views[i], names[i], q);
  }
  check_shape(k, "k", "[.., H, K] (the shape of q)", {R, S, H, K});
  FASTKDA_CHECK(v.ndim == 4, "v: expected 4 dims ", rows_pattern, ", HV, V], got shape ", Shape{v});
  const int64_t HV = v.shape[2], V = v.shape[3];
  check_shape(v, "v", "[.., HV, V] (leading dims of q)", {R, S, kAny, kAny});
  check_shape(g, "g", "[.., HV, K] (HV of v, K of q)", {R, S, HV, K});
  check_shape(beta, "beta", "[.., HV] (HV of v)", {R, S, HV});
  check_shape(out, "out", "[.., HV, V] (the shape of v)", {R, S, HV, V});
  check_dtype(k, "k", q.dtype, " (the dtype of q)");
  check_dtype(v, "v", q.dtype, " (the dtype of q)");
  check_dtype(out, "out", q.dtype, " (the dtype of q)");
  check_float(g, "g");
  check_float(beta, "beta");
  check_contiguous(out, "out");
  FASTKDA_CHECK(H <= (int64_t(1) << 20) && HV <= (int64_t(1) << 20) && K <= 4096 && V <= 4096,
                "q, v: head counts and head dims out of range, got q ", Shape{q}, ", v ", Shape{v});

  p->device = q.device;
  p->device_index = q.device_index;
  p->stream = o.stream;
  p->H = int(H), p->HV = int(HV), p->K = int(K), p->V = int(V);
  p->io_dtype = q.dtype;
  p->q = q.data, p->k = k.data, p->v = v.data, p->g = g.data, p->beta = beta.data;
  p->out = out.data;
  p->g_dtype = g.dtype;
  p->beta_dtype = beta.dtype;
  p->q_stride = token_stride(q, "q");
  p->k_stride = token_stride(k, "k");
  p->v_stride = token_stride(v, "v");
  p->g_stride = token_stride(g, "g");
  p->beta_stride = token_stride(beta, "beta");
  p->gate_mode = o.gate_mode;
  p->lower_bound = o.lower_bound;
  p->beta_mode = o.beta_mode;
  p->l2norm_qk = o.l2norm_qk;
  p->scale = o.scale;
}

// A state tensor [rows, HV, V, K] (V-first) or [rows, HV, K, V]; rows == kAny: any count >= 1.
void check_state(const TensorView& t, const char* name, int64_t rows, const KdaInputs& p,
                 StateLayout layout, const TensorView& q, bool allow_empty = false) {
  const bool v_first = layout == StateLayout::kVFirst;
  check_shape(t, name, v_first ? "[rows, HV, V, K] (V-first)" : "[rows, HV, K, V] (K-first)",
              {rows, p.HV, v_first ? p.V : p.K, v_first ? p.K : p.V});
  FASTKDA_CHECK(t.shape[0] >= 1 || rows != kAny || allow_empty, name, ": expected at least one state row, got ",
                Shape{t});
  check_float(t, name);
  check_device(t, name, q);
  check_contiguous(t, name);
}

void check_index_vector(const TensorView& t, const char* name, int64_t n, const TensorView& q) {
  check_shape(t, name, "[N]", {n});
  check_dtype(t, name, DType::kI32);
  check_device(t, name, q);
  check_contiguous(t, name);
}

}  // namespace

ForwardParams make_forward_params(const ForwardTensors& t) {
  ForwardParams p;
  set_inputs(t.q, t.k, t.v, t.g, t.beta, t.out, "[B, T", t.options, &p);
  set_gate_params(t.A_log, t.dt_bias, t.q, &p);
  p.B = t.q.shape[0];
  p.T = t.q.shape[1];
  p.algorithm = t.algorithm;

  int64_t N = p.B;
  if (t.cu_seqlens.present()) {
    const TensorView& cu = t.cu_seqlens;
    FASTKDA_CHECK(cu.ndim == 1 && cu.shape[0] >= 1, "cu_seqlens: expected shape [N + 1], got ",
                  Shape{cu});
    FASTKDA_CHECK(cu.dtype == DType::kI32 || cu.dtype == DType::kI64,
                  "cu_seqlens: expected dtype i32 or i64, got ", to_string(cu.dtype));
    check_device(cu, "cu_seqlens", t.q);
    check_contiguous(cu, "cu_seqlens");
    FASTKDA_CHECK(p.B == 1, "q: expected batch size B = 1 with cu_seqlens (packed sequences), got ",
                  "shape ", Shape{t.q});
    N = cu.shape[0] - 1;
    p.cu_seqlens = cu.data;
    p.cu_seqlens_dtype = cu.dtype;
    p.N = N;
    const TensorView& host = t.cu_seqlens_host;
    if (host.present() && p.device == Device::kCUDA) {
      check_shape(host, "cu_seqlens_host", "[N + 1] (the shape of cu_seqlens)", {N + 1});
      check_dtype(host, "cu_seqlens_host", cu.dtype, " (the dtype of cu_seqlens)");
      FASTKDA_CHECK(host.device == Device::kCPU, "cu_seqlens_host: expected device cpu, got ",
                    to_string(host.device));
      check_contiguous(host, "cu_seqlens_host");
      p.cu_seqlens_host = host.data;
    }
  } else {
    FASTKDA_CHECK(!t.cu_seqlens_host.present(),
                  "cu_seqlens_host: expected none without cu_seqlens, got a tensor");
  }

  const TensorView& h0 = t.initial_state;
  const TensorView& ht = t.final_state;
  const StateLayout layout = t.options.state_layout;
  FASTKDA_CHECK(layout == StateLayout::kVFirst || layout == StateLayout::kKFirst,
                "state_layout: expected v_first or k_first, got ", int(layout));
  p.state_layout = layout;
  if (t.state_indices.present()) {
    FASTKDA_CHECK(h0.present() || ht.present(), "state_indices: expected initial_state or ",
                  "final_state (the state pool) with state_indices, got neither");
    check_index_vector(t.state_indices, "state_indices", N, t.q);
    p.state_indices = static_cast<const int32_t*>(t.state_indices.data);
    const int64_t slots = h0.present() ? h0.shape[0] : ht.shape[0];
    if (h0.present()) check_state(h0, "initial_state", kAny, p, layout, t.q);
    if (ht.present()) check_state(ht, "final_state", h0.present() ? slots : kAny, p, layout, t.q);
    p.num_state_slots = slots;
  } else {
    if (h0.present()) check_state(h0, "initial_state", N, p, layout, t.q);
    if (ht.present()) check_state(ht, "final_state", N, p, layout, t.q);
  }
  if (t.boundary_states.present()) {
    // Any row count here (0 when every sequence is empty): validate() checks it against lengths.
    check_state(t.boundary_states, "boundary_states", kAny, p, layout, t.q, /*allow_empty=*/true);
    p.boundary_states = t.boundary_states.data;
    p.boundary_states_dtype = t.boundary_states.dtype;
    p.num_boundary_states = t.boundary_states.shape[0];
  }
  if (h0.present()) p.initial_state = h0.data, p.initial_state_dtype = h0.dtype;
  if (ht.present()) p.final_state = ht.data, p.final_state_dtype = ht.dtype;

  if (t.workspace.data) {
    const bool same = t.workspace.device == p.device &&
                      (p.device == Device::kCPU || t.workspace.device_index == p.device_index);
    FASTKDA_CHECK(same, "workspace: expected a buffer on the device of q (", to_string(p.device),
                  "), got ", to_string(t.workspace.device));
    p.workspace = t.workspace.data;
    p.workspace_bytes = t.workspace.bytes;
  }
  return p;
}

DecodeParams make_decode_params(const DecodeTensors& t) {
  DecodeParams p;
  set_inputs(t.q, t.k, t.v, t.g, t.beta, t.out, "[N, tokens", t.options, &p);
  set_gate_params(t.A_log, t.dt_bias, t.q, &p);
  p.N = t.q.shape[0];
  FASTKDA_CHECK(t.q.shape[1] >= 1 && t.q.shape[1] <= 8,
                "q: expected 1..8 tokens per sequence (shape [N, tokens, H, K]), got shape ",
                Shape{t.q});
  p.tokens = int(t.q.shape[1]);
  p.per_token_states = t.per_token_states;
  const StateLayout layout = t.options.state_layout;
  FASTKDA_CHECK(layout == StateLayout::kVFirst || layout == StateLayout::kKFirst,
                "state_layout: expected v_first or k_first, got ", int(layout));
  p.state_layout = layout;

  check_present(t.state_pool, "state_pool");
  check_state(t.state_pool, "state_pool", kAny, p, layout, t.q);
  p.state_pool = t.state_pool.data;
  p.state_dtype = t.state_pool.dtype;
  p.num_slots = t.state_pool.shape[0];

  const TensorView& s = t.slots;
  check_present(s, "slots");
  const int64_t columns = t.per_token_states ? p.tokens : 1;
  if (s.ndim == 1) {
    check_index_vector(s, "slots", p.N, t.q);
    FASTKDA_CHECK(columns == 1, "slots: expected shape [N, S] with S >= tokens = ", p.tokens,
                  " for per_token_states, got ", Shape{s});
    p.slot_stride = 1;
  } else {
    check_shape(s, "slots", "[N, S]", {p.N, kAny});
    check_dtype(s, "slots", DType::kI32);
    check_device(s, "slots", t.q);
    FASTKDA_CHECK(s.shape[1] >= columns, "slots: expected S >= ", columns,
                  t.per_token_states ? " (tokens, per-token states)" : "", " columns, got shape ",
                  Shape{s});
    FASTKDA_CHECK(s.shape[1] <= 1 || s.strides[1] == 1, "slots: expected a contiguous last dim, ",
                  "got strides ", Shape{s, true});
    p.slot_stride = p.N > 1 ? s.strides[0] : s.shape[1];
    FASTKDA_CHECK(p.slot_stride >= s.shape[1], "slots: expected a row stride >= S = ", s.shape[1],
                  ", got ", p.slot_stride);
  }
  p.slots = static_cast<const int32_t*>(s.data);

  if (t.num_accepted.present()) {
    check_index_vector(t.num_accepted, "num_accepted", p.N, t.q);
    p.num_accepted = static_cast<const int32_t*>(t.num_accepted.data);
  }
  return p;
}

size_t forward_workspace_size(const ForwardTensors& t) {
  return forward_workspace_size(make_forward_params(t));
}

void forward(const ForwardTensors& t) { forward(make_forward_params(t)); }

void decode(const DecodeTensors& t) { decode(make_decode_params(t)); }

}  // namespace fastkda
