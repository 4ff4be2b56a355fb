"""Decode step: fastkda (CUDA) vs fla's fused_recurrent_kda_fwd (Triton), same process, same inputs.

Both run in place on an fp32 V-first state pool ([slots, HV, V, K]) with in-kernel l2norm, the
bounded gate (A_log, dt_bias, lower_bound = -5) and beta = sigmoid(logit); fla with
inplace_final_state=True, ssm_state_indices (and num_accepted_tokens for speculative rows).

Timing (DESIGN §6, METHOD.md): each implementation's calls are captured into one CUDA graph of M
calls, each call on its own slot set, so the state bytes touched per replay exceed the L2 several
times (no call finds its state in L2); after >= 100 ms of round-robin warm-up the graphs are
replayed interleaved (fastkda, fla, fastkda, ...) and timed with CUDA events, median of >= 30; the
time per call is the replay time / M. (Timing one implementation after the other put an 8-12%
penalty on whichever came first at large batch: clocks still settling.) Bytes per call: state
read once + written once per written slot, plus q, k, v, g, beta read and out written. Copy
bandwidth is measured in the same run.

fastkda is called through bench/decode_capi.cpp (ctypes; built by scripts/gpu_check_decode.sh).

  FLA_FLASH_KDA=0 python3 bench/bench_decode.py \
      --lib build-decode/bin/libfastkda_decode_bench.so
"""

import argparse
import ctypes
import datetime
import json
import math
import os
import statistics
import sys
import time

import torch

K = V = 128
L2_TARGET_BYTES = 256 << 20  # state bytes touched per graph replay: ~4x the H200's 60 MB L2
MIN_CALLS = int(os.environ.get("BENCH_MIN_CALLS", "16"))  # calls per graph when the pool allows
# Pool size up to which MIN_CALLS applies (the cross-check clones the pool twice).
POOL_CAP_BYTES = 2 << 30


def load_fastkda(path):
    lib = ctypes.CDLL(path)
    f = lib.fastkda_bench_decode
    p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
    f.argtypes = [p] * 11 + [i64, i32, i32, i32, i32, i32, i64, i64] + [i32] * 4 + [f32]
    f.argtypes += [i32, i32, i32, p, ctypes.c_char_p, i32]
    f.restype = i32
    return f


class Problem:
    def __init__(self, name, N, H, HV, tokens=1, spec=False, k_first=False, seed=0):
        self.name, self.N, self.H, self.HV, self.T = name, N, H, HV, tokens
        self.spec, self.k_first = spec, k_first
        dev = "cuda"
        g = torch.Generator(device=dev).manual_seed(seed)

        def randn(*shape, dtype=torch.bfloat16):
            return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(dtype)

        T = tokens
        self.q = randn(N, T, H, K)
        self.k = randn(N, T, H, K)
        self.v = randn(N, T, HV, V)
        self.g = randn(N, T, HV, K)
        self.beta = randn(N, T, HV)
        self.A_log = torch.log(1 + 15 * torch.rand(HV, generator=g, device=dev))
        self.dt_bias = -4 + 0.5 * torch.randn(HV * K, generator=g, device=dev)
        self.out = torch.empty(N, T, HV, V, device=dev, dtype=torch.bfloat16)
        self.cols = T if spec else 1
        per_call = N * self.cols * HV * K * V * 4
        # Calls per graph: enough state to cover ~4x L2, and >= MIN_CALLS when that fits in
        # POOL_CAP_BYTES, so that the graph's own launch latency (one per replay) is shared by many
        # calls as in a serving graph with one call per layer.
        calls = max(
            math.ceil(L2_TARGET_BYTES / per_call), min(MIN_CALLS, POOL_CAP_BYTES // per_call)
        )
        self.M = max(1, min(64, calls))
        self.num_slots = N * self.cols * self.M
        shape = (self.num_slots, HV, K, V) if k_first else (self.num_slots, HV, V, K)
        self.pool = 0.1 * randn(*shape, dtype=torch.float32)
        perm = torch.randperm(self.num_slots, generator=g, device=dev).to(torch.int32)
        self.slots = [
            perm[m * N * self.cols : (m + 1) * N * self.cols].view(N, self.cols)
            for m in range(self.M)
        ]
        if not spec:
            self.slots = [s.view(N).contiguous() for s in self.slots]
        self.accepted = (
            torch.randint(1, T + 1, (N,), generator=g, device=dev).to(torch.int32) if spec else None
        )

    def bytes_per_call(self):
        N, T, H, HV = self.N, self.T, self.H, self.HV
        state = N * HV * K * V * 4 * (1 + (T if self.spec else 1))
        io = N * T * (2 * H * K * 2 + HV * V * 2 + HV * K * 2 + HV * 2 + HV * V * 2)
        return state + io

    def fastkda(self, f, m, pool=None, stream=None):
        pool = self.pool if pool is None else pool
        err = ctypes.create_string_buffer(512)
        stream = torch.cuda.current_stream().cuda_stream if stream is None else stream
        rc = f(
            self.q.data_ptr(),
            self.k.data_ptr(),
            self.v.data_ptr(),
            self.g.data_ptr(),
            self.beta.data_ptr(),
            self.out.data_ptr(),
            self.A_log.data_ptr(),
            self.dt_bias.data_ptr(),
            pool.data_ptr(),
            self.slots[m].data_ptr(),
            self.accepted.data_ptr() if self.spec else None,
            self.N,
            self.T,
            self.H,
            self.HV,
            K,
            V,
            self.num_slots,
            self.cols,
            int(self.spec),
            int(self.k_first),
            0,
            0,
            -5.0,
            0,
            0,
            0,
            stream,
            err,
            512,
        )
        if rc != 0:
            raise RuntimeError(err.value.decode())

    def fla(self, fwd, m, pool=None):
        pool = self.pool if pool is None else pool
        fwd(
            q=self.q,
            k=self.k,
            v=self.v,
            g=self.g,
            beta=self.beta,
            A_log=self.A_log,
            dt_bias=self.dt_bias,
            initial_state=pool,
            scale=None,
            output_final_state=False,
            inplace_final_state=True,
            state_v_first=not self.k_first,
            ssm_state_indices=self.slots[m],
            num_accepted_tokens=self.accepted if self.spec else None,
            use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True,
            lower_bound=-5.0,
            out=self.out,
        )


def rms_rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def capture(calls):
    """A CUDA graph replaying `calls` (list of thunks), after two eager warm-up calls."""
    for c in calls[:2]:
        c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    return graph


def time_graphs(graphs, reps, warm_s=0.1):
    """Median ms per replay of each graph. Round-robin warm-up for >= warm_s (clocks settle), then
    the graphs are timed interleaved, so no implementation is favoured by its position."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
    times = [[] for _ in graphs]
    for _ in range(reps):
        for i, g in enumerate(graphs):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            times[i].append(e0.elapsed_time(e1))
    return [statistics.median(t) for t in times]


def copy_bandwidth():
    """Bytes read + written per second by a 2 GiB device copy (cudaMemcpyAsync D2D, outside a
    graph: inside one it becomes a copy-engine memcpy node, ~2.8 TB/s) and by an elementwise kernel
    (y = x * 1); the larger is the ceiling."""
    n = 2 << 30
    x = torch.empty(n // 4, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    x.normal_()
    best = 0.0
    for op in (lambda: y.copy_(x), lambda: torch.mul(x, 1.0, out=y)):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.2:
            op()
            torch.cuda.synchronize()
        times = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            op()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        best = max(best, 2 * n / (statistics.median(times) * 1e-3))
    return best


def cross_check(p, f, fwd):
    """fastkda vs fla on the same inputs and the same slots: out and written states."""
    pa, pb = p.pool.clone(), p.pool.clone()
    p.fastkda(f, 0, pool=pa)
    out_a = p.out.clone()
    p.fla(fwd, 0, pool=pb)
    out_b = p.out.clone()
    idx = p.slots[0].reshape(-1).long()
    e_out, e_state = rms_rel(out_a.float(), out_b.float()), rms_rel(pa[idx], pb[idx])
    untouched = torch.ones(p.num_slots, dtype=torch.bool, device="cuda")
    untouched[idx] = False
    same = bool(torch.equal(pa[untouched], p.pool[untouched]))
    del pa, pb
    return e_out, e_state, same


SHAPES = [  # name, N, H, HV, tokens, spec, k_first
    ("H32 b1", 1, 32, 32, 1, False, False),
    ("H32 b8", 8, 32, 32, 1, False, False),
    ("H32 b32", 32, 32, 32, 1, False, False),
    ("H32 b256", 256, 32, 32, 1, False, False),
    ("H32 b1024", 1024, 32, 32, 1, False, False),
    ("HV96/TP8 (12) b1", 1, 12, 12, 1, False, False),
    ("HV96/TP8 (12) b256", 256, 12, 12, 1, False, False),
    ("HV96/TP4 (24) b1", 1, 24, 24, 1, False, False),
    ("HV96/TP4 (24) b256", 256, 24, 24, 1, False, False),
    ("HV96/TP2 (48) b1", 1, 48, 48, 1, False, False),
    ("HV96/TP2 (48) b256", 256, 48, 48, 1, False, False),
    ("H32 b32 spec4", 32, 32, 32, 4, True, False),
    ("H32 b256 spec4", 256, 32, 32, 4, True, False),
    ("GVA H16/HV32 b256", 256, 16, 32, 1, False, False),
    ("H32 b256 K-first", 256, 32, 32, 1, False, True),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-decode/bin/libfastkda_decode_bench.so")
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default=None, help="substring filter on shape names")
    args = ap.parse_args()

    os.environ.setdefault("FLA_FLASH_KDA", "0")
    torch.backends.cuda.matmul.allow_tf32 = False
    libs = [load_fastkda(path) for path in args.lib.split(",")]
    names = [
        os.path.basename(path)
        .removeprefix("libfastkda_decode_bench")
        .removesuffix(".so")
        .lstrip("_")
        or "default"
        for path in args.lib.split(",")
    ]
    f = libs[0]
    try:
        import fla
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd as fwd

        fla_version = getattr(fla, "__version__", "?")
    except Exception as e:
        print(f"fla unavailable ({e}); timing fastkda only", file=sys.stderr)
        fwd, fla_version = None, None

    import triton

    props = torch.cuda.get_device_properties(0)
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "fla": fla_version,
    }
    bw = copy_bandwidth()
    env["copy_TBps"] = bw / 1e12
    print(json.dumps(env), flush=True)

    rows = []
    with torch.inference_mode():
        for name, N, H, HV, T, spec, k_first in SHAPES:
            if args.only and args.only not in name:
                continue
            p = Problem(name, N, H, HV, T, spec, k_first)
            row = {
                "shape": name,
                "N": N,
                "H": H,
                "HV": HV,
                "tokens": T,
                "spec": spec,
                "k_first": k_first,
                "M": p.M,
                "bytes": p.bytes_per_call(),
            }
            if fwd is not None:
                row["err_out_vs_fla"], row["err_state_vs_fla"], row["untouched_ok"] = cross_check(
                    p, f, fwd
                )
            graphs = [
                capture([lambda m=m, lib=lib, p=p: p.fastkda(lib, m) for m in range(p.M)])
                for lib in libs
            ]
            if fwd is not None:
                graphs.append(capture([lambda m=m, p=p: p.fla(fwd, m) for m in range(p.M)]))
            ms = time_graphs(graphs, args.reps)
            for name, t in zip(names, ms):
                row[f"fastkda_us[{name}]"] = t * 1e3 / p.M
            row["fastkda_us"] = row[f"fastkda_us[{names[0]}]"]
            if fwd is not None:
                row["fla_us"] = ms[-1] * 1e3 / p.M
            del graphs
            row["floor_us"] = p.bytes_per_call() / bw * 1e6
            row["fastkda_TBps"] = p.bytes_per_call() / (row["fastkda_us"] * 1e-6) / 1e12
            print(json.dumps(row), flush=True)
            rows.append(row)
            p = None  # free the pool before the next shape allocates its own
            torch.cuda.empty_cache()

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"env": env, "rows": rows}, fh, indent=1)

    print(
        f"\n{env['gpu']}  torch {env['torch']}  triton {env['triton']}  fla {env['fla']}  "
        f"copy {env['copy_TBps']:.2f} TB/s  (us per call, CUDA-graph replay, median)"
    )
    hdr = (
        f"{'shape':22s} {'fastkda':>8s} {'fla':>8s} {'speedup':>7s} {'floor':>7s} "
        f"{'TB/s':>5s} {'%copy':>5s}  {'out/state err vs fla':>20s}"
    )
    print(hdr)
    if len(names) > 1:
        print("variants (us): " + " | ".join(names))
        for r in rows:
            print(f"  {r['shape']:22s} " + " ".join(f"{r[f'fastkda_us[{n}]']:8.2f}" for n in names))
    for r in rows:
        fla_us = r.get("fla_us", float("nan"))
        err = (
            f"{r['err_out_vs_fla']:.1e}/{r['err_state_vs_fla']:.1e}"
            f"{'' if r['untouched_ok'] else ' SLOTS CHANGED'}"
            if "err_out_vs_fla" in r
            else ""
        )
        print(
            f"{r['shape']:22s} {r['fastkda_us']:8.2f} {fla_us:8.2f} "
            f"{fla_us / r['fastkda_us']:7.2f} {r['floor_us']:7.2f} {r['fastkda_TBps']:5.2f} "
            f"{100 * r['fastkda_TBps'] / env['copy_TBps']:5.1f}  {err:>20s}"
        )


if __name__ == "__main__":
    main()
