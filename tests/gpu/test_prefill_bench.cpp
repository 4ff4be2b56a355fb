// GPU time of fastkda's CUDA prefill on the DESIGN §6 shapes (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='PrefillBench.*'). bench/bench_prefill.py times
// fla's chunk_kda on the same shapes and input distributions and merges both into one table.
//
// Inputs: q, k, v ~ N(0, 1) bf16; g ~ N(0, 1) bf16 raw gate, bounded (lower bound -5) with A_log
// and dt_bias; beta logits bf16; f32 initial and final states (V-first). CUDA events around each
// call, L2 flushed (256 MiB memset) before each, 5 warm-ups, median of 30.
// Prints "BENCH <name> <ms> <floor_ms> <GB/s>" lines and "HOST <name> <us> us/call" (host time of
// one fastkda::forward: validation and both launches, 20 calls queued without waiting);
// FASTKDA_BENCH_FILTER=<substring> limits the shapes, FASTKDA_BENCH_VSPLITS=1,2,4 adds runs with
// forced value splits for the few-head shapes (for every shape with FASTKDA_BENCH_VSPLITS_ALL set),
// FASTKDA_BENCH_GATE=softplus runs the softplus gate instead (-exp(A_log) softplus(g + dt_bias),
// Kimi-Linear-48B's; the same inputs), its rows named <shape>+softplus.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common.h"
#include "fastkda/fastkda.h"

namespace {

struct Shape {
  std::string name;
  int H;
  int64_t B, T;
  std::vector<int64_t> seqlens;  // varlen when non-empty
};

std::vector<Shape> shapes() {
  const std::vector<int64_t> six = {1300, 547, 2048, 963, 271, 3063};
  const std::vector<int64_t> eight(8, 1024), short64(64, 128);
  return {
      {"H96_fixed_T8192", 96, 1, 8192, {}},   {"H96_varlen_six", 96, 1, 0, six},
      {"H96_varlen_1024x8", 96, 1, 0, eight}, {"H64_fixed_T8192", 64, 1, 8192, {}},
      {"H64_varlen_six", 64, 1, 0, six},      {"H64_varlen_1024x8", 64, 1, 0, eight},
      {"H32_T4096", 32, 1, 4096, {}},         {"H32_T16384", 32, 1, 16384, {}},
      {"H32_T65536", 32, 1, 65536, {}},       {"H8_T65536", 8, 1, 65536, {}},
      {"H4_T65536", 4, 1, 65536, {}},         {"H32_64x128", 32, 1, 0, short64},
  };
}

#define BENCH_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Fills `n` bf16 elements by copying from a fixed random pool with rotating offsets.
void fill_bf16(void* dst, size_t n, const std::vector<uint16_t>& pool, size_t salt) {
  size_t done = 0;
  while (done < n) {
    const size_t off = (salt * 7919 + done * 31) % (pool.size() / 2);
    const size_t len = std::min(n - done, pool.size() - off);
    cudaMemcpy(static_cast<uint16_t*>(dst) + done, pool.data() + off, len * 2,
               cudaMemcpyHostToDevice);
    done += len;
  }
}

TEST(PrefillBench, DISABLED_Table) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) GTEST_SKIP() << "no CUDA device";
  const char* gate_env = std::getenv("FASTKDA_BENCH_GATE");
  const std::string gate = gate_env ? gate_env : "";
  ASSERT_TRUE(gate.empty() || gate == "bounded" || gate == "softplus")
      << "FASTKDA_BENCH_GATE: expected bounded or softplus, got '" << gate << "'";
  const bool softplus = gate == "softplus";
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> pool((1u << 24) + 7);
  for (auto& x : pool) x = fastkda::float_to_bf16(normal(rng));
  void* flush = nullptr;
  const size_t flush_bytes = 256u << 20;
  BENCH_CUDA(cudaMalloc(&flush, flush_bytes));
  const char* filter = std::getenv("FASTKDA_BENCH_FILTER");
  std::vector<std::string> vsplits = {""};
  if (const char* v = std::getenv("FASTKDA_BENCH_VSPLITS")) {
    std::string s(v);
    for (size_t p = 0; p <= s.size();) {
      const size_t q = s.find(',', p);
      vsplits.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
      if (q == std::string::npos) break;
      p = q + 1;
    }
  }

  for (const Shape& sh : shapes()) {
    if (filter && sh.name.find(filter) == std::string::npos) continue;
    const int H = sh.H, K = 128, V = 128;
    const bool varlen = !sh.seqlens.empty();
    int64_t T = sh.T;
    std::vector<int32_t> cu = {0};
    if (varlen) {
      for (auto l : sh.seqlens) cu.push_back(cu.back() + int32_t(l));
      T = cu.back();
    }
    const int64_t rows = sh.B * T, N = varlen ? int64_t(sh.seqlens.size()) : sh.B;
    const size_t tok_elems = size_t(rows) * H * K;
    void *q, *k, *v, *g, *beta, *out, *A_log, *dt_bias, *cu_d, *s0, *s1;
    BENCH_CUDA(cudaMalloc(&q, tok_elems * 2));
    BENCH_CUDA(cudaMalloc(&k, tok_elems * 2));
    BENCH_CUDA(cudaMalloc(&v, tok_elems * 2));
    BENCH_CUDA(cudaMalloc(&g, tok_elems * 2));
    BENCH_CUDA(cudaMalloc(&out, tok_elems * 2));
    BENCH_CUDA(cudaMalloc(&beta, size_t(rows) * H * 2));
    BENCH_CUDA(cudaMalloc(&A_log, H * 4));
    BENCH_CUDA(cudaMalloc(&dt_bias, H * K * 4));
    BENCH_CUDA(cudaMalloc(&cu_d, cu.size() * 4));
    const size_t state_elems = size_t(N) * H * K * V;
    BENCH_CUDA(cudaMalloc(&s0, state_elems * 4));
    BENCH_CUDA(cudaMalloc(&s1, state_elems * 4));
    fill_bf16(q, tok_elems, pool, 1);
    fill_bf16(k, tok_elems, pool, 2);
    fill_bf16(v, tok_elems, pool, 3);
    fill_bf16(g, tok_elems, pool, 4);
    fill_bf16(beta, size_t(rows) * H, pool, 5);
    std::vector<float> a(H), b(size_t(H) * K), st(state_elems);
    std::uniform_real_distribution<float> uni(0.f, 1.f);
    for (auto& x : a) x = std::log(1.f + 15.f * uni(rng));
    for (auto& x : b) x = 0.5f * normal(rng);
    for (size_t i = 0; i < st.size(); ++i)
      st[i] = 0.1f * fastkda::bf16_to_float(pool[i % pool.size()]);
    BENCH_CUDA(cudaMemcpy(A_log, a.data(), H * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(dt_bias, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(cu_d, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(s0, st.data(), state_elems * 4, cudaMemcpyHostToDevice));

    fastkda::ForwardParams f;
    f.device = fastkda::Device::kCUDA;
    f.H = H, f.HV = H, f.K = K, f.V = V;
    f.q = q, f.k = k, f.v = v, f.g = g, f.beta = beta, f.out = out;
    f.g_dtype = fastkda::DType::kBF16, f.beta_dtype = fastkda::DType::kBF16;
    f.gate_mode = softplus ? fastkda::GateMode::kSoftplus : fastkda::GateMode::kBounded;
    f.lower_bound = -5.0f;
    f.A_log = static_cast<const float*>(A_log), f.dt_bias = static_cast<const float*>(dt_bias);
    f.B = sh.B, f.T = T;
    if (varlen) f.cu_seqlens = cu_d, f.N = N;
    f.initial_state = s0, f.final_state = s1;
    void* ws = nullptr;
    f.workspace_bytes = fastkda::forward_workspace_size(f);
    BENCH_CUDA(cudaMalloc(&ws, f.workspace_bytes));
    f.workspace = ws;

    // Floor: q, k, v, g, beta read once, out written once, states read and written once.
    const double bytes = 5.0 * tok_elems * 2 + rows * H * 2.0 + 2.0 * state_elems * 4;
    const double floor_ms = bytes / 4.28e12 * 1e3;
    const bool few_heads = N * H < 132;
    const bool every_shape = std::getenv("FASTKDA_BENCH_VSPLITS_ALL") != nullptr;
    for (const std::string& vs : vsplits) {
      if (!vs.empty() && !few_heads && !every_shape) continue;
      if (vs.empty())
        unsetenv("FASTKDA_PREFILL_VSPLIT");
      else
        setenv("FASTKDA_PREFILL_VSPLIT", vs.c_str(), 1);
      // A forced value split can change the plan (split T) and with it the workspace size.
      if (const size_t need = fastkda::forward_workspace_size(f); need > f.workspace_bytes) {
        BENCH_CUDA(cudaFree(ws));
        BENCH_CUDA(cudaMalloc(&ws, need));
        f.workspace = ws, f.workspace_bytes = need;
      }
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      std::vector<float> ms;
      for (int it = 0; it < 35; ++it) {
        BENCH_CUDA(cudaMemsetAsync(flush, it & 0xff, flush_bytes));
        cudaEventRecord(e0);
        fastkda::forward(f);
        cudaEventRecord(e1);
        BENCH_CUDA(cudaEventSynchronize(e1));
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (it >= 5) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const std::string name =
          sh.name + (softplus ? "+softplus" : "") + (vs.empty() ? "" : "@vsplit" + vs);
      std::printf("BENCH %s %.4f %.4f %.1f\n", name.c_str(), med, floor_ms, bytes / med * 1e-6);
      std::fflush(stdout);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
    unsetenv("FASTKDA_PREFILL_VSPLIT");
    {  // Host time per fastkda::forward (validation + two launches), queued without waiting.
      BENCH_CUDA(cudaDeviceSynchronize());
      constexpr int kCalls = 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < kCalls; ++it) fastkda::forward(f);
      const auto t1 = std::chrono::steady_clock::now();
      BENCH_CUDA(cudaDeviceSynchronize());
      std::printf("HOST %s%s %.1f us/call\n", sh.name.c_str(), softplus ? "+softplus" : "",
                  std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
    }
    BENCH_CUDA(cudaGetLastError());
    for (void* p : {q, k, v, g, beta, out, A_log, dt_bias, cu_d, s0, s1, ws}) cudaFree(p);
  }
  cudaFree(flush);
}

}  // namespace
