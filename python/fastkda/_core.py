"""Plumbing between the public functions and the native extension (framework neutral).

Every public entry point ends in run_forward(), run_forward_pool() or run_decode(), with its
arguments as ForwardTensors / DecodeTensors plus ForwardOptions / DecodeOptions (named tuples in
the extension's argument order). In eager mode these call the extension directly (a few
microseconds of host time); while torch.compile traces they call the torch.library custom ops of
_ops.py instead, whose implementations call the same extension (call_forward, call_decode).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

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


class ForwardTensors(NamedTuple):
    """The array arguments of a forward, in the order _C.forward and torch.ops.fastkda.forward take
    them (optional ones None)."""

    q: Any  # [B, T, H, K]
    k: Any  # [B, T, H, K]
    v: Any  # [B, T, HV, V]
    g: Any  # [B, T, HV, K]
    beta: Any  # [B, T, HV]
    out: Any  # [B, T, HV, V], written
    A_log: Any  # [HV] f32
    dt_bias: Any  # [HV, K] f32
    cu_seqlens: Any  # [N + 1] int32 / int64
    cu_seqlens_host: Any  # CPU copy of a CUDA cu_seqlens
    initial_state: Any  # [N or slots, HV, V, K] / [.., K, V]
    final_state: Any  # same, written (the same pool as initial_state for run_forward_pool)
    state_indices: Any  # [N] int32
    workspace: Any  # uint8 CUDA scratch (None: allocated through torch)


class ForwardOptions(NamedTuple):
    """The scalar options of a forward as the extension takes them (codes, not names)."""

    gate_mode: int
    lower_bound: float
    beta_mode: int
    l2norm_qk: bool
    scale: float  # 0: K^-1/2
    state_layout: int
    algorithm: int


def forward_options(
    gate, lower_bound, beta_act, l2norm_qk, scale, state_layout, algorithm
) -> ForwardOptions:
    """ForwardOptions from the public keyword arguments (names checked, with the argument named)."""
    return ForwardOptions(
        code(GATE_MODES, gate, "gate"),
        bound(lower_bound),
        code(BETA_MODES, beta_act, "beta_act"),
        bool(l2norm_qk),
        0.0 if scale is None else float(scale),
        code(STATE_LAYOUTS, state_layout, "state_layout"),
        code(ALGORITHMS, algorithm, "algorithm"),
    )


class DecodeTensors(NamedTuple):
    """The array arguments of a decode step, in _C.decode / torch.ops.fastkda.decode order."""

    q: Any  # [N, tokens, H, K]
    k: Any  # [N, tokens, H, K]
    v: Any  # [N, tokens, HV, V]
    g: Any  # [N, tokens, HV, K]
    beta: Any  # [N, tokens, HV]
    out: Any  # [N, tokens, HV, V], written
    A_log: Any  # [HV] f32
    dt_bias: Any  # [HV, K] f32
    state_pool: Any  # [slots, HV, V, K] / [slots, HV, K, V], updated in place
    slots: Any  # [N] or [N, S] int32
    num_accepted: Any  # [N] int32


class DecodeOptions(NamedTuple):
    gate_mode: int
    lower_bound: float
    beta_mode: int
    l2norm_qk: bool
    scale: float  # 0: K^-1/2
    state_layout: int
    per_token_states: bool


def call_forward(t: ForwardTensors, o: ForwardOptions, stream=None, boundary_states=None) -> None:
    """The extension's forward on the given stream (default: torch's current stream of q's
    device); without a workspace, one is allocated through torch's caching allocator."""
    alloc = workspace_allocator(t.q) if t.workspace is None else None
    _C.forward(*t, *o, stream_of(t.q, stream), alloc, boundary_states)


def call_decode(t: DecodeTensors, o: DecodeOptions, stream=None) -> None:
    _C.decode(*t, *o, stream_of(t.q, stream))


def run_forward(t: ForwardTensors, o: ForwardOptions, stream=None) -> None:
    if is_compiling():
        torch.ops.fastkda.forward(*t, *o)
    else:
        call_forward(t, o, stream)


def run_forward_pool(t: ForwardTensors, o: ForwardOptions, stream=None, boundary_states=None):
    """The forward with states read from and written back to rows of one pool (t.initial_state is
    t.final_state), in place."""
    if is_compiling():  # the op takes the pool once: custom ops cannot alias two arguments
        torch.ops.fastkda.forward_pool(
            *t[: ForwardTensors._fields.index("initial_state")],
            t.final_state,
            t.state_indices,
            t.workspace,
            *o,
            boundary_states,
        )
    else:
        call_forward(t, o, stream, boundary_states)


def run_decode(t: DecodeTensors, o: DecodeOptions, stream=None) -> None:
    if is_compiling():
        torch.ops.fastkda.decode(*t, *o)
    else:
        call_decode(t, o, stream)
