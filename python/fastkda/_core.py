"""Plumbing between the public functions and the native extension (framework neutral).

Every public entry point ends in run_forward() or run_decode(). In eager mode these call the
extension directly (a few microseconds of host time); while torch.compile traces they call the
torch.library custom ops of _ops.py instead, whose implementations call the same extension.
"""

from __future__ import annotations

import math

from . import _C

try:  # torch is optional: numpy arrays (and any DLPack producer) work without it
    import torch
except ImportError:  # pragma: no cover - exercised only where torch is absent
    torch = None

Error = _C.Error
built_with_cuda = _C.built_with_cuda

GATE_MODES = {name: int(m) for name, m in _C.GateMode.__members__.items()}
BETA_MODES = {name: int(m) for name, m in _C.BetaMode.__members__.items()}
STATE_LAYOUTS = {name: int(m) for name, m in _C.StateLayout.__members__.items()}
ALGORITHMS = {name: int(m) for name, m in _C.Algorithm.__members__.items()}


def code(table: dict, value, name: str) -> int:
    """The integer code of an option given by name (e.g. gate="softplus")."""
    try:
        return table[value]
    except (KeyError, TypeError):
        raise Error(f"fastkda: {name}: expected one of {sorted(table)}, got {value!r}") from None


def bound(lower_bound) -> float:
    # None -> NaN, which the C++ validation rejects by name when the bounded gate needs it.
    return math.nan if lower_bound is None else float(lower_bound)


if torch is not None:
    is_compiling = torch.compiler.is_compiling
    _raw_stream = (
        torch._C._cuda_getCurrentRawStream
        if hasattr(torch._C, "_cuda_getCurrentRawStream")
        else None
    )

    def is_torch(x) -> bool:
        return isinstance(x, torch.Tensor)
else:  # pragma: no cover

    def is_compiling() -> bool:
        return False

    def is_torch(x) -> bool:
        return False


def stream_of(x, stream=None) -> int:
    """The CUDA stream to run on: the given one, else torch's current stream of x's device."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    if torch is not None and isinstance(x, torch.Tensor) and x.is_cuda:
        if _raw_stream is not None:
            return _raw_stream(x.get_device())
        return torch.cuda.current_stream(x.device).cuda_stream
    return 0


def workspace_allocator(x):
    """A callable(nbytes) -> uint8 tensor on x's CUDA device (torch's caching allocator)."""
    if torch is not None and isinstance(x, torch.Tensor) and x.is_cuda:
        device = x.device
        return lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)
    return None


def empty(like, shape, dtype=None):
    """An uninitialised array of like's framework and device (dtype: like's, or "float32")."""
    if is_torch(like):
        dt = like.dtype if dtype is None else getattr(torch, dtype)
        return torch.empty(shape, dtype=dt, device=like.device)
    import numpy as np

    return np.empty(shape, dtype=like.dtype if dtype is None else dtype)


def zeros(like, shape, dtype=None):
    if is_torch(like):
        dt = like.dtype if dtype is None else getattr(torch, dtype)
        return torch.zeros(shape, dtype=dt, device=like.device)
    import numpy as np

    return np.zeros(shape, dtype=like.dtype if dtype is None else dtype)


def run_forward(
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
    gate_mode: int,
    lower_bound: float,
    beta_mode: int,
    l2norm_qk: bool,
    scale: float,
    state_layout: int,
    algorithm: int,
    stream=None,
) -> None:
    if is_compiling():
        torch.ops.fastkda.forward(
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
            gate_mode,
            lower_bound,
            beta_mode,
            l2norm_qk,
            scale,
            state_layout,
            algorithm,
        )
        return
    _C.forward(
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
        gate_mode,
        lower_bound,
        beta_mode,
        l2norm_qk,
        scale,
        state_layout,
        algorithm,
        stream_of(q, stream),
        workspace_allocator(q) if workspace is None else None,
    )


def run_forward_pool(
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
    state_indices,
    workspace,
    gate_mode: int,
    lower_bound: float,
    beta_mode: int,
    l2norm_qk: bool,
    scale: float,
    state_layout: int,
    algorithm: int,
    stream=None,
    boundary_states=None,
) -> None:
    """The forward with states read from and written back to rows of one pool, in place."""
    if is_compiling():
        torch.ops.fastkda.forward_pool(
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
            state_indices,
            workspace,
            gate_mode,
            lower_bound,
            beta_mode,
            l2norm_qk,
            scale,
            state_layout,
            algorithm,
            boundary_states,
        )
        return
    _C.forward(
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
        gate_mode,
        lower_bound,
        beta_mode,
        l2norm_qk,
        scale,
        state_layout,
        algorithm,
        stream_of(q, stream),
        workspace_allocator(q) if workspace is None else None,
        boundary_states,
    )


def run_decode(
    q,
    k,
    v,
    g,
    beta,
    out,
    A_log,
    dt_bias,
    state_pool,
    slots,
    num_accepted,
    gate_mode: int,
    lower_bound: float,
    beta_mode: int,
    l2norm_qk: bool,
    scale: float,
    state_layout: int,
    per_token_states: bool,
    stream=None,
) -> None:
    if is_compiling():
        torch.ops.fastkda.decode(
            q,
            k,
            v,
            g,
            beta,
            out,
            A_log,
            dt_bias,
            state_pool,
            slots,
            num_accepted,
            gate_mode,
            lower_bound,
            beta_mode,
            l2norm_qk,
            scale,
            state_layout,
            per_token_states,
        )
        return
    _C.decode(
        q,
        k,
        v,
        g,
        beta,
        out,
        A_log,
        dt_bias,
        state_pool,
        slots,
        num_accepted,
        gate_mode,
        lower_bound,
        beta_mode,
        l2norm_qk,
        scale,
        state_layout,
        per_token_states,
        stream_of(q, stream),
    )
