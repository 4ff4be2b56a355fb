"""Serving entry points: decode_step on a state pool (slots, padding, per-token states for
speculative decoding) and prefill on the pool (state_indices), against fastkda's fla-style
entry points (themselves checked against fla in test_reference.py)."""

import fastkda
import numpy as np
import pytest
import torch
from kda_ref import make_inputs, random_state, reference, rms_rel

H, HV, K, V = 2, 4, 64, 64
GATE = dict(gate="softplus")


def params(seed=0):
    *_, A_log, dt_bias = make_inputs(1, 1, H, HV, K, V, seed=seed)
    return dict(A_log=A_log, dt_bias=dt_bias)


def recurrent(q, k, v, g, beta, h0, p, cu=None):
    """Reference: fastkda's fp64 recurrence (fla-style entry), V-first states."""
    return fastkda.fused_recurrent_kda(
        q,
        k,
        v,
        g,
        beta,
        p["A_log"],
        p["dt_bias"],
        initial_state=h0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
        state_v_first=True,
        cu_seqlens=cu,
    )


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_decode_steps_equal_recurrence(state_dtype):
    N, steps, slots_of = 3, 4, [4, 0, 2]
    p = params()
    pool = random_state(6, HV, K, V, v_first=True).to(state_dtype)
    h0 = pool[slots_of].float()
    untouched = pool[[1, 3, 5]].clone()
    q, k, v, g, beta, *_ = make_inputs(N, steps, H, HV, K, V, seed=3)
    slots = torch.tensor(slots_of, dtype=torch.int32)
    out = torch.empty(N, 1, HV, V)
    outs = []
    for t in range(steps):
        sl = slice(t, t + 1)
        r = fastkda.decode_step(
            q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], pool, slots, out=out, **p, **GATE
        )
        assert r is out
        outs.append(out.clone())
    o_ref, s_ref = recurrent(q, k, v, g, beta, h0, p)
    tol = 1e-6 if state_dtype == torch.float32 else 1e-2
    assert rms_rel(torch.cat(outs, 1), o_ref) <= tol
    assert rms_rel(pool[slots_of].float(), s_ref) <= tol
    assert torch.equal(pool[[1, 3, 5]], untouched)


def test_decode_padding_rows_and_multi_token():
    p = params(1)
    pool = random_state(3, HV, K, V, v_first=True)
    before = pool.clone()
    q, k, v, g, beta, *_ = make_inputs(2, 3, H, HV, K, V, seed=4)
    out = torch.full((2, 3, HV, V), 7.0)
    fastkda.decode_step(
        q, k, v, g, beta, pool, torch.tensor([-1, 1], dtype=torch.int32), out=out, **p, **GATE
    )
    assert torch.equal(out[0], torch.zeros_like(out[0]))  # padding row: out = 0, no state touched
    assert torch.equal(pool[[0, 2]], before[[0, 2]])
    o_ref, s_ref = recurrent(q[1:], k[1:], v[1:], g[1:], beta[1:], before[1:2], p)
    assert rms_rel(out[1:], o_ref) <= 1e-6 and rms_rel(pool[1:2], s_ref) <= 1e-6


def test_decode_per_token_states_and_num_accepted():
    """fla's speculative-decoding convention: the state after token t goes to slots[n, t]; the
    step starts from slots[n, num_accepted[n] - 1]."""
    p = params(2)
    tokens = 3
    pool = random_state(8, HV, K, V, v_first=True)
    before = pool.clone()
    slots = torch.tensor([[0, 1, 2], [3, 4, -1]], dtype=torch.int32)
    num_accepted = torch.tensor([2, 1], dtype=torch.int32)  # read rows: slot 1 and slot 3
    q, k, v, g, beta, *_ = make_inputs(2, tokens, H, HV, K, V, seed=5)
    out = fastkda.decode_step(
        q, k, v, g, beta, pool, slots, per_token_states=True, num_accepted=num_accepted, **p, **GATE
    )
    h0 = before[[1, 3]]
    o_ref, _ = recurrent(q, k, v, g, beta, h0, p)
    assert rms_rel(out, o_ref) <= 1e-6
    for t in range(tokens):
        _, s_t = recurrent(
            q[:, : t + 1], k[:, : t + 1], v[:, : t + 1], g[:, : t + 1], beta[:, : t + 1], h0, p
        )
        assert rms_rel(pool[slots[0, t]], s_t[0]) <= 1e-6
        if slots[1, t] >= 0:
            assert rms_rel(pool[slots[1, t]], s_t[1]) <= 1e-6
    assert torch.equal(pool[5:], before[5:])  # slot -1 skipped a write; others untouched


def test_decode_argument_errors():
    p = params()
    pool = torch.zeros(2, HV, V, K)
    q, k, v, g, beta, *_ = make_inputs(2, 1, H, HV, K, V)
    for slots, needle in (
        (torch.tensor([0, 1]), "slots: expected dtype i32"),
        (torch.tensor([0, 2], dtype=torch.int32), "slots"),
        (torch.tensor([0], dtype=torch.int32), "slots: expected shape"),
    ):
        with pytest.raises(ValueError, match=needle):
            fastkda.decode_step(q, k, v, g, beta, pool, slots, **p, **GATE)
    with pytest.raises(ValueError, match="state_pool"):
        fastkda.decode_step(
            q,
            k,
            v,
            g,
            beta,
            torch.zeros(2, HV, V, K + 1),
            torch.tensor([0, 1], dtype=torch.int32),
            **p,
            **GATE,
        )
    with pytest.raises(ValueError, match="gate"):
        fastkda.decode_step(
            q, k, v, g, beta, pool, torch.tensor([0, 1], dtype=torch.int32), gate="sigmoid"
        )
    assert torch.equal(pool, torch.zeros_like(pool))


def test_prefill_on_pool_then_decode_equals_longer_prefill():
    p = params(3)
    cu = [0, 10, 10, 31]  # three sequences, one empty
    T = cu[-1]
    q, k, v, g, beta, *_ = make_inputs(1, T + 2, H, HV, K, V, seed=6)
    pool = random_state(5, HV, K, V, v_first=True)
    before = pool.clone()
    indices = torch.tensor([3, -1, 0], dtype=torch.int32)  # -1: start from zeros, write nothing
    cu_t = torch.tensor(cu, dtype=torch.int32)
    out = fastkda.prefill(
        q[:, :T],
        k[:, :T],
        v[:, :T],
        g[:, :T],
        beta[:, :T],
        pool,
        indices,
        cu_seqlens=cu_t,
        **p,
        **GATE,
    )
    h0 = torch.stack([before[3], torch.zeros_like(before[0]), before[0]])
    o_ref, s_ref = recurrent(q[:, :T], k[:, :T], v[:, :T], g[:, :T], beta[:, :T], h0, p, cu_t)
    assert rms_rel(out, o_ref) <= 1e-4
    assert rms_rel(pool[3], s_ref[0]) <= 1e-4 and rms_rel(pool[0], s_ref[2]) <= 1e-4
    assert torch.equal(pool[[1, 2, 4]], before[[1, 2, 4]])

    # two decode steps of sequence 0 from its pool row == prefill over its 12 tokens
    tok = torch.cat([q[:, :10], q[:, T:]], 1), torch.cat([k[:, :10], k[:, T:]], 1)
    vv, gg, bb = (torch.cat([x[:, :10], x[:, T:]], 1) for x in (v, g, beta))
    for t in range(2):
        sl = slice(T + t, T + t + 1)
        o_dec = fastkda.decode_step(
            q[:, sl],
            k[:, sl],
            v[:, sl],
            g[:, sl],
            beta[:, sl],
            pool,
            torch.tensor([3], dtype=torch.int32),
            **p,
            **GATE,
        )
    o_long, s_long = recurrent(*tok, vv, gg, bb, before[3:4], p)
    assert rms_rel(o_dec[0, 0], o_long[0, -1]) <= 1e-4
    assert rms_rel(pool[3], s_long[0]) <= 1e-4


def test_prefill_matches_fla_reference_k_first():
    """k_first pools, bounded gate, against fla's fp64 reference."""
    q, k, v, g, beta, A_log, dt_bias = make_inputs(2, 17, H, HV, K, V, seed=8)
    pool = random_state(4, HV, K, V)
    h0 = pool[[2, 1]].clone()
    fastkda.prefill(
        q,
        k,
        v,
        g,
        beta,
        pool,
        torch.tensor([2, 1], dtype=torch.int32),
        A_log=A_log,
        dt_bias=dt_bias,
        gate="bounded",
        lower_bound=-5.0,
        state_layout="k_first",
    )
    _, s_ref = reference(
        q, k, v, g, beta, gate="bounded", A_log=A_log, dt_bias=dt_bias, initial_state=h0
    )
    assert rms_rel(pool[[2, 1]], s_ref) <= 1e-4


def test_decode_numpy():
    p = params(4)
    pool = random_state(2, HV, K, V, v_first=True)
    q, k, v, g, beta, *_ = make_inputs(2, 1, H, HV, K, V, seed=9)
    pool_np = pool.numpy().copy()
    o_np = fastkda.decode_step(
        *(x.numpy() for x in (q, k, v, g, beta)),
        pool_np,
        np.array([1, 0], dtype=np.int32),
        A_log=p["A_log"].numpy(),
        dt_bias=p["dt_bias"].numpy(),
        **GATE,
    )
    o_t = fastkda.decode_step(
        q, k, v, g, beta, pool, torch.tensor([1, 0], dtype=torch.int32), **p, **GATE
    )
    np.testing.assert_array_equal(o_np, o_t.numpy())
    np.testing.assert_array_equal(pool_np, pool.numpy())


@pytest.mark.parametrize("bs_dtype", [torch.float32, torch.bfloat16])
def test_prefill_boundary_states_equal_truncated_prefills(bs_dtype):
    """Row sum_{m<n} ceil(L_m / 64) + j holds sequence n's state before its token 64 j."""
    p = params(4)
    lens = [0, 1, 64, 65, 150]
    cu = np.cumsum([0, *lens]).tolist()
    T = cu[-1]
    q, k, v, g, beta, *_ = make_inputs(1, T, H, HV, K, V, seed=9)
    pool = random_state(len(lens), HV, K, V, v_first=True)
    before = pool.clone()
    indices = torch.arange(len(lens), dtype=torch.int32)
    rows = sum((n + 63) // 64 for n in lens)
    bstates = torch.full((rows + 1, HV, V, K), float("nan"), dtype=bs_dtype)  # + 1 sentinel row
    fastkda.prefill(
        q, k, v, g, beta, pool, indices, cu_seqlens=torch.tensor(cu, dtype=torch.int32),
        boundary_states=bstates[:rows], **p, **GATE,
    )
    assert torch.isnan(bstates[rows]).all(), "a row past num_boundary_states was written"
    row = 0
    for n, L in enumerate(lens):
        for j in range((L + 63) // 64):
            s0, s1 = cu[n], cu[n] + 64 * j
            if j == 0:
                expect = before[n]
            else:
                _, s_ref = recurrent(
                    q[:, s0:s1], k[:, s0:s1], v[:, s0:s1], g[:, s0:s1], beta[:, s0:s1],
                    before[n : n + 1], p,
                )
                expect = s_ref[0]
            tol = 1e-5 if bs_dtype == torch.float32 else 1e-2
            assert rms_rel(bstates[row].float(), expect) <= tol, (n, j)
            row += 1
    assert row == rows


def test_prefill_boundary_states_wrong_rows_rejected():
    p = params(5)
    q, k, v, g, beta, *_ = make_inputs(1, 70, H, HV, K, V, seed=2)
    pool = random_state(1, HV, K, V, v_first=True)
    before = pool.clone()
    bstates = torch.zeros(1, HV, V, K)  # needs ceil(70 / 64) = 2 rows
    with pytest.raises(ValueError, match="num_boundary_states"):
        fastkda.prefill(
            q, k, v, g, beta, pool, torch.tensor([0], dtype=torch.int32),
            boundary_states=bstates, **p, **GATE,
        )
    assert torch.equal(pool, before) and torch.equal(bstates, torch.zeros_like(bstates))
