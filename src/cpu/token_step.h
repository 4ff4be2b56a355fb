// Per-token pieces of DESIGN §2 shared by the CPU paths: reading one token's inputs (l2 norm,
// raw gate, beta activation), the reference log-decay, one step of the recurrence, and state
// matrix load/store between the caller's buffers (f32/bf16, V-first/K-first) and a working copy.
//
// Templated on the working precision R: double for the oracle and the decode step, float for the
// chunked path's preprocessing.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"

namespace fastkda::cpu {

// Marks a loop whose arrays never overlap. Without it GCC vectorises such a loop twice, behind a
// run-time check on how close the arrays lie, and under GCC's default -ffp-contract=fast the two
// copies round differently (FMA or not). Results then depended on where the heap had put the
// buffers: 1-ulp differences between identical calls, caught by the bitwise invariant tests.
// With one code path per loop (trip counts are multiples of 16), results are repeatable.
#if defined(__clang__)
#define FASTKDA_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define FASTKDA_IVDEP _Pragma("GCC ivdep")
#else
#define FASTKDA_IVDEP
#endif

// The sum of 8 partial sums, in a fixed order.
template <class R>
inline R lane_sum(const R* l) {
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

// sum_c x[c] * y[c] with 8 independent partial sums: GCC does not reorder a plain float/double
// reduction without -ffast-math, so it would stay scalar; 8 lanes let it use full vectors. The
// summation order is fixed, hence results are deterministic.
template <class R>
inline R dot(const R* x, const R* y, int n) {
  R lane[8] = {};
  int c = 0;
  for (; c + 8 <= n; c += 8)
    for (int l = 0; l < 8; ++l) lane[l] += x[c + l] * y[c + l];
  for (; c < n; ++c) lane[0] += x[c] * y[c];
  return lane_sum(lane);
}

// One token's inputs for one value head h, in working precision R.
//   q, k: [K] (l2-normalised when p.l2norm_qk); v: [V]; g: [K] the raw gate; returns beta
//   (activated). `row` indexes the flattened token axis ([B*T] forward, [N*tokens] decode).
template <class R>
inline R load_token(const KdaInputs& p, const Strides& s, int64_t row, int h, R* q, R* k, R* v,
                    R* g) {
  const int K = p.K, V = p.V;
  const int hq = h / (p.HV / p.H);  // GVA: value head h reads q/k head h / (HV / H)
  const int64_t q0 = row * s.q + int64_t(hq) * K, k0 = row * s.k + int64_t(hq) * K;
  for (int c = 0; c < K; ++c) q[c] = R(load_float(p.q, p.io_dtype, q0 + c));
  for (int c = 0; c < K; ++c) k[c] = R(load_float(p.k, p.io_dtype, k0 + c));
  if (p.l2norm_qk) {
    const R rq = R(1) / std::sqrt(dot(q, q, K) + R(1e-6));
    const R rk = R(1) / std::sqrt(dot(k, k, K) + R(1e-6));
    for (int c = 0; c < K; ++c) q[c] *= rq;
    for (int c = 0; c < K; ++c) k[c] *= rk;
  }
  const int64_t v0 = row * s.v + int64_t(h) * V, g0 = row * s.g + int64_t(h) * K;
  for (int c = 0; c < V; ++c) v[c] = R(load_float(p.v, p.io_dtype, v0 + c));
  for (int c = 0; c < K; ++c) g[c] = R(load_float(p.g, p.g_dtype, g0 + c));
  return beta_activation<R>(p.beta_mode, R(load_float(p.beta, p.beta_dtype, row * s.beta + h)));
}

// Log-decay a = gate(g) of one token and value head h with the reference activations of
// common.h (DESIGN §2 step 2); A_log absent means A = 1, dt_bias absent means 0.
template <class R>
inline void log_decay(const KdaInputs& p, int h, const R* g, R* a) {
  const R A = p.A_log ? std::exp(R(p.A_log[h])) : R(1);
  const R lambda = R(p.lower_bound);
  for (int c = 0; c < p.K; ++c) {
    const R bias = p.dt_bias ? R(p.dt_bias[int64_t(h) * p.K + c]) : R(0);
    a[c] = gate_log_decay<R>(p.gate_mode, g[c], bias, A, lambda);
  }
}

// One step of the recurrence on the working state St = S^T, [V][K]:
//   S <- Diag(decay) S;  S <- S + k beta (v - S^T k)^T;  o = scale * S^T q  (after the update).
// Each row St[iv] is independent, so the whole step is one pass over the state.
template <class R>
inline void token_step(R* St, const R* q, const R* k, const R* v, const R* decay, R beta, R scale,
                       R* o, int K, int V) {
  for (int iv = 0; iv < V; ++iv) {
    R* row = St + int64_t(iv) * K;
    FASTKDA_IVDEP
    for (int c = 0; c < K; ++c) row[c] *= decay[c];
    const R u = beta * (v[iv] - dot(row, k, K));
    FASTKDA_IVDEP
    for (int c = 0; c < K; ++c) row[c] += k[c] * u;
    o[iv] = scale * dot(row, q, K);
  }
}

// Element offset of state matrix (slot, h) inside a [slots, HV, K*V] state buffer.
inline int64_t state_matrix_offset(int64_t slot, int h, int HV, int K, int V) {
  return (slot * HV + h) * int64_t(K) * V;
}

// First chunk-boundary-state row of each sequence (ForwardParams::boundary_states): the prefix
// sums of ceil(L_n / 64); empty when no boundary states are requested.
inline std::vector<int64_t> boundary_base_rows(const ForwardParams& p) {
  std::vector<int64_t> base;
  if (!p.boundary_states) return base;
  const int64_t C = ForwardParams::kBoundaryInterval, N = num_sequences(p);
  base.resize(size_t(N));
  int64_t rows = 0;
  for (int64_t n = 0; n < N; ++n) {
    int64_t begin, end;
    sequence_range(p, n, &begin, &end);
    base[size_t(n)] = rows;
    rows += (end - begin + C - 1) / C;
  }
  return base;
}

// Copies one K x V state matrix from a caller buffer (any dtype/layout) into a working copy
// with layout `dst_layout`; a null source means zeros.
template <class R>
inline void load_state(const void* src, DType dtype, StateLayout layout, int64_t offset, int K,
                       int V, R* dst, StateLayout dst_layout) {
  for (int ik = 0; ik < K; ++ik)
    for (int iv = 0; iv < V; ++iv)
      dst[state_offset(dst_layout, K, V, ik, iv)] =
          src ? R(load_float(src, dtype, offset + state_offset(layout, K, V, ik, iv))) : R(0);
}

template <class R>
inline void store_state(const R* src, StateLayout src_layout, void* dst, DType dtype,
                        StateLayout layout, int64_t offset, int K, int V) {
  for (int ik = 0; ik < K; ++ik)
    for (int iv = 0; iv < V; ++iv)
      store_float(dst, dtype, offset + state_offset(layout, K, V, ik, iv),
                  float(src[state_offset(src_layout, K, V, ik, iv)]));
}

}  // namespace fastkda::cpu
