"""Shared helpers of the Python tests: random KDA inputs and the reference built from code nobody
here wrote, fla's torch references (fla.ops.kda.naive.naive_recurrent_kda and the gate references
of fla.ops.kda.gate), run in float64.

fla's naive recurrence casts its inputs with `x.to(torch.float)`; the reference runs an unmodified
copy of that function whose global `torch` maps `torch.float` to float64 (fla itself is untouched),
so the reference is an fp64 recurrence. Its gate references compute in float32, which perturbs the
log-decay by ~1e-7 relative: far below the tolerances used here.
"""

from __future__ import annotations

import math
import types

import torch
from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate
from fla.ops.kda.naive import naive_recurrent_kda


class _TorchFloat64:
    """`torch`, except that torch.float is float64."""

    float = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


naive_recurrent_kda_f64 = types.FunctionType(
    naive_recurrent_kda.__code__,
    {**naive_recurrent_kda.__globals__, "torch": _TorchFloat64()},
    naive_recurrent_kda.__name__,
    naive_recurrent_kda.__defaults__,
    naive_recurrent_kda.__closure__,
)


def rms_rel(x, ref) -> float:
    """RMS-relative error ||x - ref|| / ||ref|| in float64."""
    x, ref = torch.as_tensor(x).double(), torch.as_tensor(ref).double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def make_inputs(B, T, H, HV, K, V, *, seed=0, dtype=torch.float32):
    """q, k, v, raw g, beta logits, A_log [HV], dt_bias [HV, K] as a model initialises them
    (A = exp(A_log) ~ U(1, 16); dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1])."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    q, k = randn(B, T, H, K), randn(B, T, H, K)
    v = randn(B, T, HV, V)
    g = randn(B, T, HV, K)
    beta = randn(B, T, HV)
    A_log = torch.empty(HV).uniform_(1, 16, generator=gen).log()
    dt = torch.exp(torch.empty(HV, K).uniform_(math.log(1e-3), math.log(0.1), generator=gen))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    cast = [x.to(dtype) for x in (q, k, v, g, beta)]
    return (*cast, A_log, dt_bias)


def random_state(N, HV, K, V, *, seed=1, v_first=False):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(N, HV, K, V, generator=gen) * 0.1
    return s.transpose(-1, -2).contiguous() if v_first else s


def reference(
    q,
    k,
    v,
    g,
    beta,
    *,
    gate="bounded",
    A_log=None,
    dt_bias=None,
    lower_bound=-5.0,
    beta_act="sigmoid",
    l2norm=True,
    scale=None,
    initial_state=None,
    cu_seqlens=None,
):
    """fp64 KDA forward via fla's references. States K-first [N, HV, K, V]. Returns (o, S)."""
    if gate == "softplus":
        a = naive_kda_gate(g, A_log, dt_bias)
    elif gate == "bounded":
        a = naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound)
    else:
        a = g
    q, k, v, a, b = (x.double() for x in (q, k, v, a, beta))
    if l2norm:  # DESIGN §2 / fla's l2norm kernel: x / sqrt(sum x^2 + 1e-6)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    if beta_act == "sigmoid":
        b = torch.sigmoid(b)
    elif beta_act == "two_sigmoid":
        b = 2 * torch.sigmoid(b)
    h0 = None if initial_state is None else initial_state.double()
    if cu_seqlens is None:
        return naive_recurrent_kda_f64(q, k, v, a, b, scale, h0, True)
    outs, states = [], []
    cu = [int(x) for x in cu_seqlens]
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        h0n = None if h0 is None else h0[n : n + 1]
        o, S = naive_recurrent_kda_f64(
            q[:, s:e], k[:, s:e], v[:, s:e], a[:, s:e], b[:, s:e], scale, h0n, True
        )
        outs.append(o)
        states.append(S)
    return torch.cat(outs, 1), torch.cat(states, 0)
