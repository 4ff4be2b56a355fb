"""Drop-in entry points: FlashKDA's flash_kda.fwd and fla's chunk_kda /
fused_recurrent_kda (flash-linear-attention 0.6.0 keyword arguments and defaults).

Forward only: the outputs carry no autograd history.
"""

from __future__ import annotations

import warnings

from ._core import (
    ALGORITHMS,
    BETA_MODES,
    GATE_MODES,
    STATE_LAYOUTS,
    DecodeOptions,
    DecodeTensors,
    Error,
    ForwardOptions,
    ForwardTensors,
    bound,
    empty,
    is_torch,
    run_decode,
    run_forward,
    torch,
)

_BOUNDED, _SOFTPLUS, _PREGATED = (GATE_MODES[m] for m in ("bounded", "softplus", "pregated"))
_V_FIRST, _K_FIRST = STATE_LAYOUTS["v_first"], STATE_LAYOUTS["k_first"]


def fwd(
    q,
    k,
    v,
    g,
    beta,
    scale,
    out,
    A_log,
    dt_bias,
    lower_bound,
    initial_state=None,
    final_state=None,
    cu_seqlens=None,
    *,
    cu_seqlens_host=None,
    workspace=None,
    stream=None,
):
    """FlashKDA forward (flash_kda.fwd semantics), writing out and final_state in place.

    q, k [B, T, H, K], v [B, T, HV, V], g [B, T, HV, K] raw gate, beta [B, T, HV] logits (sigmoid
    applied inside), out [B, T, HV, V]; bf16 (f32 also accepted on CPU); K = V = 128 on CUDA.
    Gate: a = lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), A_log [HV] f32, dt_bias [HV, K]
    f32, lower_bound in [-5, 0). q and k are l2-normalised inside. scale: float (None: K^-1/2).
    initial_state / final_state [N, HV, V, K] (V-first), bf16 or f32 each; an f32 state stays f32.
    cu_seqlens [N + 1] int64 (int32 also accepted) with B == 1. Extensions: GVA (HV > H),
    cu_seqlens_host (CPU copy of a CUDA cu_seqlens, validated), workspace, stream.
    """
    run_forward(
        ForwardTensors(
            q,
            k,
            v,
            g,
            beta,
            out,
            A_log,
            dt_bias,
            cu_seqlens,
            cu_seqlens_host,
            initial_state,
            final_state,
            None,
            workspace,
        ),
        ForwardOptions(
            _BOUNDED,
            bound(lower_bound),
            BETA_MODES["sigmoid"],
            True,
            0.0 if scale is None else float(scale),
            _V_FIRST,
            ALGORITHMS["chunked"],
        ),
        stream,
    )


# ---- fla --------------------------------------------------------------------------------------


def _state_v_first(kwargs, state_v_first):
    if "transpose_state_layout" in kwargs:  # fla's deprecated name
        if state_v_first:
            raise ValueError(
                "Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`."
            )
        warnings.warn(
            "`transpose_state_layout` is deprecated and renamed to `state_v_first`.",
            DeprecationWarning,
            stacklevel=3,
        )
        state_v_first = kwargs.pop("transpose_state_layout")
    return bool(state_v_first)


def _f32(x):
    """fla accepts A_log / dt_bias in any float dtype; the kernels take f32."""
    if x is not None and is_torch(x) and x.dtype != torch.float32:
        return x.float()
    return x


def _dense(*xs):
    """fla makes every tensor argument contiguous (input_guard); so do its drop-ins. (fastkda's
    own entry points take strided views, e.g. slices of a fused projection, without a copy.)"""
    return [x.contiguous() if is_torch(x) and not x.is_contiguous() else x for x in xs]


def _gate(use_gate_in_kernel, lower_bound, A_log, dt_bias, safe_gate):
    """fla's gate flags -> (gate mode, A_log, dt_bias, lower bound)."""
    if not use_gate_in_kernel:
        return _PREGATED, None, None, 0.0  # g is the log-decay; fla ignores A_log / dt_bias
    if lower_bound is not None:
        return _BOUNDED, _f32(A_log), _f32(dt_bias), float(lower_bound)
    if safe_gate:
        raise Error(
            "fastkda: lower_bound: expected a value when safe_gate=True and "
            "use_gate_in_kernel=True, got None"
        )
    if A_log is None:
        raise Error(
            "fastkda: A_log: expected a tensor when use_gate_in_kernel=True and "
            "lower_bound is not set (softplus gate), got None"
        )
    return _SOFTPLUS, _f32(A_log), _f32(dt_bias), 0.0


def _beta(use_beta_sigmoid_in_kernel, allow_neg_eigval):
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise Error(
            "fastkda: allow_neg_eigval: expected use_beta_sigmoid_in_kernel=True with "
            "allow_neg_eigval=True, got use_beta_sigmoid_in_kernel=False"
        )
    if not use_beta_sigmoid_in_kernel:
        return BETA_MODES["given"]
    return BETA_MODES["two_sigmoid" if allow_neg_eigval else "sigmoid"]


def _state_shape(N, HV, K, V, v_first):
    return (N, HV, V, K) if v_first else (N, HV, K, V)


def _fla_forward(
    q,
    k,
    v,
    g,
    beta,
    scale,
    initial_state,
    output_final_state,
    l2norm,
    gate,
    beta_mode,
    v_first,
    cu_seqlens,
    cu_seqlens_host,
    algorithm,
):
    gate_mode, A_log, dt_bias, lower_bound = gate
    q, k, v, g, beta, A_log, dt_bias, initial_state = _dense(
        q, k, v, g, beta, A_log, dt_bias, initial_state
    )
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    out = empty(q, v.shape)
    final_state = None
    if output_final_state:
        final_state = empty(
            q, _state_shape(N, v.shape[2], q.shape[3], v.shape[3], v_first), "float32"
        )
    run_forward(
        ForwardTensors(
            q,
            k,
            v,
            g,
            beta,
            out,
            A_log,
            dt_bias,
            cu_seqlens,
            cu_seqlens_host,
            initial_state,
            final_state,
            None,
            None,
        ),
        ForwardOptions(
            gate_mode,
            lower_bound,
            beta_mode,
            bool(l2norm),
            0.0 if scale is None else float(scale),
            _V_FIRST if v_first else _K_FIRST,
            algorithm,
        ),
    )
    return out, final_state


_CHUNK_ONLY_KWARGS = (
    "safe_gate",
    "chunk_size",
    "disable_recompute",
    "use_graph",
    "max_num_seqs",
    "cu_seqlens_cpu",
)


def _check_kwargs(name, kwargs):
    if kwargs:
        raise TypeError(f"{name}() got unexpected keyword arguments {sorted(kwargs)}")


def chunk_kda(
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
    use_gate_in_kernel=False,
    use_beta_sigmoid_in_kernel=False,
    allow_neg_eigval=False,
    safe_gate=False,
    lower_bound=None,
    disable_recompute=False,
    return_intermediate_states=False,
    state_v_first=False,
    cu_seqlens=None,
    cu_seqlens_cpu=None,
    cp_context=None,
    use_graph=False,
    max_num_seqs=None,
    **kwargs,
):
    """fla.ops.kda.chunk_kda (0.6.0) on fastkda's chunked kernels. Returns (o, final_state).

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K]; beta [B, T, HV]; o [B, T, HV, V] in q's
    dtype. Gate: use_gate_in_kernel=False -> g is the log-decay; True -> g is raw:
    lower_bound * sigmoid(exp(A_log) * (g + dt_bias)) when lower_bound is set (A_log may be None),
    else -exp(A_log) * softplus(g + dt_bias). A_log [HV], dt_bias [HV * K] or [HV, K] (keyword
    arguments, as in fla). Beta: logits with use_beta_sigmoid_in_kernel (2 sigmoid with
    allow_neg_eigval), else used as given. States [N, HV, K, V] (fla's default), or [N, HV, V, K]
    with state_v_first; the final state is f32 (None unless output_final_state).
    disable_recompute, use_graph, max_num_seqs and chunk_size are accepted and have no effect
    (the kernels are forward-only and CUDA-graph safe); cu_seqlens_cpu lets a CUDA cu_seqlens
    be validated. Not supported: return_intermediate_states, cp_context.
    """
    A_log, dt_bias = kwargs.pop("A_log", None), kwargs.pop("dt_bias", None)
    state_v_first = _state_v_first(kwargs, state_v_first)
    chunk_size = kwargs.pop("chunk_size", 64)
    if chunk_size not in (32, 64):
        raise Error(f"fastkda: chunk_size: expected 32 or 64 (fla), got {chunk_size}")
    _check_kwargs("chunk_kda", kwargs)
    if return_intermediate_states:
        raise NotImplementedError("fastkda: chunk_kda: return_intermediate_states is not supported")
    if cp_context is not None:
        raise NotImplementedError(
            "fastkda: chunk_kda: context parallelism (cp_context) is not supported"
        )
    del disable_recompute, use_graph, max_num_seqs
    return _fla_forward(
        q,
        k,
        v,
        g,
        beta,
        scale,
        initial_state,
        output_final_state,
        use_qk_l2norm_in_kernel,
        _gate(use_gate_in_kernel, lower_bound, A_log, dt_bias, safe_gate),
        _beta(use_beta_sigmoid_in_kernel, allow_neg_eigval),
        state_v_first,
        cu_seqlens,
        cu_seqlens_cpu,
        ALGORITHMS["chunked"],
    )


def fused_recurrent_kda(
    q,
    k,
    v,
    g,
    beta,
    A_log=None,
    dt_bias=None,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
    use_gate_in_kernel=False,
    use_beta_sigmoid_in_kernel=False,
    allow_neg_eigval=False,
    lower_bound=None,
    state_v_first=False,
    cu_seqlens=None,
    **kwargs,
):
    """fla.ops.kda.fused_recurrent_kda (0.6.0): the token-by-token recurrence. Returns
    (o, final_state); arguments as chunk_kda (A_log and dt_bias positional here, as in fla).

    CPU: fastkda's fp64 recurrence (the oracle). CUDA: the decode kernel when cu_seqlens is None
    and T <= 8 (the serving use of fused_recurrent_kda); longer inputs raise a clear error (use
    chunk_kda).
    """
    state_v_first = _state_v_first(kwargs, state_v_first)
    for name in _CHUNK_ONLY_KWARGS:  # fla ignores them here too (callers switch between the two)
        kwargs.pop(name, None)
    _check_kwargs("fused_recurrent_kda", kwargs)
    gate = _gate(use_gate_in_kernel, lower_bound, A_log, dt_bias, False)
    beta_mode = _beta(use_beta_sigmoid_in_kernel, allow_neg_eigval)
    if is_torch(q) and q.is_cuda and cu_seqlens is None and 1 <= q.shape[1] <= 8:
        return _recurrent_by_decode(
            q,
            k,
            v,
            g,
            beta,
            scale,
            initial_state,
            output_final_state,
            use_qk_l2norm_in_kernel,
            gate,
            beta_mode,
            state_v_first,
        )
    return _fla_forward(
        q,
        k,
        v,
        g,
        beta,
        scale,
        initial_state,
        output_final_state,
        use_qk_l2norm_in_kernel,
        gate,
        beta_mode,
        state_v_first,
        cu_seqlens,
        None,
        ALGORITHMS["recurrent"],
    )


def _recurrent_by_decode(
    q, k, v, g, beta, scale, initial_state, output_final_state, l2norm, gate, beta_mode, v_first
):
    """A few tokens per sequence on CUDA: the decode kernel on a private f32 state pool."""
    gate_mode, A_log, dt_bias, lower_bound = gate
    q, k, v, g, beta, A_log, dt_bias = _dense(q, k, v, g, beta, A_log, dt_bias)
    N, HV = q.shape[0], v.shape[2]
    shape = _state_shape(N, HV, q.shape[3], v.shape[3], v_first)
    if initial_state is None:
        pool = torch.zeros(shape, dtype=torch.float32, device=q.device)
    else:
        if tuple(initial_state.shape) != shape:
            raise Error(
                f"fastkda: initial_state: expected shape {list(shape)} "
                f"({'[N, HV, V, K]' if v_first else '[N, HV, K, V]'}), got "
                f"{list(initial_state.shape)}"
            )
        pool = initial_state.to(device=q.device, dtype=torch.float32, copy=True)
    slots = torch.arange(N, dtype=torch.int32, device=q.device)
    out = torch.empty_like(v)
    run_decode(
        DecodeTensors(q, k, v, g, beta, out, A_log, dt_bias, pool, slots, None),
        DecodeOptions(
            gate_mode,
            lower_bound,
            beta_mode,
            bool(l2norm),
            0.0 if scale is None else float(scale),
            _V_FIRST if v_first else _K_FIRST,
            False,
        ),
    )
    return out, (pool if output_final_state else None)
