//===- ThreadPool.h - Persistent workers for parallel loops -----*- C++ -*-===//
// Threads are created once per Executor and reused for every op: a parallel
// loop hands out chunks of an index range through an atomic counter, the
// calling thread works too, and the call returns when every chunk is done.
// Workers spin briefly before sleeping so back-to-back ops (decode) do not
// pay a full wake-up each time. Nested calls run inline.
//===----------------------------------------------------------------------===//
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llmc {

class ThreadPool {
public:
  /// threads: total participants including the caller (<= 0: hardware).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return int(workers_.size()) + 1; }

  using RangeFn = std::function<void(int64_t lo, int64_t hi)>;
  /// Calls fn on disjoint sub-ranges covering [begin, end), each at most
  /// `grain` long (grain <= 0: split evenly over the threads). Blocks until
  /// all are done; rethrows the first exception a chunk threw.
  void parallelFor(int64_t begin, int64_t end, int64_t grain, const RangeFn &fn);

private:
  void workerLoop();
  void runChunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  int active_ = 0;

  // The current job.
  const RangeFn *fn_ = nullptr;
  int64_t begin_ = 0, end_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

} // namespace llmc
