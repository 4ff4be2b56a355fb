"""fastkda's fla-compatible entry points against fla's own torch references (fp64).

Both fastkda paths are checked on every case: fused_recurrent_kda (on CPU: fastkda's fp64 token
recurrence, the oracle) and chunk_kda (the fp32 chunked form), with float32 inputs.
"""

import fastkda
import pytest
import torch
from kda_ref import make_inputs, random_state, reference, rms_rel

TOL = 1e-4  # RMS-relative, out and final state
# The fp64 recurrence differs from fla's fp64 recurrence only by the f32 rounding of its outputs
# and of fla's f32 gate references: hold it to a much tighter bound.
TOL_RECURRENT = 1e-6

# name: (B, T, H, HV, K, V, gate, beta_act, l2norm, with h0, state_v_first, cu_seqlens)
CASES = {
    "bounded": (2, 37, 2, 2, 64, 64, "bounded", "sigmoid", True, True, False, None),
    "softplus_gva": (1, 70, 2, 4, 64, 128, "softplus", "sigmoid", True, True, True, None),
    "pregated_k256": (2, 21, 1, 2, 256, 64, "pregated", "given", False, False, False, None),
    "bounded_no_A_neg_eigval": (
        1,
        45,
        2,
        2,
        128,
        128,
        "bounded_no_A",
        "two_sigmoid",
        True,
        True,
        True,
        None,
    ),
    "varlen_gva_i64": (
        1,
        90,
        2,
        4,
        64,
        64,
        "softplus",
        "sigmoid",
        True,
        True,
        False,
        [0, 17, 17, 40, 41, 90],
    ),
    "varlen_i32_vfirst": (
        1,
        66,
        1,
        1,
        64,
        64,
        "bounded",
        "sigmoid",
        True,
        False,
        True,
        [0, 1, 30, 66],
    ),
}


def fla_kwargs(gate, beta_act, l2norm, A_log, dt_bias):
    kw = dict(
        use_qk_l2norm_in_kernel=l2norm,
        use_beta_sigmoid_in_kernel=beta_act != "given",
        allow_neg_eigval=beta_act == "two_sigmoid",
    )
    if gate == "softplus":
        kw.update(use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias.flatten())
    elif gate == "bounded":
        kw.update(
            use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0, safe_gate=True
        )
    elif gate == "bounded_no_A":
        kw.update(use_gate_in_kernel=True, dt_bias=dt_bias, lower_bound=-3.0)
    return kw


@pytest.mark.parametrize("name", list(CASES))
def test_against_fla_naive(name):
    B, T, H, HV, K, V, gate, beta_act, l2norm, with_h0, v_first, cu = CASES[name]
    q, k, v, g, beta, A_log, dt_bias = make_inputs(B, T, H, HV, K, V, seed=len(name))
    if gate == "pregated":  # g is the log-decay, beta is given, q and k arrive normalised
        g = torch.nn.functional.logsigmoid(g + 2.0)
        beta = torch.rand(beta.shape)
        q = torch.nn.functional.normalize(q, dim=-1)
        k = torch.nn.functional.normalize(k, dim=-1)
    N = B if cu is None else len(cu) - 1
    h0_kfirst = random_state(N, HV, K, V) if with_h0 else None
    ref_gate = {"bounded_no_A": "bounded"}.get(gate, gate)
    o_ref, s_ref = reference(
        q,
        k,
        v,
        g,
        beta,
        gate=ref_gate,
        A_log=None if gate == "bounded_no_A" else A_log,
        dt_bias=dt_bias,
        lower_bound=-3.0 if gate == "bounded_no_A" else -5.0,
        beta_act=beta_act,
        l2norm=l2norm,
        initial_state=h0_kfirst,
        cu_seqlens=cu,
    )

    h0 = None
    if with_h0:
        h0 = h0_kfirst.transpose(-1, -2).contiguous() if v_first else h0_kfirst
    kw = fla_kwargs(gate, beta_act, l2norm, A_log, dt_bias)
    cu_t = None
    if cu is not None:
        cu_t = torch.tensor(cu, dtype=torch.int32 if "i32" in name else torch.int64)
    for fn in (fastkda.fused_recurrent_kda, fastkda.chunk_kda):
        o, s = fn(
            q,
            k,
            v,
            g,
            beta,
            initial_state=h0,
            output_final_state=True,
            state_v_first=v_first,
            cu_seqlens=cu_t,
            **kw,
        )
        assert o.dtype == torch.float32 and o.shape == v.shape
        assert s.dtype == torch.float32
        s_kfirst = s.transpose(-1, -2) if v_first else s
        err_o, err_s = rms_rel(o, o_ref), rms_rel(s_kfirst, s_ref)
        print(f"{name} {fn.__name__}: out {err_o:.2e}  state {err_s:.2e}")
        tol = TOL_RECURRENT if fn is fastkda.fused_recurrent_kda else TOL
        assert err_o <= tol, (fn.__name__, err_o)
        assert err_s <= tol, (fn.__name__, err_s)


def test_reference_is_fp64():
    q, k, v, g, beta, A_log, dt_bias = make_inputs(1, 4, 1, 1, 64, 64)
    o, s = reference(q, k, v, g, beta, gate="softplus", A_log=A_log, dt_bias=dt_bias)
    assert o.dtype == torch.float64 and s.dtype == torch.float64


def test_gates_match_fla_gate_references():
    """Raw gate through fastkda (pre-gated identity vs in-kernel gate) equals fla's gate refs."""
    B, T, H, K, V = 1, 12, 2, 64, 64
    q, k, v, g, beta, A_log, dt_bias = make_inputs(B, T, H, H, K, V, seed=5)
    for gate_kw, ref_gate in (
        (dict(A_log=A_log, dt_bias=dt_bias.flatten()), "softplus"),
        (dict(A_log=A_log, dt_bias=dt_bias, lower_bound=-4.0), "bounded"),
        (dict(dt_bias=dt_bias, lower_bound=-1.0), "bounded_no_A"),
    ):
        o, _ = fastkda.fused_recurrent_kda(
            q,
            k,
            v,
            g,
            beta,
            use_gate_in_kernel=True,
            use_qk_l2norm_in_kernel=True,
            use_beta_sigmoid_in_kernel=True,
            **gate_kw,
        )
        o_ref, _ = reference(
            q,
            k,
            v,
            g,
            beta,
            gate="bounded" if "bounded" in ref_gate else ref_gate,
            A_log=gate_kw.get("A_log"),
            dt_bias=gate_kw["dt_bias"],
            lower_bound=gate_kw.get("lower_bound", -5.0),
        )
        assert rms_rel(o, o_ref) <= 1e-5, ref_gate
