//===- TokenIdsTest.cpp - ".ids" token files ------------------------------===//
#include "llmc/tokenizer.h"

#include <gtest/gtest.h>
#include <stdexcept>

using namespace llmc;

TEST(TokenIds, ParsesIdsAndSkipsComments) {
  auto ids = readTokenIds("# header\n1 2  3\n\n  # indented comment\n4\t5\r\n", "f.ids", 512);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3, 4, 5}));
}

TEST(TokenIds, RejectsBadEntriesNamingThem) {
  try {
    readTokenIds("1 2\n3 x4\n", "f.ids", 512);
    FAIL();
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("f.ids:2: 'x4'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(readTokenIds("-1", "f.ids", 512), std::runtime_error);
  EXPECT_THROW(readTokenIds("512", "f.ids", 512), std::runtime_error);
  EXPECT_NO_THROW(readTokenIds("512", "f.ids", 0)); // vocabulary unknown
  EXPECT_THROW(readTokenIds("99999999999", "f.ids", 0), std::runtime_error);
}
