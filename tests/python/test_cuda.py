"""The Python package on CUDA tensors (GPU machine only; skipped with the reason elsewhere).

CUDA results are compared with fastkda's CPU paths on the same inputs (the fp64 recurrence is the
oracle, itself checked against fla in test_reference.py); this file needs no fla, so it runs on
a GPU machine with torch alone. Run with -s to see errors and host overhead.
"""

import time

import fastkda
import pytest
import torch

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and fastkda.built_with_cuda()),
    reason="needs a CUDA GPU and a fastkda build with the CUDA kernels",
)

H, K = 4, 128
CAP = 5e-3  # DESIGN §5: absolute cap on RMS-relative error for bf16 inputs


def rms_rel(x, ref):
    x, ref = x.double().cpu(), ref.double().cpu()
    return ((x - ref).norm() / ref.norm()).item()


def inputs(B, T, HV=H, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=gen) for _ in range(2))
    v = torch.randn(B, T, HV, K, generator=gen)
    g = torch.randn(B, T, HV, K, generator=gen)
    beta = torch.randn(B, T, HV, generator=gen)
    A_log = torch.empty(HV).uniform_(1, 16, generator=gen).log()
    dt_bias = torch.randn(HV, K, generator=gen) * 0.5 - 4.0
    return [x.bfloat16() for x in (q, k, v, g, beta)] + [A_log, dt_bias]


def cuda(xs):
    return [None if x is None else x.cuda() for x in xs]


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_fwd_cuda_matches_cpu_oracle(state_dtype):
    cu = [0, 100, 100, 257, 300]
    q, k, v, g, beta, A_log, dt_bias = inputs(1, cu[-1])
    h0 = (torch.randn(4, H, K, K) * 0.1).to(state_dtype)
    cu_t = torch.tensor(cu)
    kw = dict(
        initial_state=h0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
        lower_bound=-5.0,
        state_v_first=True,
        cu_seqlens=cu_t,
    )
    o_ref, s_ref = fastkda.fused_recurrent_kda(q, k, v, g, beta, A_log, dt_bias, **kw)
    qc, kc, vc, gc, bc, Ac, dc, h0c, cuc = cuda([q, k, v, g, beta, A_log, dt_bias, h0, cu_t])
    out = torch.full_like(vc, float("nan"))
    final = torch.full_like(h0c, float("nan"))
    fastkda.fwd(qc, kc, vc, gc, bc, None, out, Ac, dc, -5.0, h0c, final, cuc)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    e_o, e_s = rms_rel(out, o_ref), rms_rel(final, s_ref)
    print(f"fwd cuda {state_dtype}: out {e_o:.2e} state {e_s:.2e}")
    assert e_o <= CAP and e_s <= CAP


def check_chunk_kda_against_cpu(label, xs, initial_state=None):
    """fastkda.chunk_kda on CUDA copies of xs (q, k, v, g, beta, A_log, dt_bias; in-kernel gate,
    l2norm, beta sigmoid, V-first states) against the CPU recurrence on xs."""
    q, k, v, g, beta, A_log, dt_bias = xs
    kw = dict(
        initial_state=initial_state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
        A_log=A_log,
        dt_bias=dt_bias,
        state_v_first=True,
    )
    o_ref, s_ref = fastkda.fused_recurrent_kda(q, k, v, g, beta, **kw)
    kw.update(A_log=A_log.cuda(), dt_bias=dt_bias.cuda())
    if initial_state is not None:
        kw.update(initial_state=initial_state.cuda())
    o, s = fastkda.chunk_kda(*cuda([q, k, v, g, beta]), **kw)
    e_o, e_s = rms_rel(o, o_ref), rms_rel(s, s_ref)
    print(f"chunk_kda cuda {label}: out {e_o:.2e} state {e_s:.2e}")
    assert o.is_cuda and o.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert torch.isfinite(o).all() and torch.isfinite(s).all()
    assert e_o <= CAP and e_s <= CAP


def test_chunk_kda_cuda_softplus_gva_matches_cpu():
    check_chunk_kda_against_cpu("softplus GVA", inputs(2, 200, HV=2 * H, seed=1))


def test_chunk_kda_cuda_split_t_matches_cpu(monkeypatch):
    """Split T (forced: 512-token segments) through the Python entry point: the workspace the
    package asks for and the call agree on the plan; segment 0 starts from the initial state."""
    monkeypatch.setenv("FASTKDA_PREFILL_SEG", "512")
    h0 = torch.randn(1, H, K, K) * 0.1
    check_chunk_kda_against_cpu("split T", inputs(1, 3000, seed=3), initial_state=h0)


def decode_inputs(N, tokens=1, seed=2):
    q, k, v, g, beta, A_log, dt_bias = inputs(N, tokens, seed=seed)
    pool = torch.randn(N + 3, H, K, K) * 0.1
    slots = torch.randperm(N + 3, generator=torch.Generator().manual_seed(seed))[:N].int()
    slots[0] = -1  # a padding row
    return q, k, v, g, beta, A_log, dt_bias, pool, slots


def test_decode_step_cuda_matches_cpu():
    q, k, v, g, beta, A_log, dt_bias, pool, slots = decode_inputs(16, tokens=2)
    pool_c, slots_c = pool.cuda(), slots.cuda()
    kw = dict(A_log=A_log, dt_bias=dt_bias, gate="softplus")
    o_ref = fastkda.decode_step(q, k, v, g, beta, pool, slots, **kw)
    kw.update(A_log=A_log.cuda(), dt_bias=dt_bias.cuda())
    o = fastkda.decode_step(*cuda([q, k, v, g, beta]), pool_c, slots_c, **kw)
    e_o, e_s = rms_rel(o, o_ref), rms_rel(pool_c, pool)
    print(f"decode_step cuda: out {e_o:.2e} pool {e_s:.2e}")
    assert e_o <= CAP and e_s <= 1e-5
    assert (o[0] == 0).all()


def test_fused_recurrent_cuda_routes_short_inputs_to_decode():
    q, k, v, g, beta, A_log, dt_bias = inputs(3, 4, seed=3)
    kw = dict(
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
        lower_bound=-5.0,
    )
    o_ref, s_ref = fastkda.fused_recurrent_kda(q, k, v, g, beta, A_log, dt_bias, **kw)
    o, s = fastkda.fused_recurrent_kda(*cuda([q, k, v, g, beta, A_log, dt_bias]), **kw)
    assert rms_rel(o, o_ref) <= CAP and rms_rel(s, s_ref) <= 1e-5
    long = cuda(inputs(1, 20)[:5])
    with pytest.raises(ValueError, match="algorithm"):
        fastkda.fused_recurrent_kda(*long, A_log.cuda(), dt_bias.cuda(), **kw)


def test_cuda_errors_name_the_argument():
    q, k, v, g, beta, A_log, dt_bias = cuda(inputs(1, 16))
    out = torch.empty_like(v)
    with pytest.raises(ValueError, match="A_log: expected device cuda"):
        fastkda.fwd(q, k, v, g, beta, None, out, A_log.cpu(), dt_bias, -5.0)
    with pytest.raises(ValueError, match="K"):
        fastkda.chunk_kda(q[..., :64], k[..., :64], v, g[..., :64], beta)


def test_side_stream_and_cuda_graph():
    q, k, v, g, beta, A_log, dt_bias, pool, slots = cuda(decode_inputs(32, seed=4))
    kw = dict(A_log=A_log, dt_bias=dt_bias, gate="bounded", lower_bound=-5.0)
    pool0 = pool.clone()
    ref = fastkda.decode_step(q, k, v, g, beta, pool0.clone(), slots, **kw)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        p1 = pool0.clone()
        o1 = fastkda.decode_step(q, k, v, g, beta, p1, slots, **kw)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(o1, ref)

    p2, out = pool0.clone(), torch.empty_like(v)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fastkda.decode_step(q, k, v, g, beta, p2, slots, out=out, **kw)
    p2.copy_(pool0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ref)


def test_compile_cuda():
    q, k, v, g, beta, A_log, dt_bias = cuda(inputs(1, 64, seed=5))

    def f(q, k, v, g, beta):
        o, s = fastkda.chunk_kda(
            q,
            k,
            v,
            g,
            beta,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True,
            A_log=A_log,
            dt_bias=dt_bias,
            lower_bound=-5.0,
            safe_gate=True,
            state_v_first=True,
        )
        return o.float().square().sum(), s

    eager = f(q, k, v, g, beta)
    comp = torch.compile(f, fullgraph=True)(q, k, v, g, beta)
    assert torch.equal(eager[1], comp[1])


def test_host_overhead_decode():
    """Host time per decode_step call with the output given (B = 1 and 32, H = 32)."""
    for N in (1, 32):
        gen = torch.Generator().manual_seed(0)
        q, k = (torch.randn(N, 1, 32, K, generator=gen).bfloat16().cuda() for _ in range(2))
        v, g = (torch.randn(N, 1, 32, K, generator=gen).bfloat16().cuda() for _ in range(2))
        beta = torch.randn(N, 1, 32).bfloat16().cuda()
        A_log, dt_bias = torch.zeros(32).cuda(), torch.zeros(32, K).cuda()
        pool = torch.zeros(N, 32, K, K).cuda()
        slots = torch.arange(N, dtype=torch.int32).cuda()
        out = torch.empty_like(v)
        args = (q, k, v, g, beta, pool, slots)
        kw = dict(out=out, A_log=A_log, dt_bias=dt_bias, gate="softplus")
        for _ in range(50):
            fastkda.decode_step(*args, **kw)
        torch.cuda.synchronize()
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            fastkda.decode_step(*args, **kw)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(
            f"decode_step N={N} H=32: host {1e6 * (t1 - t0) / n:.1f} us/call, "
            f"wall {1e6 * (t2 - t0) / n:.1f} us/call"
        )


def test_host_overhead_prefill():
    """Host time per fastkda.forward (prefill) call with out, final_state and workspace given
    (H = 32, T = 64 and varlen 8 x 64: GPU time per call below the host time, so the loop
    measures the host side: argument checks, validation, two kernel launches)."""
    for name, B, T, cu in (
        ("T=64", 1, 64, None),
        ("varlen 8x64", 1, 512, [64 * i for i in range(9)]),
    ):
        gen = torch.Generator().manual_seed(0)
        q, k, v, g = (torch.randn(B, T, 32, K, generator=gen).bfloat16().cuda() for _ in range(4))
        beta = torch.randn(B, T, 32, generator=gen).bfloat16().cuda()
        A_log, dt_bias = torch.zeros(32).cuda(), torch.zeros(32, K).cuda()
        N = B if cu is None else len(cu) - 1
        h0 = torch.zeros(N, 32, K, K).cuda()
        h1 = torch.empty_like(h0)
        cu_d = None if cu is None else torch.tensor(cu, dtype=torch.int32).cuda()
        out = torch.empty_like(v)
        kw = dict(
            A_log=A_log,
            dt_bias=dt_bias,
            gate="softplus",
            cu_seqlens=cu_d,
            initial_state=h0,
            final_state=h1,
        )
        ws_bytes = fastkda.forward_workspace_size(q, k, v, g, beta, **kw)
        kw.update(out=out, workspace=torch.empty(ws_bytes, dtype=torch.uint8, device="cuda"))
        for _ in range(50):
            fastkda.forward(q, k, v, g, beta, **kw)
        torch.cuda.synchronize()
        n = 300
        t0 = time.perf_counter()
        for _ in range(n):
            fastkda.forward(q, k, v, g, beta, **kw)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(
            f"forward (prefill) {name} H=32: host {1e6 * (t1 - t0) / n:.1f} us/call, "
            f"wall {1e6 * (t2 - t0) / n:.1f} us/call"
        )
