// The main job: one KDA forward on the default device (the GPU if there is one, else the CPU),
// on random Kimi-Linear-like inputs (H = 32, K = V = 128, softplus gate, raw beta logits,
// in-kernel l2norm), timed, and checked against the fp64 CPU recurrence (the oracle).
//
//   fastkda_demo [--T tokens] [--H heads] [--device auto|cpu|cuda] [--iters n]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fastkda/fastkda.h"
#ifdef FASTKDA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Args {
  int64_t T = 4096;
  int H = 32;
  std::string device = "auto";
  int iters = 20;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--T") a.T = std::atoll(argv[i + 1]);
    else if (k == "--H") a.H = std::atoi(argv[i + 1]);
    else if (k == "--device") a.device = argv[i + 1];
    else if (k == "--iters") a.iters = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown argument %s\n", argv[i]); std::exit(2); }
  }
  return a;
}

bool cuda_available() {
#ifdef FASTKDA_WITH_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

#ifdef FASTKDA_WITH_CUDA
#define DEMO_CUDA(x)                                                                 \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "CUDA error %s at %s\n", cudaGetErrorString(e), #x);      \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

void* to_device(const void* host, size_t bytes) {
  void* d = nullptr;
  DEMO_CUDA(cudaMalloc(&d, bytes));
  DEMO_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const bool use_cuda =
      args.device == "cuda" || (args.device == "auto" && fastkda::built_with_cuda() && cuda_available());
  const int64_t T = args.T;
  const int H = args.H, K = 128, V = 128;

  // Random inputs like Kimi-Linear-48B: softplus gate with A_log = log(U[1, 16]), small dt_bias.
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(1.f, 16.f);
  std::vector<uint16_t> q(T * H * K), k(T * H * K), v(T * H * V), g(T * H * K), beta(T * H);
  for (auto* buf : {&q, &k, &v, &g}) for (auto& x : *buf) x = to_bf16(normal(rng));
  for (auto& x : beta) x = to_bf16(normal(rng));
  std::vector<float> A_log(H), dt_bias(H * K), state0(size_t(H) * V * K);
  for (auto& x : A_log) x = std::log(uniform(rng));
  for (auto& x : dt_bias) x = 0.1f * normal(rng);
  for (auto& x : state0) x = 0.1f * normal(rng);

  fastkda::ForwardParams p;
  p.H = p.HV = H;
  p.K = K;
  p.V = V;
  p.B = 1;
  p.T = T;
  p.gate_mode = fastkda::GateMode::kSoftplus;
  p.beta_mode = fastkda::BetaMode::kSigmoid;
  p.l2norm_qk = true;
  p.io_dtype = p.g_dtype = p.beta_dtype = fastkda::DType::kBF16;
  p.initial_state_dtype = p.final_state_dtype = fastkda::DType::kF32;
  p.state_layout = fastkda::StateLayout::kVFirst;

  std::vector<uint16_t> out(T * H * V);
  std::vector<float> final_state(state0.size());
  double ms = 0;
  try {
    if (use_cuda) {
#ifdef FASTKDA_WITH_CUDA
      p.device = fastkda::Device::kCUDA;
      p.q = to_device(q.data(), q.size() * 2);
      p.k = to_device(k.data(), k.size() * 2);
      p.v = to_device(v.data(), v.size() * 2);
      p.g = to_device(g.data(), g.size() * 2);
      p.beta = to_device(beta.data(), beta.size() * 2);
      p.A_log = static_cast<const float*>(to_device(A_log.data(), A_log.size() * 4));
      p.dt_bias = static_cast<const float*>(to_device(dt_bias.data(), dt_bias.size() * 4));
      p.initial_state = to_device(state0.data(), state0.size() * 4);
      DEMO_CUDA(cudaMalloc(&p.out, out.size() * 2));
      DEMO_CUDA(cudaMalloc(&p.final_state, final_state.size() * 4));
      p.workspace_bytes = fastkda::forward_workspace_size(p);
      if (p.workspace_bytes) DEMO_CUDA(cudaMalloc(&p.workspace, p.workspace_bytes));
      cudaEvent_t e0, e1;
      DEMO_CUDA(cudaEventCreate(&e0));
      DEMO_CUDA(cudaEventCreate(&e1));
      for (int i = 0; i < 3; ++i) fastkda::forward(p);
      std::vector<float> times;
      for (int i = 0; i < args.iters; ++i) {
        DEMO_CUDA(cudaEventRecord(e0));
        fastkda::forward(p);
        DEMO_CUDA(cudaEventRecord(e1));
        DEMO_CUDA(cudaEventSynchronize(e1));
        float t = 0;
        DEMO_CUDA(cudaEventElapsedTime(&t, e0, e1));
        times.push_back(t);
      }
      std::sort(times.begin(), times.end());
      ms = times[times.size() / 2];
      DEMO_CUDA(cudaMemcpy(out.data(), p.out, out.size() * 2, cudaMemcpyDeviceToHost));
      DEMO_CUDA(cudaMemcpy(final_state.data(), p.final_state, final_state.size() * 4,
                           cudaMemcpyDeviceToHost));
#endif
    } else {
      p.device = fastkda::Device::kCPU;
      p.q = q.data(); p.k = k.data(); p.v = v.data(); p.g = g.data(); p.beta = beta.data();
      p.A_log = A_log.data();
      p.dt_bias = dt_bias.data();
      p.initial_state = state0.data();
      p.out = out.data();
      p.final_state = final_state.data();
      const auto t0 = std::chrono::steady_clock::now();
      fastkda::forward(p);
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }

    // The oracle: fp64 token recurrence on the CPU, same bf16 inputs, f32 output.
    fastkda::ForwardParams ref = p;
    ref.device = fastkda::Device::kCPU;
    ref.algorithm = fastkda::Algorithm::kRecurrent;
    ref.q = q.data(); ref.k = k.data(); ref.v = v.data(); ref.g = g.data(); ref.beta = beta.data();
    ref.A_log = A_log.data();
    ref.dt_bias = dt_bias.data();
    ref.initial_state = state0.data();
    std::vector<uint16_t> ref_out(out.size());
    std::vector<float> ref_state(final_state.size());
    ref.out = ref_out.data();
    ref.final_state = ref_state.data();
    ref.workspace = nullptr;
    ref.workspace_bytes = 0;
    // Compare against the oracle's output before bf16 rounding: run it with f32 output.
    std::vector<float> qf(q.size()), kf(k.size()), vf(v.size());
    for (size_t i = 0; i < q.size(); ++i) qf[i] = from_bf16(q[i]), kf[i] = from_bf16(k[i]);
    for (size_t i = 0; i < v.size(); ++i) vf[i] = from_bf16(v[i]);
    std::vector<float> ref_out32(out.size());
    ref.io_dtype = fastkda::DType::kF32;
    ref.q = qf.data(); ref.k = kf.data(); ref.v = vf.data(); ref.out = ref_out32.data();
    const auto t0 = std::chrono::steady_clock::now();
    fastkda::forward(ref);
    const double ref_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    double num = 0, den = 0, max_abs = 0, snum = 0, sden = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double d = double(from_bf16(out[i])) - ref_out32[i];
      num += d * d;
      den += double(ref_out32[i]) * ref_out32[i];
      max_abs = std::max(max_abs, std::abs(d));
    }
    for (size_t i = 0; i < ref_state.size(); ++i) {
      const double d = double(final_state[i]) - ref_state[i];
      snum += d * d;
      sden += double(ref_state[i]) * ref_state[i];
    }
    std::printf("fastkda forward on %s: B=1 T=%lld H=%d K=%d V=%d, softplus gate, fp32 state\n",
                use_cuda ? "CUDA" : "CPU (chunked fp32)", (long long)T, H, K, V);
    std::printf("  time          %.3f ms%s\n", ms, use_cuda ? " (median GPU time)" : "");
    std::printf("  throughput    %.3g tokens/s\n", T / (ms * 1e-3));
    std::printf("  error vs fp64 oracle: out rms-rel %.3e (max abs %.3e), final state rms-rel %.3e\n",
                std::sqrt(num / den), max_abs, std::sqrt(snum / sden));
    std::printf("  (oracle took %.0f ms on the CPU)\n", ref_ms);
    const bool ok = std::isfinite(num) && std::sqrt(num / den) < 5e-3 && std::sqrt(snum / sden) < 5e-3;
    return ok ? 0 : 1;
  } catch (const fastkda::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
