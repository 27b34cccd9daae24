//===- BitAllocationTest.cpp - --target-bpw's knapsack on synthetic data ===//
// allocateBits against brute force on small instances (optimal, within the
// budget), over budget sweeps (never over budget, predicted KLD never rises
// with the budget), with ties (deterministic: the earlier unit gets the
// upgrade), a coarse cost unit (still within budget, near optimal) and bad
// input (clear errors).
//===----------------------------------------------------------------------===//
#include "compiler/quant/BitAllocation.h"
#include "compiler/quant/GroupGrid.h"
#include "llmc/dtype.h"
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <random>

using namespace llmc;
using namespace llmc::quant;

namespace {

const int kBits[] = {2, 3, 4, 5, 6, 8};

/// A weight [rows, cols] at gq{2..8}a_g64 with a made-up sensitivity: the
/// KLD falls about 4x per bit like RTN's error energy.
AllocationUnit weightUnit(const std::string &name, int64_t rows, int64_t cols, double sens) {
  AllocationUnit u;
  u.name = name;
  for (int b : kBits) {
    u.bytes.push_back(rows * rowBytes(groupedIntDType(b, false, 64), cols));
    u.kld.push_back(sens * std::pow(4.0, -(b - 2)));
  }
  return u;
}

std::vector<AllocationUnit> randomUnits(std::mt19937 &rng, int n, int candidates) {
  std::uniform_int_distribution<int> size(1, 40);
  std::uniform_real_distribution<double> kld(0.0, 1.0);
  std::vector<AllocationUnit> units;
  for (int i = 0; i < n; ++i) {
    AllocationUnit u;
    u.name = "u" + std::to_string(i);
    int64_t b = size(rng);
    double k = 1 + 3 * kld(rng);
    for (int c = 0; c < candidates; ++c) {
      u.bytes.push_back(b);
      u.kld.push_back(k);
      b += size(rng);
      k *= kld(rng); // not convex in general: the DP must not care
    }
    units.push_back(u);
  }
  return units;
}

/// Least KLD over every combination within the budget (inf if none).
double bruteForce(const std::vector<AllocationUnit> &units, int64_t budget) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> c(units.size(), 0);
  while (true) {
    int64_t bytes = 0;
    double kld = 0;
    for (size_t i = 0; i < units.size(); ++i) {
      bytes += units[i].bytes[c[i]];
      kld += units[i].kld[c[i]];
    }
    if (bytes <= budget)
      best = std::min(best, kld);
    size_t i = 0;
    while (i < units.size() && ++c[i] == units[i].bytes.size())
      c[i++] = 0;
    if (i == units.size())
      return best;
  }
}

} // namespace

TEST(BitAllocation, MatchesBruteForceAndRespectsBudget) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    auto units = randomUnits(rng, 5, 4);
    int64_t lo = 0, hi = 0;
    for (auto &u : units) {
      lo += u.bytes.front();
      hi += u.bytes.back();
    }
    for (int64_t budget = lo; budget <= hi + 3; budget += 1 + (hi - lo) / 37) {
      Allocation a = allocateBits(units, budget);
      int64_t bytes = 0;
      double kld = 0;
      for (size_t i = 0; i < units.size(); ++i) {
        bytes += units[i].bytes[size_t(a.choice[i])];
        kld += units[i].kld[size_t(a.choice[i])];
      }
      ASSERT_EQ(bytes, a.bytes);
      ASSERT_LE(a.bytes, budget);
      ASSERT_NEAR(kld, a.kld, 1e-12);
      ASSERT_NEAR(a.kld, bruteForce(units, budget), 1e-12) << "trial " << trial << " budget "
                                                           << budget;
    }
  }
}

TEST(BitAllocation, LargerBudgetNeverIncreasesKld) {
  // A SmolLM2-like set: 30 layers of q,k,v,o,gate,up,down and the embedding.
  std::vector<AllocationUnit> units;
  std::mt19937 rng(3);
  std::lognormal_distribution<double> sens(-6, 1.5);
  for (int l = 0; l < 30; ++l) {
    units.push_back(weightUnit("q", 576, 576, sens(rng)));
    units.push_back(weightUnit("k", 192, 576, sens(rng)));
    units.push_back(weightUnit("v", 192, 576, sens(rng)));
    units.push_back(weightUnit("o", 576, 576, sens(rng)));
    units.push_back(weightUnit("gate", 1536, 576, sens(rng)));
    units.push_back(weightUnit("up", 1536, 576, sens(rng)));
    units.push_back(weightUnit("down", 576, 1536, sens(rng)));
  }
  units.push_back(weightUnit("embd", 49152, 576, sens(rng)));
  int64_t lo = 0, hi = 0;
  for (auto &u : units) {
    lo += u.bytes.front();
    hi += u.bytes.back();
  }
  double previous = std::numeric_limits<double>::infinity();
  for (int step = 0; step <= 60; ++step) {
    const int64_t budget = lo + (hi - lo) * step / 60;
    Allocation a = allocateBits(units, budget);
    EXPECT_LE(a.bytes, budget);
    EXPECT_LE(a.kld, previous) << "budget " << budget;
    // The budget is used: no single upgrade fits in what is left.
    for (size_t i = 0; i < units.size(); ++i) {
      const size_t c = size_t(a.choice[i]);
      if (c + 1 < units[i].bytes.size()) {
        EXPECT_GT(units[i].bytes[c + 1] - units[i].bytes[c], budget - a.bytes)
            << units[i].name << " budget " << budget;
      }
    }
    previous = a.kld;
  }
  // All-8-bit budget: everything at the widest candidate.
  Allocation all = allocateBits(units, hi);
  for (size_t i = 0; i < units.size(); ++i)
    EXPECT_EQ(all.choice[i], 5) << units[i].name;
}

TEST(BitAllocation, TiesAreDeterministic) {
  // Two identical units, room for one upgrade: the first unit gets it, every time.
  std::vector<AllocationUnit> units = {weightUnit("a", 64, 64, 1.0), weightUnit("b", 64, 64, 1.0)};
  const int64_t step = units[0].bytes[1] - units[0].bytes[0];
  const int64_t budget = units[0].bytes[0] + units[1].bytes[0] + step;
  for (int rep = 0; rep < 3; ++rep) {
    Allocation a = allocateBits(units, budget);
    EXPECT_EQ(a.choice[0], 1);
    EXPECT_EQ(a.choice[1], 0);
  }
  // Equal KLD at two costs: the cheaper candidate is taken.
  AllocationUnit flat{"flat", {10, 20}, {0.5, 0.5}};
  EXPECT_EQ(allocateBits({flat}, 100).choice[0], 0);
}

TEST(BitAllocation, CoarseUnitStaysWithinBudget) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    auto units = randomUnits(rng, 5, 4);
    int64_t lo = 0, hi = 0;
    for (auto &u : units) {
      lo += u.bytes.front();
      hi += u.bytes.back();
    }
    double previous = std::numeric_limits<double>::infinity();
    for (int64_t budget = lo; budget <= hi; budget += 7) {
      Allocation a = allocateBits(units, budget, /*maxCells=*/16);
      ASSERT_LE(a.bytes, budget);
      ASSERT_LE(a.kld, previous);
      // Never better than the optimum (a sanity bound on the coarse answer).
      ASSERT_GE(a.kld, bruteForce(units, budget) - 1e-12);
      previous = a.kld;
    }
  }
}

TEST(BitAllocation, BadInputAndTooSmallBudget) {
  auto u = weightUnit("blk.0.attn_q.weight", 64, 64, 1.0);
  try {
    allocateBits({u}, u.bytes.front() - 1);
    FAIL() << "expected an error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(u.bytes.front())), std::string::npos)
        << e.what();
  }
  AllocationUnit bad{"w", {1, 2}, {0.1}};
  EXPECT_THROW(allocateBits({bad}, 10), std::invalid_argument);
  AllocationUnit nan{"w", {1, 2}, {0.1, std::nan("")}};
  EXPECT_THROW(allocateBits({nan}, 10), std::invalid_argument);
  EXPECT_TRUE(allocateBits({}, 0).choice.empty());
}

TEST(BitAllocation, PredictKldScalesWithErrorEnergy) {
  EXPECT_DOUBLE_EQ(predictKld(0.2, 4.0, 1.0), 0.05);
  EXPECT_DOUBLE_EQ(predictKld(0.2, 4.0, 16.0), 0.8);
  EXPECT_EQ(predictKld(0.2, 0.0, 1.0), 0.0);
  EXPECT_EQ(predictKld(-1e-9, 1.0, 1.0), 0.0);
}

TEST(BitAllocation, ErrorEnergiesMatchRtnQuantize) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.02f);
  const int64_t rows = 7, cols = 128;
  std::vector<float> w(size_t(rows * cols));
  for (float &x : w)
    x = d(rng);
  w[17] = 0.5f; // an outlier widens one group's grid
  const std::vector<int> bits = {2, 3, 4, 8};
  for (bool sym : {false, true}) {
    std::vector<double> e = rtnErrorEnergies(w.data(), rows, cols, bits, sym, 64);
    for (size_t k = 0; k < bits.size(); ++k) {
      std::vector<float> dq = rtnQuantize(w.data(), rows, cols, {bits[k], sym, 64}).dequantized();
      double ref = 0;
      for (size_t i = 0; i < w.size(); ++i)
        ref += (double(w[i]) - double(dq[i])) * (double(w[i]) - double(dq[i]));
      EXPECT_NEAR(e[k], ref, 1e-9 * ref) << bits[k] << (sym ? " sym" : " asym");
      if (k) {
        EXPECT_LT(e[k], e[k - 1]);
      }
    }
  }
  EXPECT_THROW(rtnErrorEnergies(w.data(), rows, cols, bits, false, 48), std::invalid_argument);
}
