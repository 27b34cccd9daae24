//===- DTypeFamiliesTest.cpp - AAAC / QTEA / HBQ type names and geometry --===//
// The parametric families' DType encoding: names round-trip, geometry
// matches the documented block sizes, bad parameters are rejected with a
// message, and the side-data API refuses rows without their side data.
//===----------------------------------------------------------------------===//
#include "llmc/dtype.h"

#include <gtest/gtest.h>
#include <stdexcept>
#include <vector>

using namespace llmc;

TEST(DTypeFamilies, NamesRoundTrip) {
  for (int bits : {2, 3, 4})
    for (int64_t g : {8, 32, 64, 192, 4096}) {
      DType a = aaacDType(bits, g);
      EXPECT_EQ(dtypeName(a), "aaac" + std::to_string(bits) + "_g" + std::to_string(g));
      EXPECT_EQ(dtypeFromName(dtypeName(a)), a);
      EXPECT_EQ(aaacSpec(a)->bits, bits);
      EXPECT_EQ(aaacSpec(a)->group, g);
      EXPECT_FALSE(qteaSpec(a) || hbqSpec(a) || groupedIntSpec(a));
    }
  DType q = qteaDType(64, 5);
  EXPECT_EQ(dtypeName(q), "qtea_g64_s5");
  EXPECT_EQ(dtypeFromName("QTEA_G64_S5"), q);
  EXPECT_EQ(qteaSpec(q)->salientPct, 5);
  DType h = hbqDType(4, 64);
  EXPECT_EQ(dtypeName(h), "hbq4_b64");
  EXPECT_EQ(dtypeFromName("hbq4_b64"), h);
  EXPECT_EQ(dtypeFromName("u8"), DType::U8);
}

TEST(DTypeFamilies, Geometry) {
  EXPECT_EQ(dtypeInfo(aaacDType(4, 64)).block_size, 64);
  EXPECT_EQ(dtypeInfo(aaacDType(4, 64)).block_bytes, 2 + 32);
  EXPECT_EQ(dtypeInfo(aaacDType(3, 32)).block_bytes, 2 + 12);
  EXPECT_EQ(dtypeInfo(qteaDType(64, 5)).block_bytes, 4 + 13); // ceil(64 / 5) trit bytes
  EXPECT_EQ(dtypeInfo(qteaDType(192, 0)).block_bytes, 4 + 39);
  EXPECT_EQ(dtypeInfo(hbqDType(4, 64)).block_bytes, 3 + 32);
  EXPECT_EQ(rowBytes(aaacDType(4, 64), 576), 9 * 34);
  EXPECT_DOUBLE_EQ(bitsPerWeight(hbqDType(4, 64)), 35.0 * 8 / 64);
  EXPECT_THROW(rowBytes(aaacDType(4, 64), 100), std::runtime_error);
  EXPECT_EQ(rowBytes(DType::U8, 17), 17);
}

TEST(DTypeFamilies, BadParametersAreRejected) {
  EXPECT_THROW(aaacDType(5, 64), std::runtime_error);
  EXPECT_THROW(aaacDType(4, 12), std::runtime_error);
  EXPECT_THROW(qteaDType(64, 51), std::runtime_error);
  EXPECT_THROW(qteaDType(0, 5), std::runtime_error);
  EXPECT_THROW(hbqDType(4, 48), std::runtime_error);
  EXPECT_THROW(hbqDType(1, 64), std::runtime_error);
  EXPECT_FALSE(dtypeFromName("aaac5_g64"));
  EXPECT_FALSE(dtypeFromName("aaac4_g064"));
  EXPECT_FALSE(dtypeFromName("qtea_g64"));
  EXPECT_FALSE(dtypeFromName("hbq4_b48"));
  EXPECT_FALSE(dtypeFromName("hbq4_b"));
  EXPECT_THROW(dtypeInfo(DType(0x41000000u)), std::runtime_error); // 'A' tag, 0 bits
}

TEST(DTypeFamilies, SideData) {
  EXPECT_TRUE(needsAux(aaacDType(4, 64)));
  EXPECT_TRUE(needsAux(qteaDType(64, 5)));
  EXPECT_FALSE(needsAux(hbqDType(4, 64)));
  EXPECT_FALSE(needsAux(DType::Q4_1));
  EXPECT_EQ(auxBytes(DType::Q4_1, 10, 64), 0);
  EXPECT_EQ(auxBytes(aaacDType(4, 64), 10, 64), 64); // two 16-entry fp16 codebooks
  // A row of a side-data format cannot be read without its side data.
  const DType a = aaacDType(4, 64);
  std::vector<uint8_t> row(size_t(rowBytes(a, 64)));
  std::vector<float> out(64);
  EXPECT_THROW(dequantizeRow(a, row.data(), out.data(), 64), std::runtime_error);
  EXPECT_THROW(dequantizeRowAux(a, row.data(), nullptr, 0, 1, out.data(), 64),
               std::runtime_error);
}
