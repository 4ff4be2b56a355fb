// Buffers, seeds and error measures shared by the GPU tests (test_prefill_gpu.cpp,
// test_decode_gpu.cpp): host values of one tensor (f32 or bf16 bits), a device copy freed on scope
// exit, fresh seeds (FASTKDA_TEST_SEED pins one), RMS-relative error over masked elements.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <utility>
#include <vector>

#include "common.h"
#include "fastkda/fastkda.h"

namespace fastkda_gpu_test {

using fastkda::DType;

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("FASTKDA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
}

// Host values of one tensor: f32 or bf16 bits.
struct HostBuf {
  DType dtype = DType::kF32;
  std::vector<float> f;
  std::vector<uint16_t> h;
  HostBuf() = default;
  HostBuf(DType d, size_t n) : dtype(d) {
    if (d == DType::kF32)
      f.assign(n, 0.f);
    else
      h.assign(n, 0);
  }
  size_t size() const { return dtype == DType::kF32 ? f.size() : h.size(); }
  size_t bytes() const { return size() * fastkda::dtype_size(dtype); }
  void* data() { return dtype == DType::kF32 ? (void*)f.data() : (void*)h.data(); }
  const void* data() const {
    return dtype == DType::kF32 ? (const void*)f.data() : (const void*)h.data();
  }
  float get(size_t i) const { return dtype == DType::kF32 ? f[i] : fastkda::bf16_to_float(h[i]); }
  void set(size_t i, float x) {
    if (dtype == DType::kF32)
      f[i] = x;
    else
      h[i] = fastkda::float_to_bf16(x);
  }
  // Elements [lo, hi) (or all) bitwise equal to o's (NaN payloads included).
  bool same_bits(const HostBuf& o) const { return size() == o.size() && same_bits(o, 0, size()); }
  bool operator==(const HostBuf& o) const { return same_bits(o); }
  bool same_bits(const HostBuf& o, size_t lo, size_t hi) const {
    const size_t es = fastkda::dtype_size(dtype);
    return dtype == o.dtype && hi <= size() && hi <= o.size() &&
           std::memcmp(static_cast<const char*>(data()) + lo * es,
                       static_cast<const char*>(o.data()) + lo * es, (hi - lo) * es) == 0;
  }
};

// A device copy of a host buffer (or of raw bytes); freed on scope exit.
class DeviceBuf {
 public:
  DeviceBuf() = default;
  explicit DeviceBuf(size_t bytes) : bytes_(bytes) {
    if (bytes && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuf(const void* host, size_t bytes) : DeviceBuf(bytes) {
    if (ptr_) cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice);
  }
  ~DeviceBuf() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuf(DeviceBuf&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuf& operator=(DeviceBuf&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return ptr_; }
  void to_host(void* host) const { cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost); }
  void from_host(const void* host) const { cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct Err {
  double rms_rel = 0, max_abs = 0;
  size_t nonfinite = 0;
};
inline std::ostream& operator<<(std::ostream& os, const Err& e) {
  return os << "rms_rel=" << e.rms_rel << " max_abs=" << e.max_abs << " nonfinite=" << e.nonfinite;
}
// Error of `got` against `ref` over the elements where `mask(i)` holds; any non-finite element of
// got makes rms_rel infinite (and is counted).
template <class Mask>
Err compare(const HostBuf& got, const HostBuf& ref, Mask mask) {
  Err e;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!mask(i)) continue;
    const double a = got.get(i), b = ref.get(i);
    if (!std::isfinite(a)) {
      ++e.nonfinite;
      continue;
    }
    num += (a - b) * (a - b);
    den += b * b;
    e.max_abs = std::max(e.max_abs, std::fabs(a - b));
  }
  e.rms_rel = e.nonfinite ? INFINITY : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  return e;
}

inline Err compare(const HostBuf& got, const HostBuf& ref) {
  return compare(got, ref, [](size_t) { return true; });
}

// Median GPU time in ms (CUDA events on the default stream) of `reps` calls of `launch`, after
// the caller's warm-up (the microbenchmarks: test_scan_chain_bench.cu, test_cluster_push_bench.cu).
template <class Launch>
float median_event_ms(Launch&& launch, int reps) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0.0f;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace fastkda_gpu_test
