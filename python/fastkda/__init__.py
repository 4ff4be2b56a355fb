"""fastkda: Kimi Delta Attention (KDA) kernels.

Entry points (all forward-only; tensors through DLPack: torch CPU/CUDA tensors, numpy arrays):
  fwd(...)                  FlashKDA's flash_kda.fwd (in place, V-first states)
  chunk_kda(...)            fla.ops.kda.chunk_kda (0.6.0 keyword arguments) -> (o, final_state)
  fused_recurrent_kda(...)  fla.ops.kda.fused_recurrent_kda -> (o, final_state)
  forward(...)              the general forward: every gate / beta / layout / algorithm option
  prefill(...)              chunked prefill on a serving state pool indexed by state_indices
  forward_workspace_size()  bytes of CUDA workspace for forward / prefill / fwd (0 on CPU)
  decode_step(...)          1..8 tokens per sequence on a state pool indexed by slots, in place
  built_with_cuda()         whether the Hopper kernels are in this build
  Error                     raised on invalid arguments (a ValueError and a RuntimeError)

With torch installed the ops are also registered as torch.library custom ops (torch.ops.fastkda.*)
so that torch.compile(fullgraph=True) and CUDA graphs can capture calls to the functions above.
"""

from . import _core
from ._core import Error, built_with_cuda
from .api import decode_step, forward, forward_workspace_size, prefill
from .compat import chunk_kda, fused_recurrent_kda, fwd

if _core.torch is not None:
    from . import _ops  # noqa: F401  (registers torch.ops.fastkda.*)

try:
    from importlib.metadata import version as _version

    __version__ = _version("fastkda")
except Exception:  # pragma: no cover - running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = [
    "Error",
    "__version__",
    "built_with_cuda",
    "chunk_kda",
    "decode_step",
    "forward",
    "forward_workspace_size",
    "fused_recurrent_kda",
    "fwd",
    "prefill",
]
