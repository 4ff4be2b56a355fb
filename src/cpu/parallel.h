// Threading and floating-point-environment helpers of the CPU implementation.
//
// Work is split over independent items (sequence x value head): each item reads its own inputs
// and writes its own rows of out and its own state matrix, so workers share nothing writable.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace fastkda::cpu {

// Runs items 0..n-1 on up to hardware_concurrency threads. make_worker() is called once per
// thread and returns a callable worker(item) that owns its scratch buffers, so scratch is
// allocated once per thread rather than once per item. Items are handed out dynamically (one
// atomic counter) because varlen sequences have very different costs. `min_work_per_thread`
// (in the caller's cost units, `work_per_item` each) keeps tiny problems on the calling thread:
// starting a thread costs tens of microseconds.
template <class MakeWorker>
void parallel_items(int64_t n, double work_per_item, double min_work_per_thread,
                    MakeWorker&& make_worker) {
  if (n <= 0) return;
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const double total = work_per_item * double(n);
  const int64_t by_work = std::max<int64_t>(1, int64_t(total / std::max(min_work_per_thread, 1.0)));
  const int64_t threads = std::min({hw, n, by_work});
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run = [&] {
    try {
      auto worker = make_worker();
      for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) worker(i);
    } catch (...) {  // e.g. std::bad_alloc: rethrown on the calling thread
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads - 1));
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(run);
  run();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// Flushes fp32 subnormals to zero for its lifetime (restoring the caller's mode afterwards).
// Products of decay factors exp(a) <= 1 underflow through the subnormal range all the time with
// strong gates; on x86 every subnormal operand costs ~100 cycles. Values below 1.2e-38 next to
// O(1) terms change nothing measurable.
class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ | DAZ
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() = default;  // other targets: subnormals are only slow, never wrong
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  [[maybe_unused]] unsigned saved_ = 0;
};

}  // namespace fastkda::cpu
