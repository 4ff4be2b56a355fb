"""Argument semantics of the Python entry points: fla keyword arguments and layouts, errors
(ValueError naming the argument, nothing written), DLPack inputs (numpy, strided views)."""

import ctypes
import subprocess
import sys
import warnings
from typing import ClassVar

import fastkda
import numpy as np
import pytest
import torch
from kda_ref import make_inputs, random_state, reference, rms_rel

H, K = 2, 64


def gate_kwargs(A_log, dt_bias):
    return dict(
        use_gate_in_kernel=True,
        A_log=A_log,
        dt_bias=dt_bias,
        use_qk_l2norm_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
    )


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(2, 19, H, H, K, K, seed=11)


# ---- fla keyword arguments --------------------------------------------------------------------


@pytest.mark.parametrize("fn", [fastkda.chunk_kda, fastkda.fused_recurrent_kda])
def test_fla_layouts_and_final_state(fn, inputs):
    q, k, v, g, beta, A_log, dt_bias = inputs
    kw = gate_kwargs(A_log, dt_bias)
    h0 = random_state(2, H, K, K)  # K-first, fla's default
    o, s = fn(q, k, v, g, beta, initial_state=h0, **kw)
    assert s is None and o.shape == v.shape  # output_final_state=False
    o_k, s_k = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, **kw)
    o_v, s_v = fn(
        q,
        k,
        v,
        g,
        beta,
        initial_state=h0.transpose(-1, -2).contiguous(),
        output_final_state=True,
        state_v_first=True,
        **kw,
    )
    assert torch.equal(o, o_k) and torch.equal(o_k, o_v)
    assert torch.equal(s_v, s_k.transpose(-1, -2))
    with pytest.warns(DeprecationWarning):
        _, s_t = fn(
            q,
            k,
            v,
            g,
            beta,
            initial_state=h0.transpose(-1, -2).contiguous(),
            output_final_state=True,
            transpose_state_layout=True,
            **kw,
        )
    assert torch.equal(s_t, s_v)
    o_ref, s_ref = reference(
        q, k, v, g, beta, gate="softplus", A_log=A_log, dt_bias=dt_bias, initial_state=h0
    )
    assert rms_rel(o_k, o_ref) <= 1e-4 and rms_rel(s_k, s_ref) <= 1e-4


def test_fla_defaults_are_pregated_given_beta_no_l2norm(inputs):
    q, k, v, g, beta, *_ = inputs
    a = torch.nn.functional.logsigmoid(g)
    b = torch.sigmoid(beta)
    qn = torch.nn.functional.normalize(q, dim=-1)
    kn = torch.nn.functional.normalize(k, dim=-1)
    o_ref, s_ref = reference(qn, kn, v, a, b, gate="pregated", beta_act="given", l2norm=False)
    for fn in (fastkda.chunk_kda, fastkda.fused_recurrent_kda):
        o, s = fn(qn, kn, v, a, b, output_final_state=True)
        assert rms_rel(o, o_ref) <= 1e-4 and rms_rel(s, s_ref) <= 1e-4


def test_fla_gate_parameter_forms(inputs):
    """dt_bias [HV * K] or [HV, K]; A_log in bf16 is accepted (converted to f32, as fla does)."""
    q, k, v, g, beta, A_log, dt_bias = inputs
    o1, _ = fastkda.chunk_kda(q, k, v, g, beta, **gate_kwargs(A_log, dt_bias))
    o2, _ = fastkda.chunk_kda(q, k, v, g, beta, **gate_kwargs(A_log, dt_bias.flatten()))
    assert torch.equal(o1, o2)
    A16 = A_log.bfloat16()
    o3, _ = fastkda.chunk_kda(q, k, v, g, beta, **gate_kwargs(A16, dt_bias))
    o4, _ = fastkda.chunk_kda(q, k, v, g, beta, **gate_kwargs(A16.float(), dt_bias))
    assert torch.equal(o3, o4)
    # positional A_log, dt_bias in fused_recurrent_kda, as in fla
    o5, _ = fastkda.fused_recurrent_kda(
        q, k, v, g, beta, A_log, dt_bias, None, None, False, True, True, True
    )
    o6, _ = fastkda.fused_recurrent_kda(q, k, v, g, beta, **gate_kwargs(A_log, dt_bias))
    assert torch.equal(o5, o6)


def test_fla_accepts_any_strided_input(inputs):
    """fla makes its inputs contiguous; its drop-ins accept what it accepts (here: batch slices
    whose batch stride is not T times the token stride)."""
    q, k, v, g, beta, A_log, dt_bias = make_inputs(2, 30, H, H, K, K, seed=12)
    sl = [x[:, 5:20] for x in (q, k, v, g, beta)]
    for fn in (fastkda.chunk_kda, fastkda.fused_recurrent_kda):
        o1, s1 = fn(*sl, output_final_state=True, **gate_kwargs(A_log, dt_bias))
        o2, s2 = fn(
            *[x.contiguous() for x in sl], output_final_state=True, **gate_kwargs(A_log, dt_bias)
        )
        assert torch.equal(o1, o2) and torch.equal(s1, s2)


def test_fla_output_dtype_follows_q():
    q, k, v, g, beta, A_log, dt_bias = make_inputs(1, 9, H, H, K, K, dtype=torch.bfloat16)
    o, s = fastkda.chunk_kda(
        q, k, v, g, beta, output_final_state=True, **gate_kwargs(A_log, dt_bias)
    )
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32


@pytest.mark.parametrize(
    "kwargs, exc, needle",
    [
        (dict(allow_neg_eigval=True), ValueError, "allow_neg_eigval"),
        (dict(use_gate_in_kernel=True), ValueError, "A_log"),
        (dict(use_gate_in_kernel=True, safe_gate=True), ValueError, "lower_bound"),
        (dict(use_gate_in_kernel=True, lower_bound=-6.0), ValueError, "lower_bound"),
        (dict(chunk_size=16), ValueError, "chunk_size"),
        (dict(return_intermediate_states=True), NotImplementedError, "return_intermediate_states"),
        (dict(no_such_argument=1), TypeError, "no_such_argument"),
        (dict(initial_state=torch.zeros(3, H, K, K)), ValueError, "initial_state"),
        (
            dict(initial_state=torch.zeros(2, H, K, K, dtype=torch.float64)),
            ValueError,
            "initial_state",
        ),
    ],
)
def test_fla_argument_errors(inputs, kwargs, exc, needle):
    q, k, v, g, beta, *_ = inputs
    with pytest.raises(exc, match=needle):
        fastkda.chunk_kda(q, k, v, g, beta, **kwargs)


# ---- bad input: ValueError naming the argument, nothing written --------------------------------


def _fwd_args(T=24, varlen=False):
    q, k, v, g, beta, A_log, dt_bias = make_inputs(
        1 if varlen else 2, T, H, H, 128, 128, seed=2, dtype=torch.bfloat16
    )
    N = 3 if varlen else 2
    args = dict(
        q=q,
        k=k,
        v=v,
        g=g,
        beta=beta,
        scale=None,
        out=torch.full_like(v, 7.0),
        A_log=A_log,
        dt_bias=dt_bias,
        lower_bound=-5.0,
        initial_state=torch.zeros(N, H, 128, 128),
        final_state=torch.full((N, H, 128, 128), 7.0),
        cu_seqlens=torch.tensor([0, 5, 5, T]) if varlen else None,
    )
    return args


BAD_FWD = {
    "dt_bias": lambda a: a.update(dt_bias=a["dt_bias"].half()),
    "dt_bias ": lambda a: a.update(dt_bias=a["dt_bias"][:, :64].contiguous()),
    "A_log": lambda a: a.update(A_log=torch.zeros(H + 1)),
    "lower_bound": lambda a: a.update(lower_bound=-6.0),
    "q": lambda a: a.update(q=a["q"].half()),
    "v": lambda a: a.update(v=a["v"].float()),
    "beta": lambda a: a.update(beta=a["beta"][:, :, :1]),
    "out": lambda a: a.update(out=a["out"].transpose(1, 2).contiguous().transpose(1, 2)),
    "k: expected the dims after the token dim to be contiguous": lambda a: a.update(
        k=a["k"].transpose(2, 3).contiguous().transpose(2, 3)
    ),
    "final_state": lambda a: a.update(final_state=a["final_state"][:1]),
    "initial_state": lambda a: a.update(initial_state=a["initial_state"].double()),
    "g": lambda a: a.update(g=[1, 2, 3]),
}

BAD_FWD_VARLEN = {
    "cu_seqlens": lambda a: a.update(cu_seqlens=torch.tensor([0, 5, 5, 23])),
    "cu_seqlens ": lambda a: a.update(cu_seqlens=torch.tensor([0, 9, 5, 24])),
    "cu_seqlens  ": lambda a: a.update(cu_seqlens=torch.tensor([1, 5, 5, 24])),
    "cu_seqlens   ": lambda a: a.update(cu_seqlens=torch.tensor([0, 5, 5, 24]).float()),
    "B = 1": lambda a: [
        a.update({n: torch.cat([a[n], a[n]])}) for n in ("q", "k", "v", "g", "beta", "out")
    ],
}


@pytest.mark.parametrize(
    "varlen, needle", [(False, n) for n in BAD_FWD] + [(True, n) for n in BAD_FWD_VARLEN]
)
def test_bad_input_names_argument_and_writes_nothing(varlen, needle):
    args = _fwd_args(varlen=varlen)
    (BAD_FWD_VARLEN if varlen else BAD_FWD)[needle](args)
    out, final = args["out"], args["final_state"]
    out_before, final_before = out.clone(), final.clone()
    with pytest.raises(ValueError, match=needle.strip()) as info:
        fastkda.fwd(**args)
    print(info.value)
    assert str(info.value).startswith("fastkda: ")
    assert torch.equal(out, out_before) and torch.equal(final, final_before)


def test_good_fwd_args_work():  # the baseline of the bad-input test
    for varlen in (False, True):
        args = _fwd_args(varlen=varlen)
        fastkda.fwd(**args)
        assert not torch.equal(args["out"], torch.full_like(args["out"], 7.0))


def test_unsupported_head_dim():
    q, k, v, g, beta, *_ = make_inputs(1, 3, H, H, 32, 64)
    with pytest.raises(ValueError, match="K: expected 64, 128 or 256, got 32"):
        fastkda.chunk_kda(q, k, v, g, beta)


def test_string_option_errors():
    q, k, v, g, beta, *_ = make_inputs(1, 3, H, H, K, K)
    for kw, needle in (
        (dict(gate="nope"), "gate"),
        (dict(beta_act=1), "beta_act"),
        (dict(state_layout="kv"), "state_layout"),
        (dict(algorithm="fast"), "algorithm"),
    ):
        with pytest.raises(ValueError, match=needle):
            fastkda.forward(q, k, v, g, beta, **kw)


# ---- DLPack: numpy arrays, strided views --------------------------------------------------------


def test_numpy_inputs_match_torch(inputs):
    q, k, v, g, beta, A_log, dt_bias = inputs
    kw = dict(A_log=A_log, dt_bias=dt_bias, gate="softplus")
    o_t = fastkda.forward(q, k, v, g, beta, **kw)
    arrays = [x.numpy() for x in (q, k, v, g, beta)]
    o_n = fastkda.forward(*arrays, A_log=A_log.numpy(), dt_bias=dt_bias.numpy(), gate="softplus")
    assert isinstance(o_n, np.ndarray) and o_n.dtype == np.float32
    np.testing.assert_array_equal(o_n, o_t.numpy())
    o_f, s_f = fastkda.chunk_kda(
        *arrays, output_final_state=True, **gate_kwargs(A_log.numpy(), dt_bias.numpy())
    )
    o_c, s_c = fastkda.chunk_kda(
        q, k, v, g, beta, output_final_state=True, **gate_kwargs(A_log, dt_bias)
    )
    np.testing.assert_array_equal(o_f, o_c.numpy())
    np.testing.assert_array_equal(s_f, s_c.numpy())


def test_strided_views_of_a_fused_projection():
    """q, k, v, g, beta as column slices of one [B, T, width] projection (token stride > dense)."""
    B, T, HV, V = 2, 33, 4, 64
    widths = [H * K, H * K, HV * V, HV * K, HV]
    proj = torch.randn(B, T, sum(widths) + 8)
    views, c = [], 0
    for w, shape in zip(widths, [(H, K), (H, K), (HV, V), (HV, K), (HV,)]):
        views.append(
            proj[:, :, c : c + w].unflatten(-1, shape) if len(shape) > 1 else proj[:, :, c : c + w]
        )
        c += w
    assert not views[0].is_contiguous()
    _, _, _, _, _, A_log, dt_bias = make_inputs(B, T, H, HV, K, V)
    kw = dict(A_log=A_log, dt_bias=dt_bias, gate="bounded", lower_bound=-4.0)
    for algorithm in ("chunked", "recurrent"):
        o_view = fastkda.forward(*views, algorithm=algorithm, **kw)
        o_dense = fastkda.forward(*[x.contiguous() for x in views], algorithm=algorithm, **kw)
        assert torch.equal(o_view, o_dense)


# ---- CUDA tensors on a build without CUDA kernels ---------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaArray:
    """Host memory that describes itself through DLPack as a CUDA tensor. Never dereferenced:
    the extension must reject it (built without CUDA) before reading anything."""

    _DTYPES: ClassVar[dict] = {
        torch.bfloat16: (4, 16),
        torch.float32: (2, 32),
        torch.int32: (0, 32),
        torch.int64: (0, 64),
    }

    def __init__(self, host):
        self.host = host
        self.shape = tuple(host.shape)
        self._shape = (ctypes.c_int64 * host.ndim)(*host.shape)
        self._strides = (ctypes.c_int64 * host.ndim)(*host.stride())
        self._managed = []

    def __dlpack__(self, **kwargs):
        mt = _DLManagedTensor()
        dl = mt.dl_tensor
        dl.data = self.host.data_ptr()
        dl.device = _DLDevice(2, 0)  # kDLCUDA
        dl.ndim = self.host.ndim
        code, bits = self._DTYPES[self.host.dtype]
        dl.dtype = _DLDataType(code, bits, 1)
        dl.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        dl.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        self._managed.append(mt)  # alive as long as this object
        return _capsule_new(ctypes.addressof(mt), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def test_cuda_tensors_without_cuda_build():
    if fastkda.built_with_cuda():
        pytest.skip("this build has the CUDA kernels")
    args = _fwd_args()
    fake = {n: FakeCudaArray(x) if isinstance(x, torch.Tensor) else x for n, x in args.items()}
    with pytest.raises(RuntimeError, match="built without CUDA kernels"):
        fastkda.fwd(**fake)
    assert torch.equal(args["out"], torch.full_like(args["out"], 7.0))
    q, k, v, g, beta = (FakeCudaArray(x) for x in make_inputs(2, 1, H, H, K, K)[:5])
    pool = FakeCudaArray(torch.zeros(4, H, K, K))
    slots = FakeCudaArray(torch.zeros(2, dtype=torch.int32))
    out = FakeCudaArray(torch.zeros(2, 1, H, K))
    with pytest.raises(RuntimeError, match="built without CUDA kernels"):
        fastkda.decode_step(q, k, v, g, beta, pool, slots, out=out, gate="pregated")


# ---- import without torch -----------------------------------------------------------------------


def test_package_works_without_torch():
    code = """
import sys
sys.modules["torch"] = None  # make `import torch` fail
import numpy as np
import fastkda
assert fastkda._core.torch is None
rng = np.random.default_rng(0)
q, k = (rng.standard_normal((1, 8, 1, 64), dtype=np.float32) for _ in range(2))
v = rng.standard_normal((1, 8, 1, 64), dtype=np.float32)
g = -rng.random((1, 8, 1, 64), dtype=np.float32)
beta = rng.random((1, 8, 1), dtype=np.float32)
o, s = fastkda.chunk_kda(q, k, v, g, beta, output_final_state=True)
assert o.shape == v.shape and s.shape == (1, 1, 64, 64) and np.isfinite(o).all()
try:
    fastkda.forward(q, k, v, g, beta, gate="pregated", state_layout="diagonal")
except ValueError as e:
    assert "state_layout" in str(e)
else:
    raise AssertionError("no error")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_no_warnings_on_plain_calls(inputs):
    q, k, v, g, beta, A_log, dt_bias = inputs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fastkda.chunk_kda(q, k, v, g, beta, **gate_kwargs(A_log, dt_bias))
