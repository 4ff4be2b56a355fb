// The fp64 token recurrence of DESIGN §2: the oracle every fast path is measured against.
//
// Work item = (sequence n, value head h); items run in parallel with nothing shared writable.
// Per item: load the initial state (or zeros) into a double S^T [V][K], run token_step for each
// token of the sequence (inputs converted to double before any arithmetic: l2 norm, gate and beta
// activations, decay exp(a) all in double), write out rows, then write the final state.
// Nothing is rounded below double until the stores into caller buffers. Chunk-boundary states
// (the state before tokens 0, 64, 128, .. of each sequence) are stored when requested.
#include <vector>

#include "common.h"
#include "cpu/parallel.h"
#include "cpu/token_step.h"

namespace fastkda::cpu {

namespace {

// Slot of sequence n in the state buffers, or -1 for "start from zeros, write nothing".
int64_t state_slot(const ForwardParams& p, int64_t n) {
  return p.state_indices ? int64_t(p.state_indices[n]) : n;
}

}  // namespace

void forward_recurrent(const ForwardParams& p) {
  const int K = p.K, V = p.V, HV = p.HV;
  const Strides s = token_strides(p);
  const double scale = double(effective_scale(p));
  const int64_t N = num_sequences(p);
  const double cost = double(p.B * p.T + N) / double(N ? N : 1) * double(K) * V;
  const std::vector<int64_t> boundary_base = boundary_base_rows(p);
  constexpr int64_t kInterval = ForwardParams::kBoundaryInterval;

  parallel_items(N * HV, cost, 1e6, [&] {
    // Per-thread scratch, reused for every item this thread runs.
    return [&, St = std::vector<double>(size_t(K) * V), q = std::vector<double>(size_t(K)),
            k = std::vector<double>(size_t(K)), v = std::vector<double>(size_t(V)),
            g = std::vector<double>(size_t(K)), a = std::vector<double>(size_t(K)),
            o = std::vector<double>(size_t(V))](int64_t item) mutable {
      const int64_t n = item / HV;
      const int h = int(item % HV);
      const int64_t slot = state_slot(p, n);
      const bool has_slot = slot >= 0;

      load_state(has_slot ? p.initial_state : nullptr, p.initial_state_dtype, p.state_layout,
                 state_matrix_offset(slot, h, HV, K, V), K, V, St.data(), StateLayout::kVFirst);

      int64_t begin, end;
      sequence_range(p, n, &begin, &end);
      for (int64_t t = begin; t < end; ++t) {
        if (p.boundary_states && (t - begin) % kInterval == 0)  // the state before token t
          store_state(St.data(), StateLayout::kVFirst, p.boundary_states, p.boundary_states_dtype,
                      p.state_layout,
                      state_matrix_offset(boundary_base[n] + (t - begin) / kInterval, h, HV, K, V),
                      K, V);
        const double beta = load_token(p, s, t, h, q.data(), k.data(), v.data(), g.data());
        log_decay(p, h, g.data(), a.data());
        for (int c = 0; c < K; ++c) a[c] = std::exp(a[c]);  // decay factor, in (0, 1]
        token_step(St.data(), q.data(), k.data(), v.data(), a.data(), beta, scale, o.data(), K, V);
        const int64_t o0 = t * s.out + int64_t(h) * V;
        for (int c = 0; c < V; ++c) store_float(p.out, p.io_dtype, o0 + c, float(o[c]));
      }

      if (has_slot && p.final_state)
        store_state(St.data(), StateLayout::kVFirst, p.final_state, p.final_state_dtype,
                    p.state_layout, state_matrix_offset(slot, h, HV, K, V), K, V);
    };
  });
}

}  // namespace fastkda::cpu
