//===- Rows8GroupedUnpackTest.cpp - Grouped integers back from rows8 ------===//
// The GPU engine reads grouped-integer weights the compiler stored only in
// the CPU's eight-row layout (as Q4_0, Q4_1 or Q8_0 blocks): unpacking must
// give back the stored rows byte for byte.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/kernels/rows8.h"
#include "RandomRows.h"
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <random>
#include <tuple>

using namespace llmc;

TEST(Rows8Grouped, UnpackGivesTheStoredRowsBack) {
  std::mt19937 rng(21);
  for (auto [bits, sym, group] : {std::tuple{4, true, 32}, {4, false, 64}, {8, true, 128},
                                  {4, false, 96}}) {
    const DType t = groupedIntDType(bits, sym, group);
    ASSERT_TRUE(kernels::hasRows8(t)) << dtypeName(t);
    const int64_t rows = 16, cols = 384, stride = rowBytes(t, cols);
    std::vector<uint8_t> src(size_t(rows * stride));
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<uint8_t> row = llmc::randomRow(t, cols, rng);
      std::copy(row.begin(), row.end(), src.begin() + r * stride);
    }
    const int64_t gb = kernels::rows8GroupBytes(*kernels::rows8Layout(t), cols);
    std::vector<uint8_t> packed(static_cast<size_t>(rows / 8 * gb));
    std::vector<uint8_t> back(static_cast<size_t>(stride));
    kernels::packRows8(t, src.data(), stride, rows, cols, packed.data());
    for (int64_t r = 0; r < rows; ++r) {
      kernels::unpackRows8GroupedRow(t, packed.data() + (r / 8) * gb, int(r % 8), cols,
                                     back.data());
      ASSERT_TRUE(std::equal(back.begin(), back.end(), src.begin() + r * stride))
          << dtypeName(t) << " row " << r;
    }
  }
  EXPECT_THROW(kernels::unpackRows8GroupedRow(DType::Q4_0, nullptr, 0, 32, nullptr),
               std::runtime_error);
}
