//===- ParallelFor.h - Index loops over a few threads ----------*- C++ -*-===//
// The calibrated methods' independent work items (matrices, row chunks,
// Hessian panels) spread over plain threads. Each item is computed the same
// way whatever the thread count, so a compile's artifact does not depend on
// the machine's cores.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <functional>

namespace llmc::quant {

/// The machine's cores, at least 1 and at most 8.
int defaultQuantThreads();

/// Calls f(i) for every i in [0, n) on `threads` threads (<= 0: the default;
/// the calling thread works too). Items are handed out in order; the first
/// exception an item throws is rethrown here once every thread has stopped.
void parallelIndices(int64_t n, int threads, const std::function<void(int64_t)> &f);

/// Calls f(j0, w) for the fixed column panels [j0, j0 + w) of width `panel`
/// (the last one narrower) that cover [0, n), in parallel as parallelIndices.
/// The panels do not depend on the thread count, so neither do their sums.
void parallelPanels(int64_t n, int64_t panel, int threads,
                    const std::function<void(int64_t j0, int64_t w)> &f);

} // namespace llmc::quant
