"""fastkda.fwd: FlashKDA's flash_kda.fwd semantics on CPU.

q, k, v, g [B, T, H, 128] bf16, beta [B, T, H] bf16 logits, the bounded gate with A_log [H] and
dt_bias [H, K] in f32, l2norm inside, out written in place, states [N, H, V, K] (V-first).
Checked against fla's fp64 reference on the same bf16 inputs (FA3-style rule: error <= 2x the
error of rounding the exact result to the output dtype + 1e-4) and against fastkda's recurrence.
"""

import fastkda
import pytest
import torch
from kda_ref import make_inputs, random_state, reference, rms_rel

B, T, H, K = 2, 40, 2, 128
CU = [0, 13, 13, 50, 51, 80]  # B = 1, T = 80: an empty and a 1-token sequence


def bound_for(ref, dtype):
    """2x the error of rounding the exact result to `dtype`, + 1e-4."""
    return 2 * rms_rel(ref.to(dtype), ref) + 1e-4


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("varlen", [False, True], ids=["batch", "varlen"])
def test_fwd_against_fla_naive(state_dtype, varlen):
    b, t = (1, CU[-1]) if varlen else (B, T)
    q, k, v, g, beta, A_log, dt_bias = make_inputs(b, t, H, H, K, K, seed=7, dtype=torch.bfloat16)
    N = len(CU) - 1 if varlen else b
    cu = torch.tensor(CU, dtype=torch.int64) if varlen else None
    h0 = random_state(N, H, K, K, v_first=True).to(state_dtype)  # [N, H, V, K]
    out = torch.full_like(v, float("nan"))
    final = torch.full_like(h0, float("nan"))
    scale = K**-0.5
    ret = fastkda.fwd(
        q,
        k,
        v,
        g,
        beta,
        scale,
        out,
        A_log,
        dt_bias,
        -5.0,
        initial_state=h0,
        final_state=final,
        cu_seqlens=cu,
    )
    assert ret is None  # like flash_kda.fwd: results are written in place
    assert final.dtype == state_dtype and out.dtype == torch.bfloat16

    o_ref, s_ref = reference(
        q,
        k,
        v,
        g,
        beta,
        gate="bounded",
        A_log=A_log,
        dt_bias=dt_bias,
        lower_bound=-5.0,
        scale=scale,
        initial_state=h0.double().transpose(-1, -2),
        cu_seqlens=CU if varlen else None,
    )
    s_ref = s_ref.transpose(-1, -2)  # V-first
    err_o, err_s = rms_rel(out, o_ref), rms_rel(final, s_ref)
    print(f"fwd {state_dtype} varlen={varlen}: out {err_o:.2e} state {err_s:.2e}")
    assert err_o <= bound_for(o_ref, torch.bfloat16)
    assert err_o <= 5e-3
    assert err_s <= (1e-4 if state_dtype == torch.float32 else bound_for(s_ref, torch.bfloat16))

    # Same result as fastkda's fp64 recurrence through the fla-style entry point.
    o_rec, s_rec = fastkda.fused_recurrent_kda(
        q,
        k,
        v,
        g,
        beta,
        A_log,
        dt_bias,
        scale=scale,
        initial_state=h0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
        lower_bound=-5.0,
        state_v_first=True,
        cu_seqlens=cu,
    )
    assert rms_rel(out, o_rec) <= 5e-3
    assert rms_rel(final, s_rec) <= (1e-4 if state_dtype == torch.float32 else 5e-3)


def test_fwd_without_states_and_default_scale():
    q, k, v, g, beta, A_log, dt_bias = make_inputs(1, 20, H, H, K, K, seed=3, dtype=torch.bfloat16)
    out = torch.empty_like(v)
    fastkda.fwd(q, k, v, g, beta, None, out, A_log, dt_bias, -5.0)
    o_ref, _ = reference(q, k, v, g, beta, gate="bounded", A_log=A_log, dt_bias=dt_bias)
    assert rms_rel(out, o_ref) <= bound_for(o_ref, torch.bfloat16)


def test_fwd_final_state_only_and_mixed_dtypes():
    """initial_state None -> zeros; final state written; an f32 state stays f32."""
    q, k, v, g, beta, A_log, dt_bias = make_inputs(B, 24, H, H, K, K, seed=4, dtype=torch.bfloat16)
    out, final = torch.empty_like(v), torch.full((B, H, K, K), float("nan"))
    fastkda.fwd(q, k, v, g, beta, 0.1, out, A_log, dt_bias, -2.5, final_state=final)
    o_ref, s_ref = reference(
        q, k, v, g, beta, gate="bounded", A_log=A_log, dt_bias=dt_bias, lower_bound=-2.5, scale=0.1
    )
    assert rms_rel(final, s_ref.transpose(-1, -2)) <= 1e-4
    assert rms_rel(out, o_ref) <= bound_for(o_ref, torch.bfloat16)
