// The chunked form of DESIGN §2 in fp32 on the CPU (chunk C = 64), mirroring the GPU algorithm.
//
// Work item = (sequence n, value head h), run in parallel; per item the fp32 state S [K][V]
// (K-first internally) walks the chunks of the sequence. Per chunk of L <= C tokens (rows padded
// with zeros to L16 = 16 * ceil(L / 16); padded rows have k = q = v = beta = 0 and a = 0, so they
// add exact zeros and leave G unchanged):
//   G_i   = sum_{s<=i} a_s                  natural-log cumulative decay, accumulated in double
//   A_ij  = beta_i k_i . (k_j o exp(G_i - G_j))   j < i     (stored negated: Aneg = -A)
//   Qk_ij = q_i . (k_j o exp(G_i - G_j))          j <= i
//   [-W | U] = (I + A)^-1 [-diag(beta) (k o exp(G)) | diag(beta) v]   forward substitution
//   Vn = U - W S;   O = scale ((q o exp(G)) S + Qk Vn)
//   S <- Diag(exp(G_last)) S + (k o exp(G_last - G))^T Vn
//
// Range: no factor exp(+G) is ever formed. Every exponent is <= 0:
//   * the diagonal 16 x 16 blocks use exact pairwise products exp(G_i - G_j) = prod_{j<s<=i} e_s
//     of the per-token decays e_s = exp(a_s) <= 1;
//   * an off-diagonal block (rows in block I, columns j < 16 I) is anchored at r = 16 I - 1, the
//     last row of block I - 1: exp(G_i - G_j) = exp(G_i - G_r) exp(G_r - G_j), both <= 1, and r
//     precedes every row of block I, so no row reads a gate from its future (fla issue 1240);
//   * G is summed in double and differenced before the conversion to float, so a -1000 gate
//     early in the chunk costs no precision in exp(G_i - G_j) of later tokens (with a float
//     cumulative sum, exp(G_i - G_j) after a softplus gate of +1000 is off by ~1e-3 and the
//     oracle tests fail).
// Gates of -1000 (or softplus gates of any size) therefore underflow to exact zeros, never
// overflow. Subnormals are flushed (FlushDenormals): they carry no information here and are slow.
//
// Chunk-boundary states (ForwardParams::boundary_states, for prefix caching) are S at the start of
// each chunk: C = 64 is also the boundary interval.
//
// Causality is bitwise: a row's result depends only on rows <= it and on the chunk's start state,
// and the tile GEMM accumulates every element in a fixed order whatever the tile height.
//
// ISA: the library is built for baseline x86-64, so the whole per-item pipeline is an
// always-inlined template instantiated three times, for SSE2, AVX2+FMA and AVX-512 (target
// attributes), and picked once per process by CPU feature (forward_chunked). Results are
// bitwise reproducible on one machine; across ISA levels they differ at fp32 rounding level
// (FMA contraction), far inside the 1e-5 bound.
#include "cpu/chunked.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <vector>

#include "common.h"
#include "cpu/fast_math.h"
#include "cpu/parallel.h"
#include "cpu/tile_gemm.h"
#include "cpu/token_step.h"

namespace fastkda::cpu {

namespace {

constexpr int kChunk = 64;  // C
constexpr int kBlock = 16;  // sub-block of the chunk: the unit of the decay anchoring
static_assert(kChunk == ForwardParams::kBoundaryInterval, "boundary states are chunk starts");
#define FASTKDA_INLINE [[gnu::always_inline]] inline

// exp(G_later - G_earlier) <= 1: the difference of two cumulative sums is taken in double.
FASTKDA_INLINE float exp_diff(double later, double earlier) {
  return exp_fast(float(later - earlier));
}

// dst[c][r] = src[r][c] for a [rows][K] tile (dst leading dimension ldd).
FASTKDA_INLINE void transpose(const float* src, int rows, int K, float* dst, int ldd) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < K; ++c) dst[c * ldd + r] = src[r * K + c];
}

// Per-thread working set of one (sequence, value head) item; row-major tiles, sizes for C = 64.
// Methods are steps of one chunk, in call order; `Gemm` is the register block of the ISA build.
// All float tiles live in one arena at fixed, 64-byte aligned offsets, so the relative placement
// of any two tiles is a function of (K, V) only, never of the heap: a compiler-generated run-time
// overlap check (see FASTKDA_IVDEP) then always takes the same branch. With separate vectors a
// scratch row landing 68 floats before k made GCC take the scalar copy of a loop that rounds
// differently, and results depended on heap history.
struct ChunkWork {
  int K, V;
  std::vector<float> arena;
  std::vector<double> G;        // [C][K] cumulative log-decay inside the chunk (double: see top)
  float *q, *k, *v, *e, *beta;  // [C][K], [C][K], [C][V], [C][K] decay exp(a), [C]
  float* qg;                    // [C][K] q o exp(G)
  float* x;                     // [C][K + V]  [-W | U]
  float *aneg, *qk;             // [C][C] -A (strictly lower), Qk (lower)
  float *rowk, *rowq;           // [16][K] anchored rows of the current block
  float *colk, *colkt;          // [48][K] anchored columns; [K][48] transposed
  float *kend, *kendt;          // [C][K] k o exp(G_last - G); [K][C] transposed
  float *vn, *o;                // [C][V]
  float* S;                     // [K][V] the state, fp32 across chunks
  float *decay_end, *g, *a;     // [K] exp(G_last); [K] one token's raw gate, log-decay
  float* pair_decay;            // [K] exp(G_i - G_j) of the current diagonal pair
  float* zeros;                 // [K] stands in for an absent dt_bias

  ChunkWork(int K_, int V_) : K(K_), V(V_), G(size_t(kChunk) * K) {
    const int C = kChunk, W = kChunk - kBlock;
    float** tiles[] = {&q,  &k,    &v,         &e,    &beta,  &qg,         &x,     &aneg,
                       &qk, &rowk, &rowq,      &colk, &colkt, &kend,       &kendt, &vn,
                       &o,  &S,    &decay_end, &g,    &a,     &pair_decay, &zeros};
    const int sizes[] = {C * K,       C * K, C * V, C * K,      C,          C * K,
                         C * (K + V), C * C, C * C, kBlock * K, kBlock * K, W * K,
                         K * W,       C * K, K * C, C * V,      C * V,      K * V,
                         K,           K,     K,     K,          K};
    static_assert(std::size(tiles) == std::size(sizes));
    size_t total = 0;
    for (int s : sizes) total += (size_t(s) + 15) / 16 * 16 + 16;  // 64-byte rounded, with a gap
    arena.assign(total + 16, 0.0f);
    // 64-byte align the first tile; every later offset is a multiple of 16 floats.
    float* base = arena.data() + (16 - (reinterpret_cast<uintptr_t>(arena.data()) / 4) % 16) % 16;
    for (size_t t = 0; t < std::size(tiles); ++t) {
      *tiles[t] = base;
      base += (size_t(sizes[t]) + 15) / 16 * 16 + 16;
    }
  }
  // The tile pointers point into the arena: a move keeps the buffer (and them), a copy would not.
  ChunkWork(ChunkWork&&) = default;
  ChunkWork(const ChunkWork&) = delete;
  ChunkWork& operator=(const ChunkWork&) = delete;

  // Rows i < L from the caller's tensors, rows L..L16-1 as neutral padding; e = exp(a), G.
  FASTKDA_INLINE void load_rows(const ForwardParams& p, const Strides& s, int h, int64_t t0, int L,
                                int L16) {
    for (int i = 0; i < L16; ++i) {
      float* qi = &q[i * K];
      float* ki = &k[i * K];
      double* Gi = &G[i * K];
      if (i < L) {
        beta[i] = load_token(p, s, t0 + i, h, qi, ki, &v[i * V], g);
        log_decay_fast(p, h, g, zeros, a);
      } else {
        beta[i] = 0.0f;
        for (int c = 0; c < K; ++c) qi[c] = ki[c] = a[c] = 0.0f;
        for (int c = 0; c < V; ++c) v[i * V + c] = 0.0f;
      }
      FASTKDA_IVDEP
      for (int c = 0; c < K; ++c) e[i * K + c] = exp_fast(a[c]);
      if (i == 0) {
        for (int c = 0; c < K; ++c) Gi[c] = double(a[c]);
      } else {
        const double* Gprev = Gi - K;
        FASTKDA_IVDEP
        for (int c = 0; c < K; ++c) Gi[c] = Gprev[c] + double(a[c]);
      }
    }
  }

  // Cross-chunk factors (all <= 1): q o exp(G), the RHS of W, k o exp(G_last - G), exp(G_last).
  FASTKDA_INLINE void decay_terms(int L16) {
    const double* Glast = &G[(L16 - 1) * K];
    const int ldx = K + V;
    for (int i = 0; i < L16; ++i) {
      const double* Gi = &G[i * K];
      FASTKDA_IVDEP
      for (int c = 0; c < K; ++c) {
        const float eg = exp_fast(float(Gi[c]));
        qg[i * K + c] = q[i * K + c] * eg;
        x[i * ldx + c] = -beta[i] * k[i * K + c] * eg;
        kend[i * K + c] = k[i * K + c] * exp_diff(Glast[c], Gi[c]);
      }
      FASTKDA_IVDEP
      for (int c = 0; c < V; ++c) x[i * ldx + K + c] = beta[i] * v[i * V + c];
    }
    transpose(kend, L16, K, kendt, kChunk);
    FASTKDA_IVDEP
    for (int c = 0; c < K; ++c) decay_end[c] = exp_fast(float(Glast[c]));
  }

  // Aneg = -A and Qk for all rows of the chunk, block row by block row.
  template <class Gemm>
  FASTKDA_INLINE void block_scores(int L16) {
    std::fill_n(aneg, kChunk * kChunk, 0.0f);
    std::fill_n(qk, kChunk * kChunk, 0.0f);
    for (int b0 = 0; b0 < L16; b0 += kBlock) {
      // Diagonal block: exact pairwise decays as running products of e_s, s in (j, i].
      for (int i = b0; i < b0 + kBlock; ++i) {
        const float* ki = &k[i * K];
        const float* qi = &q[i * K];
        qk[i * kChunk + i] = dot(qi, ki, K);
        float* dij = pair_decay;
        for (int c = 0; c < K; ++c) dij[c] = 1.0f;
        for (int j = i - 1; j >= b0; --j) {
          const float* ej = &e[(j + 1) * K];
          const float* kj = &k[j * K];
          float sa[8] = {}, sq[8] = {};
          FASTKDA_IVDEP
          for (int c = 0; c < K; c += 8)
            for (int l = 0; l < 8; ++l) {
              dij[c + l] *= ej[c + l];
              const float kd = kj[c + l] * dij[c + l];
              sa[l] += ki[c + l] * kd;
              sq[l] += qi[c + l] * kd;
            }
          aneg[i * kChunk + j] = -beta[i] * lane_sum(sa);
          qk[i * kChunk + j] = lane_sum(sq);
        }
      }
      if (b0 == 0) continue;
      // Off-diagonal blocks, anchored at r = b0 - 1.
      const double* Gr = &G[(b0 - 1) * K];
      for (int ii = 0; ii < kBlock; ++ii) {
        const int i = b0 + ii;
        const double* Gi = &G[i * K];
        FASTKDA_IVDEP
        for (int c = 0; c < K; ++c) {
          const float f = exp_diff(Gi[c], Gr[c]);
          rowk[ii * K + c] = -beta[i] * k[i * K + c] * f;
          rowq[ii * K + c] = q[i * K + c] * f;
        }
      }
      for (int j = 0; j < b0; ++j) {
        const double* Gj = &G[j * K];
        FASTKDA_IVDEP
        for (int c = 0; c < K; ++c) colk[j * K + c] = k[j * K + c] * exp_diff(Gr[c], Gj[c]);
      }
      transpose(colk, b0, K, colkt, b0);
      gemm_acc<Gemm>(kBlock, b0, K, rowk, K, colkt, b0, &aneg[b0 * kChunk], kChunk);
      gemm_acc<Gemm>(kBlock, b0, K, rowq, K, colkt, b0, &qk[b0 * kChunk], kChunk);
    }
  }

  // (I + A) X = RHS by blocked forward substitution: X = [-W | U].
  template <class Gemm>
  FASTKDA_INLINE void solve(int L16) {
    const int ldx = K + V;
    for (int b0 = 0; b0 < L16; b0 += kBlock) {
      if (b0)
        gemm_acc<Gemm>(kBlock, ldx, b0, &aneg[b0 * kChunk], kChunk, x, ldx, &x[b0 * ldx], ldx);
      for (int i = b0 + 1; i < b0 + kBlock; ++i) {
        float* xi = &x[i * ldx];
        for (int j = b0; j < i; ++j) {
          const float aij = aneg[i * kChunk + j];
          const float* xj = &x[j * ldx];
          FASTKDA_IVDEP
          for (int c = 0; c < ldx; ++c) xi[c] += aij * xj[c];
        }
      }
    }
  }

  // Vn = U - W S and the unscaled output O = (q o exp(G)) S + Qk Vn.
  template <class Gemm>
  FASTKDA_INLINE void chunk_output(int L16) {
    const int ldx = K + V;
    for (int i = 0; i < L16; ++i) {
      FASTKDA_IVDEP
      for (int c = 0; c < V; ++c) vn[i * V + c] = x[i * ldx + K + c];
    }
    gemm_acc<Gemm>(L16, V, K, x, ldx, S, V, vn, V);
    std::fill_n(o, L16 * V, 0.0f);
    gemm_acc<Gemm>(L16, V, K, qg, K, S, V, o, V);
    for (int b0 = 0; b0 < L16; b0 += kBlock)
      gemm_acc<Gemm>(kBlock, V, b0 + kBlock, &qk[b0 * kChunk], kChunk, vn, V, &o[b0 * V], V);
  }

  // S <- Diag(exp(G_last)) S + (k o exp(G_last - G))^T Vn.
  template <class Gemm>
  FASTKDA_INLINE void update_state(int L16) {
    for (int c = 0; c < K; ++c) {
      FASTKDA_IVDEP
      for (int j = 0; j < V; ++j) S[c * V + j] *= decay_end[c];
    }
    gemm_acc<Gemm>(K, V, L16, kendt, kChunk, vn, V, S, V);
  }
};

// One work item: sequence n = item / HV, value head h = item % HV.
// `boundary_base`: the sequence's first boundary-state row (unused without boundary states).
template <class Gemm>
FASTKDA_INLINE void run_item(const ForwardParams& p, ChunkWork& w, int64_t item,
                             int64_t boundary_base) {
  FlushDenormals ftz;
  const int K = p.K, V = p.V, HV = p.HV;
  const Strides s = token_strides(p);
  const float scale = effective_scale(p);
  const int64_t n = item / HV;
  const int h = int(item % HV);
  const int64_t slot = p.state_indices ? int64_t(p.state_indices[n]) : n;
  const int64_t soff = state_matrix_offset(slot, h, HV, K, V);
  load_state(slot >= 0 ? p.initial_state : nullptr, p.initial_state_dtype, p.state_layout, soff, K,
             V, w.S, StateLayout::kKFirst);

  int64_t begin, end;
  sequence_range(p, n, &begin, &end);
  for (int64_t t0 = begin; t0 < end; t0 += kChunk) {
    if (p.boundary_states)  // the state before this chunk (kChunk == kBoundaryInterval)
      store_state(w.S, StateLayout::kKFirst, p.boundary_states, p.boundary_states_dtype,
                  p.state_layout,
                  state_matrix_offset(boundary_base + (t0 - begin) / kChunk, h, HV, K, V), K, V);
    const int L = int(std::min<int64_t>(kChunk, end - t0));
    const int L16 = (L + kBlock - 1) / kBlock * kBlock;
    w.load_rows(p, s, h, t0, L, L16);
    w.decay_terms(L16);
    w.block_scores<Gemm>(L16);
    w.solve<Gemm>(L16);
    w.chunk_output<Gemm>(L16);
    w.update_state<Gemm>(L16);
    for (int i = 0; i < L; ++i) {
      const int64_t o0 = (t0 + i) * s.out + int64_t(h) * V;
      for (int c = 0; c < V; ++c) store_float(p.out, p.io_dtype, o0 + c, scale * w.o[i * V + c]);
    }
  }
  if (slot >= 0 && p.final_state)
    store_state(w.S, StateLayout::kKFirst, p.final_state, p.final_state_dtype, p.state_layout, soff,
                K, V);
}

using ItemRunner = void (*)(const ForwardParams&, ChunkWork&, int64_t, int64_t);

void run_item_sse2(const ForwardParams& p, ChunkWork& w, int64_t item, int64_t boundary_base) {
  run_item<GemmSse2>(p, w, item, boundary_base);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2,fma")]] void run_item_avx2(const ForwardParams& p, ChunkWork& w, int64_t item,
                                               int64_t boundary_base) {
  run_item<GemmAvx2>(p, w, item, boundary_base);
}
[[gnu::target("avx512f,avx512vl,avx2,fma")]] void run_item_avx512(const ForwardParams& p,
                                                                  ChunkWork& w, int64_t item,
                                                                  int64_t boundary_base) {
  run_item<GemmAvx512>(p, w, item, boundary_base);
}
#endif

}  // namespace

const char* to_string(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kSse2:
      return "sse2";
    case CpuIsa::kAvx2:
      return "avx2+fma";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown isa";
}

bool cpu_supports(CpuIsa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kSse2:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             cpu_supports(CpuIsa::kAvx2);
  }
  return false;
#else
  return isa == CpuIsa::kSse2;  // other targets: the portable build (128-bit vectors)
#endif
}

void forward_chunked_isa(const ForwardParams& p, CpuIsa isa) {
  FASTKDA_CHECK(cpu_supports(isa), "isa: expected one this CPU supports, got ", to_string(isa));
  FASTKDA_CHECK(p.K % kGemmCols == 0 && p.V % kGemmCols == 0,  // validation allows 64/128/256
                "K, V: expected multiples of ", kGemmCols,
                " on the chunked CPU path, got K = ", p.K, ", V = ", p.V);
  ItemRunner run = run_item_sse2;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (isa == CpuIsa::kAvx2) run = run_item_avx2;
  if (isa == CpuIsa::kAvx512) run = run_item_avx512;
#endif
  const int K = p.K, V = p.V;
  const int64_t N = num_sequences(p);
  const double cost = double(p.B * p.T + N) / double(N ? N : 1) * 4.0 * K * V;
  const std::vector<int64_t> boundary_base = boundary_base_rows(p);
  parallel_items(N * p.HV, cost, 4e6, [&] {
    return [&, w = ChunkWork(K, V)](int64_t item) mutable {
      run(p, w, item, p.boundary_states ? boundary_base[size_t(item / p.HV)] : 0);
    };
  });
}

void forward_chunked(const ForwardParams& p) {
  static const CpuIsa best = cpu_supports(CpuIsa::kAvx512) ? CpuIsa::kAvx512
                             : cpu_supports(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                                           : CpuIsa::kSse2;
  forward_chunked_isa(p, best);
}

}  // namespace fastkda::cpu
