//===- ParallelFor.cpp - Index loops over a few threads -------------------===//
#include "compiler/quant/ParallelFor.h"
#include "llmc/threads.h"
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace llmc::quant {

int defaultQuantThreads() {
  return int(std::clamp(defaultThreadCount(), 1, 8));
}

void parallelIndices(int64_t n, int threads, const std::function<void(int64_t)> &f) {
  if (threads <= 0)
    threads = defaultQuantThreads();
  threads = int(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i)
      f(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr failed;
  std::mutex mu;
  auto worker = [&] {
    try {
      for (int64_t i; (i = next.fetch_add(1)) < n;)
        f(i);
    } catch (...) { // rethrown on the calling thread
      std::lock_guard<std::mutex> lock(mu);
      if (!failed)
        failed = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (auto &t : pool)
    t.join();
  if (failed)
    std::rethrow_exception(failed);
}

void parallelPanels(int64_t n, int64_t panel, int threads,
                    const std::function<void(int64_t j0, int64_t w)> &f) {
  parallelIndices((n + panel - 1) / panel, threads, [&](int64_t p) {
    const int64_t j0 = p * panel;
    f(j0, std::min(panel, n - j0));
  });
}

} // namespace llmc::quant
