//===- ThreadPool.h - Persistent workers for parallel loops -----*- C++ -*-===//
// Threads are created once per Executor and reused for every op: a parallel
// loop hands out chunks of an index range through an atomic counter, the
// calling thread works too, and the call returns as soon as every chunk is
// done. Decode runs a few hundred small loops per token, so dispatch is kept
// off the kernel: workers spin briefly on a job counter before sleeping, the
// caller wakes sleepers only when there are any, and it waits for finished
// chunks, not for every worker to check in (a worker the OS has not
// scheduled yet does not hold the loop up). Nested calls run inline.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/threads.h"
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
  /// threads: total participants including the caller (<= 0: defaultThreadCount()).
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
  std::condition_variable wake_;
  // The job's state, read by every participant (written once per job), and
  // its two counters, written per chunk, sit on separate cache lines.
  // Odd while a job is open for workers to join, even when closed.
  alignas(64) std::atomic<uint64_t> gen_{0};
  std::atomic<int> inside_{0};   // workers that have joined the current job
  std::atomic<int> sleepers_{0}; // workers blocked on wake_
  std::atomic<bool> stop_{false};

  // The current job; written only while no worker is inside.
  const RangeFn *fn_ = nullptr;
  int64_t end_ = 0, grain_ = 1;
  alignas(64) std::atomic<int64_t> next_{0};
  alignas(64) std::atomic<int64_t> finished_{0}; // indices done (or skipped after a failure)
  alignas(64) std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

} // namespace llmc
