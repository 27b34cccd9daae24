//===- BitAllocation.cpp - Per-tensor widths under a size budget --------===//
#include "compiler/quant/BitAllocation.h"
#include "compiler/quant/GroupGrid.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace llmc::quant {

std::vector<double> rtnErrorEnergies(const float *w, int64_t rows, int64_t cols,
                                     const std::vector<int> &bits, bool sym, int64_t group) {
  if (group <= 0 || cols % group != 0)
    throw std::invalid_argument("rtnErrorEnergies: group " + std::to_string(group) +
                                " does not divide rows of " + std::to_string(cols));
  std::vector<GridSpec> specs;
  for (int b : bits)
    specs.push_back({b, sym, group});
  std::vector<double> e(bits.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
      const float *x = w + r * cols + g0;
      GroupRange range;
      for (int64_t i = 0; i < group; ++i)
        range.add(x[i]);
      for (size_t k = 0; k < specs.size(); ++k) {
        // quantCode/dequantCode's arithmetic, with the clamp as comparisons
        // (the same for finite weights) so the loop vectorizes.
        const GridSpec &s = specs[k];
        const Grid grid = makeGrid(range, s);
        const float id = grid.scale != 0.0f ? 1.0f / grid.scale : 0.0f;
        const float off = float(s.offset()), qmax = float(s.qmax());
        const float base = s.sym ? 0.0f : grid.min;
        double sum = 0;
        for (int64_t i = 0; i < group; ++i) {
          float q = std::nearbyint((x[i] - base) * id) + off;
          q = q < 0.0f ? 0.0f : (q > qmax ? qmax : q);
          const float back = s.sym ? grid.scale * (q - off) : grid.scale * q + grid.min;
          const double d = double(x[i]) - double(back);
          sum += d * d;
        }
        e[k] += sum;
      }
    }
  return e;
}

double predictKld(double probeKld, double probeErr, double err) {
  if (!(probeErr > 0))
    return 0;
  return std::max(0.0, probeKld) * err / probeErr;
}

Allocation allocateBits(const std::vector<AllocationUnit> &units, int64_t budgetBytes,
                        int64_t maxCells) {
  if (maxCells < 1)
    throw std::invalid_argument("allocateBits: maxCells must be positive");
  const size_t n = units.size();
  std::vector<int64_t> cheapest(n);
  int64_t base = 0, range = 0;
  for (size_t i = 0; i < n; ++i) {
    const AllocationUnit &u = units[i];
    if (u.bytes.empty() || u.bytes.size() != u.kld.size())
      throw std::invalid_argument("allocateBits: unit '" + u.name +
                                  "' needs the same number (> 0) of byte costs and KLDs");
    for (size_t c = 0; c < u.bytes.size(); ++c)
      if (u.bytes[c] < 0 || !std::isfinite(u.kld[c]) || u.kld[c] < 0)
        throw std::invalid_argument("allocateBits: unit '" + u.name + "' candidate " +
                                    std::to_string(c) +
                                    " has negative bytes or a negative/non-finite KLD");
    cheapest[i] = *std::min_element(u.bytes.begin(), u.bytes.end());
    base += cheapest[i];
    range += *std::max_element(u.bytes.begin(), u.bytes.end()) - cheapest[i];
  }
  if (base > budgetBytes)
    throw std::runtime_error("the budget of " + std::to_string(budgetBytes) +
                             " bytes is below the smallest reachable size, " +
                             std::to_string(base) + " bytes (every unit at its cheapest width)");

  // Cost unit: the gcd of every extra cost over the cheapest candidate, or
  // coarser (rounding costs up) when the table would exceed maxCells.
  int64_t unit = 0;
  for (size_t i = 0; i < n; ++i)
    for (int64_t b : units[i].bytes)
      unit = std::gcd(unit, b - cheapest[i]);
  if (unit == 0)
    unit = 1;
  if (range / unit > maxCells)
    unit = (range + maxCells - 1) / maxCells;
  auto cells = [&](size_t i, size_t c) { return (units[i].bytes[c] - cheapest[i] + unit - 1) / unit; };
  const int64_t cap = std::min((budgetBytes - base) / unit, (range + unit - 1) / unit);

  // best[u]: least KLD of the units so far with at most u cells of extra cost.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(size_t(cap) + 1, 0.0), next(size_t(cap) + 1);
  std::vector<std::vector<uint8_t>> pick(n, std::vector<uint8_t>(size_t(cap) + 1));
  for (size_t i = 0; i < n; ++i) {
    const AllocationUnit &u = units[i];
    if (u.bytes.size() > 255)
      throw std::invalid_argument("allocateBits: unit '" + u.name + "' has over 255 candidates");
    std::vector<size_t> order(u.bytes.size());
    std::iota(order.begin(), order.end(), 0);
    // Cheaper candidates first: on equal KLD the cheaper (then earlier) wins.
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return u.bytes[a] < u.bytes[b]; });
    for (int64_t x = 0; x <= cap; ++x) {
      double v = inf;
      uint8_t arg = 0;
      for (size_t c : order) {
        const int64_t w = cells(i, c);
        if (w > x)
          continue;
        const double t = best[size_t(x - w)] + u.kld[c];
        if (t < v) {
          v = t;
          arg = uint8_t(c);
        }
      }
      next[size_t(x)] = v;
      pick[i][size_t(x)] = arg;
    }
    best.swap(next);
  }

  Allocation a;
  a.choice.assign(n, 0);
  int64_t x = cap;
  for (size_t i = n; i-- > 0;) {
    const int c = pick[i][size_t(x)];
    a.choice[i] = c;
    x -= cells(i, size_t(c));
  }
  for (size_t i = 0; i < n; ++i)
    a.bytes += units[i].bytes[size_t(a.choice[i])];
  // The table's value (not a re-summation): exactly non-increasing in cap.
  a.kld = best[size_t(cap)];
  if (a.bytes > budgetBytes) // cannot happen: costs are rounded up
    throw std::logic_error("allocateBits: internal error, allocation exceeds the budget");
  return a;
}

} // namespace llmc::quant
