"""Prefill benchmark: fla's chunk_kda (Triton) against fastkda's CUDA prefill, same shapes and input
distributions (DESIGN §6).

fastkda's GPU times come from the C++ benchmark (fastkda_gpu_tests, PrefillBench.DISABLED_Table,
one fastkda::forward, both prefill kernels, between CUDA events); pass its output with
--fastkda <file>. When the Python extension is importable (fastkda.chunk_kda on CUDA tensors),
--py also times it here, on fla's very inputs (column fastkda_py: CUDA events around the eager
call, so its host gaps are included), and gives the same-process speed-up fla_gpu / fastkda_py
(conservative: fla's host gaps are left out, fastkda's are not). Not torch.profiler for fastkda:
its event list missed the extension's prefill kernels (0.080 ms per call at H64 fixed, against
0.610 ms by events; session 21, bench/results/2026-11-30_s21/samecall_py/).

fla is timed in this process: bf16 q, k, v, g ~ N(0, 1), bounded gate (safe_gate, lower_bound -5)
with A_log and dt_bias (--gate softplus: Kimi-Linear-48B's -exp(A_log) softplus(g + dt_bias), no
safe_gate; fastkda's rows then read as <shape>+softplus, from FASTKDA_BENCH_GATE=softplus), beta
logits, in-kernel l2norm, f32 initial state, final state out; FLA_FLASH_KDA=0, inference mode, L2
flushed (256 MiB) before each call, median of 30 after warm-up. Two fla numbers: 'fla_ev' (CUDA
events around the eager call: includes its host gaps) and 'fla_gpu' (sum of its kernels' device
time from torch.profiler, per call: pure GPU time). Speed-up is against fla_gpu.

  python bench/bench_prefill.py --fastkda fastkda_bench.txt [--filter H32] [--out results.md]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("FLA_FLASH_KDA", "0")

SIX = [1300, 547, 2048, 963, 271, 3063]
SHAPES = [  # name, H, T (fixed) or seqlens
    ("H96_fixed_T8192", 96, 8192, None),
    ("H96_varlen_six", 96, None, SIX),
    ("H96_varlen_1024x8", 96, None, [1024] * 8),
    ("H64_fixed_T8192", 64, 8192, None),
    ("H64_varlen_six", 64, None, SIX),
    ("H64_varlen_1024x8", 64, None, [1024] * 8),
    ("H32_T4096", 32, 4096, None),
    ("H32_T16384", 32, 16384, None),
    ("H32_T65536", 32, 65536, None),
    ("H8_T65536", 8, 65536, None),
    ("H4_T65536", 4, 65536, None),
    ("H32_64x128", 32, None, [128] * 64),
]
HBM = 4.28e12


def floor_ms(H, T, N):
    tok = T * H * 128
    return (5 * tok * 2 + T * H * 2 + 2 * N * H * 128 * 128 * 4) / HBM * 1e3


def make_inputs(torch, H, T, seqlens, device="cuda"):
    K = V = 128
    g = torch.Generator(device=device).manual_seed(1234)
    rn = lambda *s: torch.randn(*s, generator=g, device=device, dtype=torch.float32)  # noqa: E731
    q = rn(1, T, H, K).bfloat16()
    k = rn(1, T, H, K).bfloat16()
    v = rn(1, T, H, V).bfloat16()
    gate = rn(1, T, H, K).bfloat16()
    beta = rn(1, T, H).bfloat16()
    A_log = torch.log(1 + 15 * torch.rand(H, generator=g, device=device))
    dt_bias = 0.5 * rn(H * K)
    N = len(seqlens) if seqlens else 1
    h0 = 0.1 * rn(N, H, K, V)
    cu = None
    if seqlens:
        cu = torch.tensor(
            [0, *list(__import__("itertools").accumulate(seqlens))], device=device, dtype=torch.long
        )
    return dict(q=q, k=k, v=v, g=gate, beta=beta, A_log=A_log, dt_bias=dt_bias, h0=h0, cu=cu, N=N)


def median_event_ms(torch, call, flush, reps):
    """Median ms of `call` between CUDA events, L2 flushed before each call, after 3 warm-ups."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    ev = []
    for i in range(reps):
        flush.fill_(i & 0xFF)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        call()
        e1.record()
        e1.synchronize()
        ev.append(e0.elapsed_time(e1))
    return statistics.median(ev)


def gate_kwargs(gate):
    """The gate arguments of both APIs: bounded (lower_bound -5) or softplus (unbounded)."""
    if gate == "softplus":
        return dict(safe_gate=False, lower_bound=None)
    return dict(safe_gate=True, lower_bound=-5.0)


def time_fla(torch, x, gate, reps=30):
    from fla.ops.kda import chunk_kda

    cu_cpu = x["cu"].cpu() if x["cu"] is not None else None

    def call():
        return chunk_kda(
            x["q"],
            x["k"],
            x["v"],
            x["g"],
            x["beta"],
            initial_state=x["h0"],
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True,
            cu_seqlens=x["cu"],
            cu_seqlens_cpu=cu_cpu,
            A_log=x["A_log"],
            dt_bias=x["dt_bias"],
            **gate_kwargs(gate),
        )

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    ev_ms = median_event_ms(torch, call, flush, reps)
    gpu = None
    try:
        from torch.profiler import ProfilerActivity, profile

        n = 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(n):
                flush.fill_(i & 0xFF)
                call()
            torch.cuda.synchronize()
        total_us = 0.0
        for e in prof.events():
            if e.device_type.name != "CUDA":
                continue
            if "fill" in e.name or "Memset" in e.name or "memset" in e.name:
                continue
            total_us += e.device_time
        gpu = total_us / n / 1e3
    except Exception as exc:  # profiler unavailable: events only
        print(f"# profiler failed: {exc}", file=sys.stderr)
    return ev_ms, gpu


def time_fastkda_py(torch, x, gate, reps=30):
    import fastkda

    cu = x["cu"].int() if x["cu"] is not None else None
    h0 = x["h0"].transpose(-1, -2).contiguous()  # V-first

    def call():
        return fastkda.chunk_kda(
            x["q"],
            x["k"],
            x["v"],
            x["g"],
            x["beta"],
            initial_state=h0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True,
            cu_seqlens=cu,
            A_log=x["A_log"],
            dt_bias=x["dt_bias"],
            state_v_first=True,
            **gate_kwargs(gate),
        )

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    return median_event_ms(torch, call, flush, reps)


def read_fastkda(path):
    res = {}
    if path and os.path.exists(path):
        for line in open(path):
            if line.startswith("BENCH "):
                _, name, ms, fl, gbs = line.split()
                res[name] = (float(ms), float(fl), float(gbs))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fastkda", help="output of PrefillBench.DISABLED_Table")
    ap.add_argument("--filter", default="", help="comma-separated shape-name substrings")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--py", action="store_true", help="also time fastkda.chunk_kda here")
    ap.add_argument("--out", help="write the markdown table here too")
    ap.add_argument("--gate", default="bounded", choices=["bounded", "softplus"])
    a = ap.parse_args()
    import torch

    fk = read_fastkda(a.fastkda)
    rows = []
    hdr = (
        "| shape | floor ms | fastkda ms | GB/s | % of floor | fastkda_py ms | fla_gpu ms | "
        "fla_ev ms | speed-up (fla_gpu / fastkda) | same-process speed-up (fla_gpu / fastkda_py) |"
    )
    with torch.inference_mode():
        for name, H, T, seqlens in SHAPES:
            if a.filter and not any(f in name for f in a.filter.split(",")):
                continue
            Tt = sum(seqlens) if seqlens else T
            N = len(seqlens) if seqlens else 1
            fl = floor_ms(H, Tt, N)
            fla_ev = fla_gpu = py = None
            if not a.no_fla or a.py:
                x = make_inputs(torch, H, Tt, seqlens)
                if not a.no_fla:
                    fla_ev, fla_gpu = time_fla(torch, x, a.gate)
                if a.py:
                    py = time_fastkda_py(torch, x, a.gate)
                del x
                torch.cuda.empty_cache()
            # fastkda: the C++ benchmark's GPU time (both kernels between events) when given,
            # else the Python call on fla's very inputs (events around the eager call).
            row = name + ("+softplus" if a.gate == "softplus" else "")
            ms = fk.get(row, (py,))[0]
            f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            gbs = "-" if ms is None else f"{fl / ms * HBM / 1e12 * 1e3:.0f}"
            pct = "-" if ms is None else f"{100 * fl / ms:.0f}%"
            ref = fla_gpu if fla_gpu is not None else fla_ev
            sp = "-" if (ms is None or ref is None) else f"{ref / ms:.2f}x"
            sp_py = "-" if (py is None or fla_gpu is None) else f"{fla_gpu / py:.2f}x"
            rows.append(
                f"| {row} | {fl:.3f} | {f(ms)} | {gbs} | {pct} | {f(py)} | {f(fla_gpu)} | "
                f"{f(fla_ev)} | {sp} | {sp_py} |"
            )
            print(rows[-1], flush=True)
        for k, v in fk.items():
            if "@vsplit" in k:
                rows.append(
                    f"| {k} | {v[1]:.3f} | {v[0]:.3f} | {v[2]:.0f} | "
                    f"{100 * v[1] / v[0]:.0f}% | | | | | |"
                )
    table = "\n".join([hdr, "|" + "---|" * 10, *rows])
    print("\n" + table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
