//===- stream_triad.cpp - Memory bandwidth, STREAM-triad style -----------===//
// The bandwidth a decode roofline divides by (bench/cpu_performance.py):
// triad a[i] = b[i] + s * c[i] over three double arrays far larger than the
// last-level cache, split in contiguous slices over T threads (each thread
// first-touches its own slice), best of K passes. Bytes counted per pass are
// STREAM's: 3 arrays x 8 bytes x N (two read, one written; the
// write-allocate read of a[] is not counted, as in STREAM). Also a read-only
// pass (sum of b[], best of 1, 2, 4 and 8 interleaved streams per thread),
// decode's access pattern (weights are only read), reported next to it.
//
// Usage: stream_triad [THREADS] [MIB_PER_ARRAY] [PASSES]
// Prints one JSON object: {"threads", "mib_per_array", "passes",
//   "triad_gbs", "read_gbs", "read_streams"} (GB = 1e9 bytes).
// stream_triad read THREADS BYTES PASSES: the read-only bandwidth over a
//   buffer of BYTES (a decode step's working set, so a model that fits in
//   the caches gets the caches' bandwidth): {"threads", "bytes", "passes",
//   "read_gbs", "streams"}. Build:
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
typedef double v4 __attribute__((vector_size(32)));

/// Sum of B[lo, hi) read as S interleaved streams (S equal sub-slices read
/// side by side), eight independent vector accumulators: bound by memory,
/// with as many streams in flight as a decode reading several weight rows.
template <int S> double readSlice(const double *B, size_t lo, size_t hi) {
  const size_t len = (hi - lo) / S / 16 * 16;
  v4 acc[8] = {};
  for (size_t i = 0; i < len; i += 16)
    for (int s = 0; s < S; ++s)
      for (int k = 0; k < 4; ++k) {
        v4 x;
        std::memcpy(&x, B + lo + size_t(s) * len + i + 4 * k, sizeof x);
        acc[(s * 4 + k) & 7] += x;
      }
  double sum = 0;
  for (size_t i = lo + size_t(S) * len; i < hi; ++i)
    sum += B[i];
  for (int k = 0; k < 8; ++k)
    sum += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  return sum;
}

double readSliceStreams(int streams, const double *B, size_t lo, size_t hi) {
  switch (streams) {
  case 1: return readSlice<1>(B, lo, hi);
  case 2: return readSlice<2>(B, lo, hi);
  case 4: return readSlice<4>(B, lo, hi);
  default: return readSlice<8>(B, lo, hi);
  }
}

/// Best read-only bandwidth (GB/s) of T threads over n doubles, over 1, 2,
/// 4 and 8 streams per thread and `passes` passes; `bestStreams` receives
/// the stream count that gave it.
double bestReadGbs(int T, const double *B, size_t n, int passes, std::vector<double> &partial,
                   int &bestStreams) {
  double best = 1e30;
  for (int streams : {1, 2, 4, 8})
    for (int p = 0; p < passes; ++p) {
      double sec = parallel(T, n, [&](int t, size_t lo, size_t hi) {
        partial[size_t(t) * 8] += readSliceStreams(streams, B, lo, hi);
      });
      if (sec < best) {
        best = sec;
        bestStreams = streams;
      }
    }
  return double(n) * sizeof(double) / best / 1e9;
}

/// `stream_triad read THREADS BYTES PASSES`: the read-only bandwidth over a
/// buffer of BYTES (a decode step's working set: cache effects included).
int readMode(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: stream_triad read THREADS BYTES PASSES\n");
    return 2;
  }
  int T = int(parseArg(argv[2], "THREADS", 1, 1024));
  long bytes = parseArg(argv[3], "BYTES", 1 << 16, 1L << 40);
  int passes = int(parseArg(argv[4], "PASSES", 1, 1000));
  size_t n = size_t(bytes) / sizeof(double);
  std::unique_ptr<double[]> b(new (std::nothrow) double[n]);
  if (!b) {
    std::fprintf(stderr, "stream_triad: cannot allocate %ld bytes\n", bytes);
    return 1;
  }
  double *B = b.get();
  parallel(T, n, [&](int, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i)
      B[i] = 1.0 + double(i & 7);
  });
  std::vector<double> partial(size_t(T) * 8, 0.0);
  int streams = 1;
  const double gbs = bestReadGbs(T, B, n, passes, partial, streams);
  double check = 0;
  for (int t = 0; t < T; ++t)
    check += partial[size_t(t) * 8];
  if (check != check)
    return 1;
  std::printf("{\"threads\": %d, \"bytes\": %ld, \"passes\": %d, \"read_gbs\": %.3f, "
              "\"streams\": %d}\n",
              T, bytes, passes, gbs, streams);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "read") == 0)
    return readMode(argc, argv);
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
  double bestTriad = 1e30;
  std::vector<double> partial(size_t(T) * 8, 0.0); // padded: one cache line per thread
  for (int p = 0; p < passes; ++p) {
    bestTriad = std::min(bestTriad, parallel(T, n, [&](int, size_t lo, size_t hi) {
                           for (size_t i = lo; i < hi; ++i)
                             A[i] = B[i] + s * C[i];
                         }));
  }
  int streams = 1;
  const double readGbs = bestReadGbs(T, B, n, passes, partial, streams);
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
              "\"read_gbs\": %.3f, \"read_streams\": %d}\n",
              T, mib, passes, 3.0 * bytes / bestTriad / 1e9, readGbs, streams);
  return 0;
}
