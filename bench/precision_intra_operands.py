"""Where the intra kernel's row norms go: into the truncated tf32 operands, or onto the results.

The intra products A'[r, s] = sum_c k^_rc k^_sc 2^(L_r - L_s) take truncated tf32 operands (raw
f32 bits: the tensor cores ignore the low 13 bits) carrying 1 + TRUNC_BIAS, the truncation's mean
relative error for mantissas spread log-uniformly (precision_chunk.py). Two ways to form them,
emulated here on the block rows 8..15 x columns 0..7 of a 16-token chunk (anchor row 7):
  (1) operands k^ 2^L with k^ = k rk (1 + TRUNC_BIAS): the norms and the compensation inside
      (the kept GPU recipe, intra_warp.cuh);
  (2) operands k 2^L from the raw bf16 k, the result scaled by rk_r rk_s (1 + TRUNC_BIAS)^2
      (session 19's first version: 128 multiplies per lane and chunk fewer).
The compensation assumes the truncated bits are spread as for random mantissas. A raw bf16 value
(8 significant bits) times 2^L is not such a value when 2^L is 1 or close to it: the product is
exact in tf32 (no error to compensate; about half the operands of the bounded case here) or lies
just below a short-mantissa value, where truncation drops nearly a whole tf32 ulp (the collinear
case: raw operands, uncompensated, 1.6e-3). The row norm rk is an arbitrary f32, so in (1) the
operands' mantissas are spread and the compensation holds. On the GPU (4 pinned seeds) (2) took
the collinear case's final state from 9.7e-5 to 2.0e-4 and the other bounded cases' +10-15 %.

    python3 bench/precision_intra_operands.py
"""

import numpy as np

from precision_chunk import TRUNC_BIAS, bf16, tf32_trunc

K = 128


def block_products(k, a, comp):
    """Exact, (1) and (2) products of one chunk's block rows 8..15 x columns 0..7."""
    f = np.float32
    G = np.cumsum(a, 0) / np.log(2)  # log2 cumulative decay
    rk = 1 / np.sqrt((k.astype(np.float64) ** 2).sum(1) + 1e-6)
    L = (G - G[7]).astype(f)
    r, s = np.arange(8, 16), np.arange(0, 8)
    exact = (k[r] * rk[r, None] * 2.0 ** L[r]) @ (k[s] * rk[s, None] * 2.0 ** -L[s]).T
    e_r, e_s = np.exp2(L[r]).astype(f), np.exp2(-L[s]).astype(f)

    def trunc(x):
        return tf32_trunc(x.astype(f)).astype(np.float64)

    kn = (k * rk[:, None].astype(f) * comp).astype(f)
    v1 = trunc(kn[r] * e_r) @ trunc(kn[s] * e_s).T
    v2 = (trunc(k[r] * e_r) @ trunc(k[s] * e_s).T) * np.outer(rk[r], rk[s]) * float(comp) ** 2
    return exact, v1, v2


def main():
    rng = np.random.default_rng(0)
    comp = np.float32(1 + TRUNC_BIAS)
    print("RMS error of A' entries relative to their mean magnitude, 200 chunks per case")
    print("| case | (1) norms in the operands | (2) norms on the results |")
    print("|---|---|---|")
    for case in ("collinear gate (raw -12: almost no decay)", "bounded (the tests' default)"):
        e1, e2 = [], []
        for _ in range(200):
            k = bf16(rng.standard_normal((16, K)).astype(np.float32))
            if case.startswith("collinear"):
                a = -np.log1p(np.exp(np.full((16, K), -12.0)))
            else:
                A = 1 + 15 * rng.random()
                dt = -4 + 0.5 * rng.standard_normal(K)
                a = -5.0 / (1 + np.exp(-A * (rng.standard_normal((16, K)) + dt)))
            exact, v1, v2 = block_products(k, a, comp)
            scale = np.abs(exact).mean()
            e1.append(((v1 - exact) / scale).ravel())
            e2.append(((v2 - exact) / scale).ravel())
        r1, r2 = (np.sqrt((np.concatenate(e) ** 2).mean()) for e in (e1, e2))
        print(f"| {case} | {r1:.2e} | {r2:.2e} |")


if __name__ == "__main__":
    main()
