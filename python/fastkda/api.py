"""fastkda's own entry points: the general forward, prefill on a state pool, the decode step.

Tensors: torch tensors (CPU or CUDA) or any DLPack / buffer-protocol array (numpy: CPU, f32 io).
Shapes use the dimension letters of fastkda.h: B batch rows, T tokens (packed total with
cu_seqlens), N sequences, H q/k heads, HV value heads (HV % H == 0), K key dim, V value dim.

Options (strings):
  gate      "bounded":  a = lower_bound * sigmoid(exp(A_log) * (g + dt_bias)),
                        lower_bound in [-5, 0)
            "softplus": a = -exp(A_log) * softplus(g + dt_bias)
            "pregated": a = g (the caller's log-decay, <= 0); A_log and dt_bias must be None
            (A_log None: A = 1; dt_bias None: 0)
  beta_act  "sigmoid" (beta are logits), "given" (used as is), "two_sigmoid" (2 sigmoid(beta))
  state_layout "v_first" ([.., HV, V, K]: serving pools, FlashKDA) or
            "k_first" ([.., HV, K, V]: fla)
  algorithm "chunked" (fp32 on CPU, the Hopper kernels on CUDA) or "recurrent" (the fp64 token
            recurrence, CPU only)
Errors: fastkda.Error (a ValueError and a RuntimeError) naming the argument, raised before
anything is written.
"""

from __future__ import annotations

from . import _C, _core
from ._core import (
    BETA_MODES,
    GATE_MODES,
    STATE_LAYOUTS,
    DecodeOptions,
    DecodeTensors,
    ForwardTensors,
    code,
    empty,
    forward_options,
    run_decode,
    run_forward,
    run_forward_pool,
)


def forward(
    q,
    k,
    v,
    g,
    beta,
    *,
    out=None,
    A_log=None,
    dt_bias=None,
    gate="bounded",
    lower_bound=-5.0,
    beta_act="sigmoid",
    l2norm_qk=True,
    scale=None,
    cu_seqlens=None,
    cu_seqlens_host=None,
    initial_state=None,
    final_state=None,
    state_indices=None,
    state_layout="v_first",
    algorithm="chunked",
    workspace=None,
    stream=None,
):
    """KDA forward (prefill). Returns out.

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K]; beta [B, T, HV]; out [B, T, HV, V]
    (allocated with q's dtype when None, else written in place). A_log [HV] f32, dt_bias [HV, K]
    or [HV * K] f32. cu_seqlens [N + 1] int32/int64 (then B == 1); cu_seqlens_host: optional CPU
    copy of a CUDA cu_seqlens (enables its validation). initial_state / final_state
    [N, HV, V, K] (v_first) or [N, HV, K, V], f32 or bf16, final_state written in place; with
    state_indices [N] int32 they are pools [slots, HV, ..] indexed per sequence (negative index:
    zeros in, nothing written). workspace: CUDA scratch (default: allocated through torch's
    caching allocator). stream: CUDA stream (int or torch.cuda.Stream; default: torch's current).
    """
    if out is None:
        out = empty(q, v.shape)
    t = ForwardTensors(
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
        state_indices,
        workspace,
    )
    o = forward_options(gate, lower_bound, beta_act, l2norm_qk, scale, state_layout, algorithm)
    run_forward(t, o, stream)
    return out


def prefill(
    q,
    k,
    v,
    g,
    beta,
    state_pool,
    state_indices,
    *,
    cu_seqlens=None,
    cu_seqlens_host=None,
    out=None,
    A_log=None,
    dt_bias=None,
    gate="bounded",
    lower_bound=-5.0,
    beta_act="sigmoid",
    l2norm_qk=True,
    scale=None,
    state_layout="v_first",
    workspace=None,
    stream=None,
    boundary_states=None,
):
    """Chunked prefill on a serving state pool, in place. Returns out.

    Sequence n starts from state_pool[state_indices[n]] and its final state is written back to the
    same row; a negative index starts from zeros and writes nothing. state_pool
    [slots, HV, V, K] (v_first, default) or [slots, HV, K, V], f32 or bf16; state_indices [N]
    int32. Packed sequences: q [1, T, H, K] with cu_seqlens [N + 1]; without cu_seqlens N = B.

    boundary_states (optional, [rows, HV, V, K] or [rows, HV, K, V], f32 or bf16) receives the state
    of sequence n before its token 64*j in row sum_{m<n} ceil(L_m / 64) + j (fla's `h` convention,
    for prefix caching); rows must equal sum_n ceil(L_n / 64).
    """
    if out is None:
        out = empty(q, v.shape)
    t = ForwardTensors(
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
        state_pool,
        state_pool,
        state_indices,
        workspace,
    )
    o = forward_options(gate, lower_bound, beta_act, l2norm_qk, scale, state_layout, "chunked")
    run_forward_pool(t, o, stream, boundary_states)
    return out


def decode_step(
    q,
    k,
    v,
    g,
    beta,
    state_pool,
    slots,
    *,
    out=None,
    A_log=None,
    dt_bias=None,
    gate="bounded",
    lower_bound=-5.0,
    beta_act="sigmoid",
    l2norm_qk=True,
    scale=None,
    state_layout="v_first",
    per_token_states=False,
    num_accepted=None,
    stream=None,
):
    """One decode step of 1..8 tokens per sequence on a state pool, in place. Returns out.

    q, k [N, tokens, H, K]; v [N, tokens, HV, V]; g [N, tokens, HV, K]; beta [N, tokens, HV];
    out [N, tokens, HV, V] (pass it to avoid an allocation per step). state_pool
    [slots, HV, V, K] (v_first) or [slots, HV, K, V], f32 or bf16, updated in place.
    slots: int32 [N] (read and written back), or [N, S] with per_token_states: the state after
    token t goes to slots[n, t] and the initial state is read from slots[n, num_accepted[n] - 1]
    (column 0 without num_accepted; fla's speculative-decoding convention). A negative read slot
    marks a padding row (nothing read or written, out = 0); a negative write slot skips the write.
    """
    if out is None:
        out = empty(q, v.shape)
    try:
        gate_mode = GATE_MODES[gate]
        beta_mode = BETA_MODES[beta_act]
        layout = STATE_LAYOUTS[state_layout]
    except (KeyError, TypeError):
        gate_mode = code(GATE_MODES, gate, "gate")
        beta_mode = code(BETA_MODES, beta_act, "beta_act")
        layout = code(STATE_LAYOUTS, state_layout, "state_layout")
    run_decode(
        DecodeTensors(q, k, v, g, beta, out, A_log, dt_bias, state_pool, slots, num_accepted),
        DecodeOptions(
            gate_mode,
            _core.bound(lower_bound),
            beta_mode,
            l2norm_qk,
            0.0 if scale is None else scale,
            layout,
            per_token_states,
        ),
        stream,
    )
    return out


def forward_workspace_size(
    q,
    k,
    v,
    g,
    beta,
    *,
    A_log=None,
    dt_bias=None,
    gate="bounded",
    lower_bound=-5.0,
    beta_act="sigmoid",
    l2norm_qk=True,
    scale=None,
    cu_seqlens=None,
    initial_state=None,
    final_state=None,
    state_indices=None,
    state_layout="v_first",
    algorithm="chunked",
):
    """Bytes of CUDA workspace that forward() / prefill() / fwd() need for these tensors and
    options (0 on CPU). Allocate once (256-byte aligned, e.g. torch.empty(n, dtype=torch.uint8,
    device=...)) and pass it as `workspace=` to keep allocations out of the serving loop."""
    return _C.forward_workspace_size(
        q,
        k,
        v,
        g,
        beta,
        None,
        A_log,
        dt_bias,
        cu_seqlens,
        initial_state,
        final_state,
        state_indices,
        *forward_options(gate, lower_bound, beta_act, l2norm_qk, scale, state_layout, algorithm),
    )
