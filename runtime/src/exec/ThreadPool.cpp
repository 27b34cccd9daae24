//===- ThreadPool.cpp - Persistent workers for parallel loops --------------===//
#include "ThreadPool.h"

#include <algorithm>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace llmc {

namespace {
thread_local bool tlsInsidePool = false;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}
} // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0)
    threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min(threads, 256);
  workers_.reserve(size_t(threads - 1));
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

void ThreadPool::runChunks() {
  for (;;) {
    int64_t lo = next_.fetch_add(grain_);
    if (lo >= end_ || failed_.load(std::memory_order_relaxed))
      return;
    int64_t hi = std::min(end_, lo + grain_);
    try {
      (*fn_)(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_)
        error_ = std::current_exception();
      failed_.store(true);
    }
  }
}

void ThreadPool::workerLoop() {
  tlsInsidePool = true;
  uint64_t seen = 0;
  for (;;) {
    // Spin a little: in decode the next op usually follows within microseconds.
    for (int spin = 0; spin < 4000 && generation_.load(std::memory_order_acquire) == seen; ++spin)
      cpuRelax();
    std::unique_lock<std::mutex> lk(mu_);
    wake_.wait(lk, [&] { return generation_.load() != seen; });
    seen = generation_.load();
    if (stop_)
      return;
    lk.unlock();
    runChunks();
    lk.lock();
    if (--active_ == 0)
      done_.notify_one();
  }
}

void ThreadPool::parallelFor(int64_t begin, int64_t end, int64_t grain, const RangeFn &fn) {
  if (end <= begin)
    return;
  int64_t n = end - begin;
  if (grain <= 0)
    grain = std::max<int64_t>(1, (n + size() - 1) / size());
  if (workers_.empty() || n <= grain || tlsInsidePool) {
    for (int64_t lo = begin; lo < end; lo += grain)
      fn(lo, std::min(end, lo + grain));
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    begin_ = begin;
    end_ = end;
    grain_ = grain;
    next_.store(begin);
    error_ = nullptr;
    failed_.store(false);
    active_ = int(workers_.size());
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  tlsInsidePool = true;
  runChunks();
  tlsInsidePool = false;
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return active_ == 0; });
  fn_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    lk.unlock();
    std::rethrow_exception(e);
  }
}

} // namespace llmc

