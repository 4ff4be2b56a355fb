"""Does a validation error for CUDA tensors reach Python as fastkda.Error?

Session 4: with the package built by the GPU machine's default compiler, every error raised from
validate.cpp for CUDA tensors (K or V != 128) crashed the process with SIGSEGV, while errors
raised from tensor_api.cpp arrived. Each case runs in its own subprocess, so a crash shows as
rc -11 instead of ending the run. On the GPU machine, after building the package
(`scripts/gpu_check.sh run python` builds it into /tmp/fastkda_py):

    PYTHONPATH=/tmp/fastkda_py python3 scripts/diag_python_errors.py
"""

import faulthandler
import subprocess
import sys

CASES = ["size", "fwd_noalloc", "fwd_alloc", "capsule_size", "capsule_noalloc", "v64", "compat"]


def main():
    import nanobind
    import torch

    print("torch", torch.__version__, "nanobind", nanobind.__version__, flush=True)
    for case in CASES:
        r = subprocess.run(
            [sys.executable, __file__, case], capture_output=True, text=True, timeout=60
        )
        last = (r.stdout.strip().splitlines() or [""])[-1][:150]
        first_err = (r.stderr.strip().splitlines() or [""])[0][:80]
        print(case, "rc", r.returncode, last, first_err, flush=True)


class Capsule:
    """A tensor seen only through __dlpack__ (not torch's DLPack C exchange API)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, **kw):
        import torch

        return torch.utils.dlpack.to_dlpack(self.t)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def run_case(case):
    import fastkda
    import torch
    from fastkda import _C

    faulthandler.enable()
    K, V = (128, 64) if case == "v64" else (64, 128)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    q, k = torch.randn(1, 16, 2, K, **bf16), torch.randn(1, 16, 2, K, **bf16)
    v = torch.randn(1, 16, 2, V, **bf16)
    g = -torch.rand(1, 16, 2, K, device="cuda")
    beta = torch.rand(1, 16, 2, device="cuda")
    out = torch.empty_like(v)
    if case.startswith("capsule"):
        q, k, v, g, beta, out = [Capsule(x) for x in (q, k, v, g, beta, out)]
    # gate_mode 2 (pre-gated), lower_bound, beta_mode 1 (given), l2norm, scale, layout, algorithm
    opts = (2, 0.0, 1, False, 0.0, 0, 0)
    nones = (None,) * 8  # A_log, dt_bias, cu_seqlens, [cu_seqlens_host,] states, indices, ...

    def alloc(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")

    try:
        if case.endswith("size"):
            print(_C.forward_workspace_size(q, k, v, g, beta, out, *nones[:6], *opts))
        elif case == "compat":
            fastkda.chunk_kda(q, k, v, g, beta)
        else:
            stream = torch.cuda.current_stream().cuda_stream
            with_alloc = case in ("fwd_alloc", "v64")
            _C.forward(q, k, v, g, beta, out, *nones, *opts, stream, alloc if with_alloc else None)
        print("no error")
    except Exception as e:  # the expected outcome: fastkda.Error naming K or V
        print("caught", type(e).__name__, str(e)[:120])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run_case(sys.argv[1])
    else:
        main()
