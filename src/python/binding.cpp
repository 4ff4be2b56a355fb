// Python extension fastkda._C (nanobind): the tensor API of fastkda/tensor_api.h for any array
// that speaks DLPack (torch CPU/CUDA tensors, numpy arrays, ...). No torch at build time.
//
// Host overhead matters (a decode step should cost a few microseconds), so arguments arrive as
// plain handles and are described without creating DLPack capsules where the producer offers
// the DLPack C exchange API (`type(x).__dlpack_c_exchange_api__`, torch >= 2.9): one C call per
// tensor, no allocation. Anything else goes through nb::ndarray<> (__dlpack__ or the buffer
// protocol). The GIL is released while the kernels run; fastkda::Error becomes fastkda.Error, a
// subclass of both ValueError and RuntimeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "common.h"
#include "fastkda/tensor_api.h"

namespace nb = nanobind;

namespace fastkda::python {
namespace {

// ---- DLPack C exchange API (DLPack >= 1.2), declared from the DLPack spec: only what is used ---
struct DLPackVersion {
  uint32_t major, minor;
};
struct ExchangeApi {
  DLPackVersion version;  // header: version, then the previous API in the chain
  const void* prev_api;
  const void* managed_tensor_allocator;
  const void* managed_tensor_from_py_object_no_sync;
  const void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);
  const void* current_work_stream;
};

// The exchange API of a Python type, or null; cached per type (the GIL guards the cache).
const ExchangeApi* exchange_api(PyTypeObject* type) {
  struct Entry {
    PyTypeObject* type;
    const ExchangeApi* api;
  };
  static Entry cache[8];
  static int used = 0;
  for (int i = 0; i < used; ++i)
    if (cache[i].type == type) return cache[i].api;
  const ExchangeApi* api = nullptr;
  PyObject* capsule = PyObject_GetAttrString((PyObject*)type, "__dlpack_c_exchange_api__");
  if (capsule && PyCapsule_CheckExact(capsule)) {
    auto* p = static_cast<const ExchangeApi*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
    if (p && p->version.major == 1 && p->dltensor_from_py_object_no_sync) api = p;
  }
  Py_XDECREF(capsule);
  PyErr_Clear();
  if (used < 8) {
    Py_INCREF(type);  // keep the cached type alive
    cache[used++] = {type, api};
  }
  return api;
}

// ---- DLPack descriptions -> TensorView ---------------------------------------------------------
std::string dlpack_dtype_name(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  const char* kind = "other";
  switch (C(d.code)) {
    case C::Int: kind = "i"; break;
    case C::UInt: kind = "u"; break;
    case C::Float: kind = "f"; break;
    case C::Bfloat: kind = "bf"; break;
    case C::Complex: kind = "c"; break;
    case C::Bool: return "bool";
    default: break;
  }
  std::string name = kind + std::to_string(d.bits);
  return d.lanes == 1 ? name : name + "x" + std::to_string(d.lanes);
}

DType to_dtype(nb::dlpack::dtype d, const char* name) {
  using C = nb::dlpack::dtype_code;
  if (d.lanes == 1) {
    if (d.code == uint8_t(C::Float) && d.bits == 32) return DType::kF32;
    if (d.code == uint8_t(C::Bfloat) && d.bits == 16) return DType::kBF16;
    if (d.code == uint8_t(C::Int) && d.bits == 32) return DType::kI32;
    if (d.code == uint8_t(C::Int) && d.bits == 64) return DType::kI64;
  }
  ::fastkda::detail::throw_error(__FILE__, __LINE__, name,
                                ": expected dtype bf16, f32, i32 or i64, got ",
                                dlpack_dtype_name(d));
}

Device to_device(int32_t type, const char* name) {
  // DLPack device types: 1 CPU, 2 CUDA, 3 CUDA pinned host memory, 13 CUDA managed memory.
  if (type == 1 || type == 3) return Device::kCPU;
  if (type == 2 || type == 13) return Device::kCUDA;
  ::fastkda::detail::throw_error(__FILE__, __LINE__, name,
                                ": expected a CPU or CUDA tensor, got DLPack device type ", type);
}

void fill_view(const nb::dlpack::dltensor& dl, const char* name, TensorView* t) {
  FASTKDA_CHECK(dl.ndim >= 0 && dl.ndim <= kMaxTensorDims, name, ": expected at most ",
                kMaxTensorDims, " dims, got ", dl.ndim);
  t->data = static_cast<char*>(dl.data) + dl.byte_offset;
  t->dtype = to_dtype(dl.dtype, name);
  t->device = to_device(dl.device.device_type, name);
  t->device_index = dl.device.device_id;
  t->ndim = dl.ndim;
  int64_t dense = 1;
  for (int i = dl.ndim - 1; i >= 0; --i) {
    t->shape[i] = dl.shape[i];
    t->strides[i] = dl.strides ? dl.strides[i] : dense;  // null strides: row-major
    dense *= dl.shape[i];
  }
}

// Converts the arguments of one call; fallback conversions stay alive until it is destroyed.
class Importer {
 public:
  TensorView view(nb::handle obj, const char* name) {
    TensorView t;
    if (obj.is_none()) return t;
    if (const ExchangeApi* api = exchange_api(Py_TYPE(obj.ptr()))) {
      nb::dlpack::dltensor dl;
      if (api->dltensor_from_py_object_no_sync(obj.ptr(), &dl) == 0) {
        fill_view(dl, name, &t);
        return t;
      }
      PyErr_Clear();  // e.g. a type the producer cannot describe: try the generic route
    }
    nb::ndarray<>& a = keep();
    bool ok = nb::try_cast(obj, a, false);
    if (!ok && nb::hasattr(obj, "detach")) {
      // torch without the exchange API refuses __dlpack__ on tensors that require grad
      // (parameters such as A_log): the kernels only read them, so a detached view will do.
      ok = nb::try_cast(obj.attr("detach")(), a, false);
    }
    FASTKDA_CHECK(ok, name,
                  ": expected a tensor or array (DLPack or buffer protocol), got an object of type ",
                  nb::type_name(obj.type()).c_str());
    nb::dlpack::dltensor dl;
    dl.data = const_cast<void*>(a.data());
    dl.device = {int32_t(a.device_type()), int32_t(a.device_id())};
    dl.ndim = int32_t(a.ndim());
    dl.dtype = a.dtype();
    int64_t shape[kMaxTensorDims], strides[kMaxTensorDims];
    FASTKDA_CHECK(a.ndim() <= size_t(kMaxTensorDims), name, ": expected at most ", kMaxTensorDims,
                  " dims, got ", a.ndim());
    for (size_t i = 0; i < a.ndim(); ++i) shape[i] = int64_t(a.shape(i)), strides[i] = a.stride(i);
    dl.shape = shape;
    dl.strides = strides;
    fill_view(dl, name, &t);
    return t;
  }

  // A contiguous buffer of any dtype, described in bytes (the CUDA workspace).
  BufferView buffer(nb::handle obj, const char* name) {
    BufferView b;
    if (obj.is_none()) return b;
    nb::ndarray<>& a = keep();
    FASTKDA_CHECK(nb::try_cast(obj, a, false), name,
                  ": expected a tensor or array, got an object of type ",
                  nb::type_name(obj.type()).c_str());
    int64_t dense = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      FASTKDA_CHECK(a.shape(i) <= 1 || a.stride(i) == dense, name,
                    ": expected a contiguous buffer");
      dense *= int64_t(a.shape(i));
    }
    b.data = const_cast<void*>(a.data());
    b.bytes = a.nbytes();
    b.device = to_device(a.device_type(), name);
    b.device_index = a.device_id();
    return b;
  }

 private:
  nb::ndarray<>& keep() {
    FASTKDA_CHECK(used_ < kSlots, "internal: too many array arguments");
    return kept_[used_++];
  }
  static constexpr int kSlots = 16;
  nb::ndarray<> kept_[kSlots];
  int used_ = 0;
};

template <class E>
E to_enum(int value, const char* name, int count) {
  FASTKDA_CHECK(value >= 0 && value < count, name, ": expected 0..", count - 1, ", got ", value);
  return E(value);
}

KdaOptions make_options(int gate_mode, double lower_bound, int beta_mode, bool l2norm_qk,
                        double scale, int state_layout, uintptr_t stream) {
  KdaOptions o;
  o.gate_mode = to_enum<GateMode>(gate_mode, "gate_mode", 3);
  o.lower_bound = float(lower_bound);
  o.beta_mode = to_enum<BetaMode>(beta_mode, "beta_mode", 3);
  o.l2norm_qk = l2norm_qk;
  o.scale = float(scale);
  o.state_layout = to_enum<StateLayout>(state_layout, "state_layout", 2);
  o.stream = reinterpret_cast<void*>(stream);
  return o;
}

struct ForwardArgs {
  Importer in;
  ForwardTensors t;
};

void import_forward(ForwardArgs& a, nb::handle q, nb::handle k, nb::handle v, nb::handle g,
                    nb::handle beta, nb::handle out, nb::handle A_log, nb::handle dt_bias,
                    nb::handle cu_seqlens, nb::handle cu_seqlens_host, nb::handle initial_state,
                    nb::handle final_state, nb::handle state_indices) {
  ForwardTensors& t = a.t;
  t.q = a.in.view(q, "q");
  t.k = a.in.view(k, "k");
  t.v = a.in.view(v, "v");
  t.g = a.in.view(g, "g");
  t.beta = a.in.view(beta, "beta");
  t.out = a.in.view(out, "out");
  t.A_log = a.in.view(A_log, "A_log");
  t.dt_bias = a.in.view(dt_bias, "dt_bias");
  t.cu_seqlens = a.in.view(cu_seqlens, "cu_seqlens");
  t.cu_seqlens_host = a.in.view(cu_seqlens_host, "cu_seqlens_host");
  t.initial_state = a.in.view(initial_state, "initial_state");
  t.final_state = a.in.view(final_state, "final_state");
  t.state_indices = a.in.view(state_indices, "state_indices");
}

// fastkda._C.forward: see python/fastkda/_ops.py for the argument meanings. `alloc(nbytes)`
// (optional) returns a device buffer when the CUDA path needs a workspace and none is given.
void forward_py(nb::handle q, nb::handle k, nb::handle v, nb::handle g, nb::handle beta,
                nb::handle out, nb::handle A_log, nb::handle dt_bias, nb::handle cu_seqlens,
                nb::handle cu_seqlens_host, nb::handle initial_state, nb::handle final_state,
                nb::handle state_indices, nb::handle workspace, int gate_mode, double lower_bound,
                int beta_mode, bool l2norm_qk, double scale, int state_layout, int algorithm,
                uintptr_t stream, nb::handle alloc, nb::handle boundary_states) {
  ForwardArgs a;
  import_forward(a, q, k, v, g, beta, out, A_log, dt_bias, cu_seqlens, cu_seqlens_host,
                 initial_state, final_state, state_indices);
  a.t.boundary_states = a.in.view(boundary_states, "boundary_states");
  a.t.options = make_options(gate_mode, lower_bound, beta_mode, l2norm_qk, scale, state_layout,
                             stream);
  a.t.algorithm = to_enum<Algorithm>(algorithm, "algorithm", 2);
  a.t.workspace = a.in.buffer(workspace, "workspace");
  nb::object allocated;
  if (!a.t.workspace.data && a.t.q.device == Device::kCUDA && !alloc.is_none()) {
    const size_t bytes = forward_workspace_size(a.t);
    if (bytes > 0) {
      allocated = alloc(bytes);
      a.t.workspace = a.in.buffer(allocated, "workspace");
    }
  }
  nb::gil_scoped_release release;
  forward(a.t);
}

size_t forward_workspace_size_py(nb::handle q, nb::handle k, nb::handle v, nb::handle g,
                                 nb::handle beta, nb::handle out, nb::handle A_log,
                                 nb::handle dt_bias, nb::handle cu_seqlens,
                                 nb::handle initial_state, nb::handle final_state,
                                 nb::handle state_indices, int gate_mode, double lower_bound,
                                 int beta_mode, bool l2norm_qk, double scale, int state_layout,
                                 int algorithm) {
  ForwardArgs a;
  import_forward(a, q, k, v, g, beta, out, A_log, dt_bias, cu_seqlens, nb::none(),
                 initial_state, final_state, state_indices);
  if (out.is_none()) a.t.out = a.t.v;  // a size query needs no output: v has its shape and dtype
  a.t.options = make_options(gate_mode, lower_bound, beta_mode, l2norm_qk, scale, state_layout,
                             0);
  a.t.algorithm = to_enum<Algorithm>(algorithm, "algorithm", 2);
  return forward_workspace_size(a.t);
}

void decode_py(nb::handle q, nb::handle k, nb::handle v, nb::handle g, nb::handle beta,
               nb::handle out, nb::handle A_log, nb::handle dt_bias, nb::handle state_pool,
               nb::handle slots, nb::handle num_accepted, int gate_mode, double lower_bound,
               int beta_mode, bool l2norm_qk, double scale, int state_layout,
               bool per_token_states, uintptr_t stream) {
  Importer in;
  DecodeTensors t;
  t.q = in.view(q, "q");
  t.k = in.view(k, "k");
  t.v = in.view(v, "v");
  t.g = in.view(g, "g");
  t.beta = in.view(beta, "beta");
  t.out = in.view(out, "out");
  t.A_log = in.view(A_log, "A_log");
  t.dt_bias = in.view(dt_bias, "dt_bias");
  t.state_pool = in.view(state_pool, "state_pool");
  t.slots = in.view(slots, "slots");
  t.num_accepted = in.view(num_accepted, "num_accepted");
  t.options = make_options(gate_mode, lower_bound, beta_mode, l2norm_qk, scale, state_layout,
                           stream);
  t.per_token_states = per_token_states;
  nb::gil_scoped_release release;
  decode(t);
}

}  // namespace
}  // namespace fastkda::python

NB_MODULE(_C, m) {
  using namespace fastkda;
  using namespace fastkda::python;
  m.doc() = "fastkda native extension: KDA forward and decode on DLPack tensors (CPU and CUDA)";

  // fastkda.Error: both a ValueError (bad arguments) and a RuntimeError (e.g. a CUDA tensor given
  // to a build without CUDA kernels), so either `except` clause catches it.
  PyObject* bases = PyTuple_Pack(2, PyExc_ValueError, PyExc_RuntimeError);
  PyObject* error = PyErr_NewExceptionWithDoc(
      "fastkda.Error", "Invalid argument or unsupported configuration (fastkda::Error).", bases,
      nullptr);
  Py_DECREF(bases);
  if (!error) throw nb::python_error();
  m.attr("Error") = nb::steal(error);
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const Error& e) {
          PyErr_SetString(static_cast<PyObject*>(payload), e.what());
        }
      },
      error);

  nb::enum_<GateMode>(m, "GateMode", nb::is_arithmetic())
      .value("bounded", GateMode::kBounded)
      .value("softplus", GateMode::kSoftplus)
      .value("pregated", GateMode::kPreGated);
  nb::enum_<BetaMode>(m, "BetaMode", nb::is_arithmetic())
      .value("sigmoid", BetaMode::kSigmoid)
      .value("given", BetaMode::kGiven)
      .value("two_sigmoid", BetaMode::kTwoSigmoid);
  nb::enum_<StateLayout>(m, "StateLayout", nb::is_arithmetic())
      .value("v_first", StateLayout::kVFirst)
      .value("k_first", StateLayout::kKFirst);
  nb::enum_<Algorithm>(m, "Algorithm", nb::is_arithmetic())
      .value("chunked", Algorithm::kChunked)
      .value("recurrent", Algorithm::kRecurrent);

  m.def("built_with_cuda", &built_with_cuda, "True when this build contains the CUDA kernels.");

  m.def("forward", &forward_py, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
        nb::arg("beta"), nb::arg("out"), nb::arg("A_log").none(), nb::arg("dt_bias").none(),
        nb::arg("cu_seqlens").none(), nb::arg("cu_seqlens_host").none(),
        nb::arg("initial_state").none(), nb::arg("final_state").none(),
        nb::arg("state_indices").none(), nb::arg("workspace").none(), nb::arg("gate_mode"),
        nb::arg("lower_bound"), nb::arg("beta_mode"), nb::arg("l2norm_qk"), nb::arg("scale"),
        nb::arg("state_layout"), nb::arg("algorithm"), nb::arg("stream"),
        nb::arg("alloc").none(), nb::arg("boundary_states").none() = nb::none(),
        "KDA forward: writes out (and final_state, boundary_states). Modes are the integer "
        "values of the enums.");
  m.def("forward_workspace_size", &forward_workspace_size_py, nb::arg("q"), nb::arg("k"),
        nb::arg("v"), nb::arg("g"), nb::arg("beta"), nb::arg("out").none(),
        nb::arg("A_log").none(), nb::arg("dt_bias").none(), nb::arg("cu_seqlens").none(),
        nb::arg("initial_state").none(),
        nb::arg("final_state").none(), nb::arg("state_indices").none(), nb::arg("gate_mode"),
        nb::arg("lower_bound"), nb::arg("beta_mode"), nb::arg("l2norm_qk"), nb::arg("scale"),
        nb::arg("state_layout"), nb::arg("algorithm"),
        "Bytes of CUDA workspace forward() needs for these tensors (0 on CPU).");
  m.def("decode", &decode_py, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
        nb::arg("beta"), nb::arg("out"), nb::arg("A_log").none(), nb::arg("dt_bias").none(),
        nb::arg("state_pool"), nb::arg("slots"), nb::arg("num_accepted").none(),
        nb::arg("gate_mode"), nb::arg("lower_bound"), nb::arg("beta_mode"), nb::arg("l2norm_qk"),
        nb::arg("scale"), nb::arg("state_layout"), nb::arg("per_token_states"),
        nb::arg("stream"),
        "One decode step of 1..8 tokens per sequence on a state pool, in place.");
}
