//===- stream_triad.cpp - Memory bandwidth, STREAM-triad style -----------===//
// The bandwidth a decode roofline divides by (bench/cpu_performance.py):
// triad a[i] = b[i] + s * c[i] over three double arrays far larger than the
// last-level cache, split in contiguous slices over T threads (each thread
// first-touches its own slice), best of K passes. Bytes counted per pass are
// STREAM's: 3 arrays x 8 bytes x N (two read, one written; the
// write-allocate read of a[] is not counted, as in STREAM). Also a read-only
// pass (sum of b[]), closer to decode's access pattern (weights are only
// read), reported next to it.
//
// Usage: stream_triad [THREADS] [MIB_PER_ARRAY] [PASSES]
// Prints one JSON object: {"threads", "mib_per_array", "passes",
//   "triad_gbs", "read_gbs"} (GB = 1e9 bytes). Build:
//   g++ -O3 -march=native -std=c++17 -pthread bench/stream_triad.cpp
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;

/// Runs fn(t, begin, end) on T threads over [0, n) and returns the seconds
/// from the start of the first to the end of the last.
template <class Fn> double parallel(int T, size_t n, Fn fn) {
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < T; ++t) {
    size_t b = n * t / T, e = n * (t + 1) / T;
    ts.emplace_back([=] { fn(t, b, e); });
  }
  for (auto &th : ts)
    th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

long parseArg(const char *s, const char *what, long lo, long hi) {
  char *end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (!end || *end || v < lo || v > hi) {
    std::fprintf(stderr, "stream_triad: %s must be an integer in [%ld, %ld], got '%s'\n", what,
                 lo, hi, s);
    std::exit(2);
  }
  return v;
}
} // namespace

int main(int argc, char **argv) {
  int T = argc > 1 ? int(parseArg(argv[1], "THREADS", 1, 1024)) : 1;
  long mib = argc > 2 ? parseArg(argv[2], "MIB_PER_ARRAY", 1, 1 << 16) : 256;
  int passes = argc > 3 ? int(parseArg(argv[3], "PASSES", 1, 1000)) : 10;
  size_t n = size_t(mib) * (1u << 20) / sizeof(double);

  // Uninitialised storage: each thread first-touches its own slice.
  std::unique_ptr<double[]> a(new (std::nothrow) double[n]), b(new (std::nothrow) double[n]),
      c(new (std::nothrow) double[n]);
  if (!a || !b || !c) {
    std::fprintf(stderr, "stream_triad: cannot allocate 3 x %ld MiB\n", mib);
    return 1;
  }
  double *A = a.get(), *B = b.get(), *C = c.get();
  parallel(T, n, [&](int, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      A[i] = 0.0;
      B[i] = 1.0 + double(i & 7);
      C[i] = 2.0;
    }
  });

  const double s = 3.0;
  double bestTriad = 1e30, bestRead = 1e30;
  std::vector<double> partial(size_t(T) * 8, 0.0); // padded: one cache line per thread
  for (int p = 0; p < passes; ++p) {
    bestTriad = std::min(bestTriad, parallel(T, n, [&](int, size_t lo, size_t hi) {
                           for (size_t i = lo; i < hi; ++i)
                             A[i] = B[i] + s * C[i];
                         }));
    bestRead = std::min(bestRead, parallel(T, n, [&](int t, size_t lo, size_t hi) {
                          // Four independent vector accumulators: bound by
                          // memory, not by the latency of a serial sum.
                          typedef double v4 __attribute__((vector_size(32)));
                          v4 acc[4] = {};
                          size_t i = lo;
                          for (; i + 16 <= hi; i += 16)
                            for (int k = 0; k < 4; ++k) {
                              v4 x;
                              std::memcpy(&x, B + i + 4 * k, sizeof x);
                              acc[k] += x;
                            }
                          double sum = 0;
                          for (; i < hi; ++i)
                            sum += B[i];
                          for (int k = 0; k < 4; ++k)
                            sum += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
                          partial[size_t(t) * 8] = sum;
                        }));
  }
  // Use the results so the compiler cannot drop the passes.
  double check = A[n / 2];
  for (int t = 0; t < T; ++t)
    check += partial[size_t(t) * 8];
  if (check != check) {
    std::fprintf(stderr, "stream_triad: NaN in the results\n");
    return 1;
  }
  double bytes = double(n) * sizeof(double);
  std::printf("{\"threads\": %d, \"mib_per_array\": %ld, \"passes\": %d, \"triad_gbs\": %.3f, "
              "\"read_gbs\": %.3f}\n",
              T, mib, passes, 3.0 * bytes / bestTriad / 1e9, bytes / bestRead / 1e9);
  return 0;
}
