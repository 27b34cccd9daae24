//===- ThreadPoolTest.cpp - Parallel loops: coverage, errors, reuse --------===//
// The pool runs hundreds of tiny loops per decode step, so these check that
// back-to-back loops each cover their range exactly once, that exceptions
// reach the caller and leave the pool usable, and that nested loops run.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

using llmc::ThreadPool;

TEST(ThreadPool, ManySmallLoopsCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int iter = 0; iter < 2000; ++iter) {
      const int64_t n = 1 + iter % 37;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (auto &h : hits)
        h.store(0);
      pool.parallelFor(0, n, 1 + iter % 3, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          hits[size_t(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " iter " << iter;
    }
  }
}

TEST(ThreadPool, ExceptionReachesCallerAndPoolStaysUsable) {
  ThreadPool pool(2);
  for (int iter = 0; iter < 50; ++iter) {
    EXPECT_THROW(pool.parallelFor(0, 64, 1,
                                  [&](int64_t lo, int64_t) {
                                    if (lo == 17)
                                      throw std::runtime_error("chunk 17");
                                  }),
                 std::runtime_error);
    std::atomic<int64_t> sum{0};
    pool.parallelFor(0, 100, 0, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        sum.fetch_add(i);
    });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, NestedLoopsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.parallelFor(0, 8, 1, [&](int64_t, int64_t) {
    pool.parallelFor(0, 10, 1, [&](int64_t lo, int64_t hi) { count.fetch_add(int(hi - lo)); });
  });
  EXPECT_EQ(count.load(), 80);
}

TEST(ThreadPool, ThreadsEnvironmentTextIsACountInRangeOrIgnored) {
  EXPECT_EQ(llmc::threadCountFromEnvText(nullptr), 0);
  EXPECT_EQ(llmc::threadCountFromEnvText(""), 0);
  EXPECT_EQ(llmc::threadCountFromEnvText("1"), 1);
  EXPECT_EQ(llmc::threadCountFromEnvText("256"), 256);
  for (const char *bad : {"0", "-2", "257", "4x", "two", "99999999999999999999"})
    EXPECT_EQ(llmc::threadCountFromEnvText(bad), 0) << bad;
  EXPECT_GE(llmc::defaultThreadCount(), 1);
}
