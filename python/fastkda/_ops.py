"""torch.library custom ops (imported only when torch is importable).

They let torch.compile(fullgraph=True) and CUDA graphs treat the kernels as opaque ops that write
their outputs in place (mutates_args); the fake implementations only describe that nothing new is
returned. Eager calls bypass them (see _core.run_forward) to keep host overhead low.
"""

from __future__ import annotations

from typing import Optional

import torch

from ._core import (
    DecodeOptions,
    DecodeTensors,
    ForwardOptions,
    ForwardTensors,
    call_decode,
    call_forward,
)

Tensor = torch.Tensor


@torch.library.custom_op("fastkda::forward", mutates_args=("out", "final_state"))
def forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    out: Tensor,
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    cu_seqlens: Optional[Tensor],
    cu_seqlens_host: Optional[Tensor],
    initial_state: Optional[Tensor],
    final_state: Optional[Tensor],
    state_indices: Optional[Tensor],
    workspace: Optional[Tensor],
    gate_mode: int,
    lower_bound: float,
    beta_mode: int,
    l2norm_qk: bool,
    scale: float,
    state_layout: int,
    algorithm: int,
) -> None:
    call_forward(
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
            state_indices,
            workspace,
        ),
        ForwardOptions(
            gate_mode, lower_bound, beta_mode, l2norm_qk, scale, state_layout, algorithm
        ),
    )


@torch.library.custom_op(
    "fastkda::forward_pool", mutates_args=("out", "state_pool", "boundary_states")
)
def forward_pool(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    out: Tensor,
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    cu_seqlens: Optional[Tensor],
    cu_seqlens_host: Optional[Tensor],
    state_pool: Tensor,
    state_indices: Tensor,
    workspace: Optional[Tensor],
    gate_mode: int,
    lower_bound: float,
    beta_mode: int,
    l2norm_qk: bool,
    scale: float,
    state_layout: int,
    algorithm: int,
    boundary_states: Optional[Tensor] = None,
) -> None:
    call_forward(
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
            state_pool,
            state_pool,
            state_indices,
            workspace,
        ),
        ForwardOptions(
            gate_mode, lower_bound, beta_mode, l2norm_qk, scale, state_layout, algorithm
        ),
        boundary_states=boundary_states,
    )


@torch.library.custom_op("fastkda::decode", mutates_args=("out", "state_pool"))
def decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    out: Tensor,
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    state_pool: Tensor,
    slots: Tensor,
    num_accepted: Optional[Tensor],
    gate_mode: int,
    lower_bound: float,
    beta_mode: int,
    l2norm_qk: bool,
    scale: float,
    state_layout: int,
    per_token_states: bool,
) -> None:
    call_decode(
        DecodeTensors(q, k, v, g, beta, out, A_log, dt_bias, state_pool, slots, num_accepted),
        DecodeOptions(
            gate_mode, lower_bound, beta_mode, l2norm_qk, scale, state_layout, per_token_states
        ),
    )


def _writes_in_place_only(*args, **kwargs) -> None:
    """Fake implementation shared by every op: each writes its outputs in place, returns nothing."""
    return None


forward.register_fake(_writes_in_place_only)
forward_pool.register_fake(_writes_in_place_only)
decode.register_fake(_writes_in_place_only)
