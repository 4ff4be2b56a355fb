// Decode step on a state pool (DecodeParams in fastkda.h): 1..8 tokens per sequence, in place.
//
// The step is the token recurrence of DESIGN §2, so it runs the oracle's code (token_step.h) in
// double: a decode step equals a one-token recurrent forward bit for bit, and the only rounding
// is the final store into the pool (f32 or bf16).
//
// Work item = (row n, value head h). Row n reads slots[n, rc] with rc = num_accepted[n] - 1 when
// per-token states are kept with num_accepted (else rc = 0); a negative slot there marks a padding
// row: out = 0 for its tokens and nothing is read or written. Without per-token states the state
// goes back to the slot it was read from; with them, the state after token t goes to slots[n, t]
// (skipped where negative). The whole state is read before anything is written, so read and
// write slots of one row may coincide.
#include <vector>

#include "common.h"
#include "cpu/parallel.h"
#include "cpu/token_step.h"

namespace fastkda::cpu {

void decode(const DecodeParams& p) {
  const int K = p.K, V = p.V, HV = p.HV, tokens = p.tokens;
  const Strides s = token_strides(p);
  const double scale = double(effective_scale(p));
  const int64_t ss = p.slot_stride;

  parallel_items(p.N * HV, double(tokens + 2) * K * V, 1e6, [&] {
    return [&, St = std::vector<double>(size_t(K) * V), q = std::vector<double>(size_t(K)),
            k = std::vector<double>(size_t(K)), v = std::vector<double>(size_t(V)),
            g = std::vector<double>(size_t(K)), a = std::vector<double>(size_t(K)),
            o = std::vector<double>(size_t(V))](int64_t item) mutable {
      const int64_t n = item / HV;
      const int h = int(item % HV);
      const int64_t read_col =
          (p.per_token_states && p.num_accepted) ? int64_t(p.num_accepted[n]) - 1 : 0;
      const int64_t read_slot = p.slots[n * ss + read_col];

      if (read_slot < 0) {  // padding row
        for (int t = 0; t < tokens; ++t) {
          const int64_t o0 = (n * tokens + t) * s.out + int64_t(h) * V;
          for (int c = 0; c < V; ++c) store_float(p.out, p.io_dtype, o0 + c, 0.0f);
        }
        return;
      }

      load_state(p.state_pool, p.state_dtype, p.state_layout,
                 state_matrix_offset(read_slot, h, HV, K, V), K, V, St.data(),
                 StateLayout::kVFirst);
      for (int t = 0; t < tokens; ++t) {
        const int64_t row = n * tokens + t;
        const double beta = load_token(p, s, row, h, q.data(), k.data(), v.data(), g.data());
        log_decay(p, h, g.data(), a.data());
        for (int c = 0; c < K; ++c) a[c] = std::exp(a[c]);  // decay factor, in (0, 1]
        token_step(St.data(), q.data(), k.data(), v.data(), a.data(), beta, scale, o.data(), K, V);
        const int64_t o0 = row * s.out + int64_t(h) * V;
        for (int c = 0; c < V; ++c) store_float(p.out, p.io_dtype, o0 + c, float(o[c]));

        const int64_t write_slot = p.per_token_states ? int64_t(p.slots[n * ss + t]) : -1;
        if (write_slot >= 0)
          store_state(St.data(), StateLayout::kVFirst, p.state_pool, p.state_dtype, p.state_layout,
                      state_matrix_offset(write_slot, h, HV, K, V), K, V);
      }
      if (!p.per_token_states)
        store_state(St.data(), StateLayout::kVFirst, p.state_pool, p.state_dtype, p.state_layout,
                    state_matrix_offset(read_slot, h, HV, K, V), K, V);
    };
  });
}

}  // namespace fastkda::cpu
