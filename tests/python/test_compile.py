"""torch.compile(fullgraph=True) traces functions that call fastkda (the torch.library custom
ops with their fake implementations), with in-place outputs and states kept correct."""

import fastkda
import torch
from kda_ref import make_inputs, random_state

H, K = 2, 64


def test_custom_ops_registered():
    for name in ("forward", "forward_pool", "decode"):
        assert hasattr(torch.ops.fastkda, name)


def test_opcheck_forward():
    q, k, v, g, beta, A_log, dt_bias = make_inputs(1, 9, H, H, K, K)
    out = torch.empty_like(v)
    final = torch.empty(1, H, K, K)
    torch.library.opcheck(
        torch.ops.fastkda.forward.default,
        (
            q,
            k,
            v,
            g,
            beta,
            out,
            A_log,
            dt_bias,
            None,
            None,
            None,
            final,
            None,
            None,
            1,
            0.0,
            0,
            True,
            0.0,
            1,
            0,
        ),
        test_utils=("test_schema", "test_faketensor"),
    )


def test_compile_chunk_kda_fullgraph():
    q, k, v, g, beta, A_log, dt_bias = make_inputs(2, 21, H, H, K, K, seed=1)
    h0 = random_state(2, H, K, K)

    def layer(q, k, v, g, beta, h0):
        o, s = fastkda.chunk_kda(
            q * 2.0,
            k,
            v,
            g,
            beta,
            initial_state=h0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True,
            A_log=A_log,
            dt_bias=dt_bias,
            lower_bound=-5.0,
            safe_gate=True,
        )
        return torch.relu(o), s * 1.0

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    o_eager, s_eager = layer(q, k, v, g, beta, h0)
    o_comp, s_comp = compiled(q, k, v, g, beta, h0)
    assert torch.equal(o_eager, o_comp) and torch.equal(s_eager, s_comp)


def test_compile_fwd_in_place_and_decode_step():
    q, k, v, g, beta, A_log, dt_bias = make_inputs(
        1, 16, H, H, 128, 128, seed=2, dtype=torch.bfloat16
    )

    def prefill_then_decode(q, k, v, g, beta, out, state, pool, slots):
        fastkda.fwd(
            q[:, :15],
            k[:, :15],
            v[:, :15],
            g[:, :15],
            beta[:, :15],
            None,
            out,
            A_log,
            dt_bias,
            -5.0,
            final_state=state,
        )
        pool[1].copy_(state[0])
        o = fastkda.decode_step(
            q[:, 15:],
            k[:, 15:],
            v[:, 15:],
            g[:, 15:],
            beta[:, 15:],
            pool,
            slots,
            A_log=A_log,
            dt_bias=dt_bias,
        )
        return o.float().sum()

    def buffers():
        return (
            torch.zeros(1, 15, H, 128, dtype=torch.bfloat16),
            torch.zeros(1, H, 128, 128),
            torch.zeros(2, H, 128, 128),
            torch.tensor([1], dtype=torch.int32),
        )

    eager = buffers()
    r_eager = prefill_then_decode(q, k, v, g, beta, *eager)
    compiled = torch.compile(prefill_then_decode, fullgraph=True, backend="aot_eager")
    comp = buffers()
    r_comp = compiled(q, k, v, g, beta, *comp)
    assert torch.equal(r_eager, r_comp)
    for a, b in zip(eager, comp):  # out, state and the pool mutated in place as in eager mode
        assert torch.equal(a, b)
    assert eager[2][1].abs().sum() > 0


def test_compile_prefill_on_pool_with_boundary_states():
    """fastkda.prefill (the forward_pool op: pool read and written in place, boundary states)
    under torch.compile(fullgraph=True) == eager, buffers mutated alike."""
    q, k, v, g, beta, A_log, dt_bias = make_inputs(
        1, 80, H, H, 128, 128, seed=3, dtype=torch.bfloat16
    )
    cu = torch.tensor([0, 70, 80], dtype=torch.int32)  # 2 sequences: ceil(70/64) + 1 = 3 rows

    def run(pool, boundary):
        o = fastkda.prefill(
            q,
            k,
            v,
            g,
            beta,
            pool,
            torch.tensor([2, 0], dtype=torch.int32),
            cu_seqlens=cu,
            A_log=A_log,
            dt_bias=dt_bias,
            gate="softplus",
            boundary_states=boundary,
        )
        return o.float().sum()

    def buffers():
        gen = torch.Generator().manual_seed(4)
        return torch.randn(3, H, 128, 128, generator=gen) * 0.1, torch.zeros(3, H, 128, 128)

    eager = buffers()
    r_eager = run(*eager)
    comp = buffers()
    r_comp = torch.compile(run, fullgraph=True, backend="aot_eager")(*comp)
    assert torch.equal(r_eager, r_comp)
    for a, b in zip(eager, comp):
        assert torch.equal(a, b)
    assert not torch.equal(eager[0], buffers()[0])  # the pool rows of both sequences changed
    assert eager[1][2].abs().sum() > 0  # the second sequence's boundary row was written
