//===- ThreadPool.cpp - Persistent workers for parallel loops --------------===//
// Job protocol: the caller waits until no worker is inside, writes the job,
// then makes gen_ odd ("open"). A worker joins by incrementing inside_ and
// re-reading gen_: only if it still equals the odd value it saw does it touch
// the job. After the last chunk finishes the caller makes gen_ even again
// ("closed") and returns; a worker joining late sees the closed value (or a
// newer job) and backs out without reading the job's fields.
//===----------------------------------------------------------------------===//
#include "ThreadPool.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

/// Pause-spins before yielding / sleeping: long enough to bridge the gap
/// between two ops of one decode step, short enough not to burn a core.
constexpr int kWorkerSpins = 4000;
constexpr int kCallerSpins = 2000;
} // namespace

int threadCountFromEnvText(const char *text) {
  if (!text || !*text)
    return 0;
  errno = 0;
  char *end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > 256) {
    std::fprintf(stderr, "[llmc] warning: ignoring LLMC_THREADS='%s' (expected an integer in [1, 256])\n",
                 text);
    return 0;
  }
  return int(v);
}

int defaultThreadCount() {
  static const int fromEnv = threadCountFromEnvText(std::getenv("LLMC_THREADS"));
  return fromEnv > 0 ? fromEnv : int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0)
    threads = defaultThreadCount();
  threads = std::min(threads, 256);
  workers_.reserve(size_t(threads - 1));
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

void ThreadPool::runChunks() {
  const int64_t end = end_, grain = grain_;
  for (;;) {
    const int64_t lo = next_.fetch_add(grain);
    if (lo >= end)
      return;
    const int64_t hi = std::min(end, lo + grain);
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        (*fn_)(lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_)
          error_ = std::current_exception();
        failed_.store(true);
      }
    }
    finished_.fetch_add(hi - lo, std::memory_order_acq_rel);
  }
}

void ThreadPool::workerLoop() {
  tlsInsidePool = true;
  uint64_t seen = 0;
  auto ready = [&] {
    uint64_t g = gen_.load();
    return (g != seen && (g & 1)) || stop_.load();
  };
  for (;;) {
    for (int spin = 0; spin < kWorkerSpins && !ready(); ++spin)
      cpuRelax();
    if (!ready()) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      wake_.wait(lk, ready);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load())
      return;
    const uint64_t g = gen_.load();
    seen = g;
    inside_.fetch_add(1);
    if (gen_.load() == g && (g & 1))
      runChunks();
    inside_.fetch_sub(1);
  }
}

void ThreadPool::parallelFor(int64_t begin, int64_t end, int64_t grain, const RangeFn &fn) {
  if (end <= begin)
    return;
  const int64_t n = end - begin;
  if (grain <= 0)
    grain = std::max<int64_t>(1, (n + size() - 1) / size());
  if (workers_.empty() || n <= grain || tlsInsidePool) {
    for (int64_t lo = begin; lo < end; lo += grain)
      fn(lo, std::min(end, lo + grain));
    return;
  }
  // Stragglers of the previous job leave at once (its gen_ is closed).
  for (int spin = 0; inside_.load() != 0; ++spin) {
    if (spin < kCallerSpins)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  fn_ = &fn;
  end_ = end;
  grain_ = grain;
  next_.store(begin);
  finished_.store(0);
  error_ = nullptr;
  failed_.store(false);
  gen_.fetch_add(1); // open
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    wake_.notify_all();
  }
  tlsInsidePool = true;
  runChunks();
  tlsInsidePool = false;
  for (int spin = 0; finished_.load() < n; ++spin) {
    if (spin < kCallerSpins)
      cpuRelax();
    else
      std::this_thread::yield(); // a descheduled worker holds a chunk
  }
  gen_.fetch_add(1); // closed
  fn_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

} // namespace llmc
