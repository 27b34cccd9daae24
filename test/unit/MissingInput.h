//===- MissingInput.h - Skip locally, fail under CI ------------*- C++ -*-===//
// A unit test whose input (a model from scripts/setup.sh or shared/) is
// absent skips on a developer's machine, but under CI (CI=true) the same
// absence fails the test: CI must not report a pass that tested nothing.
//===----------------------------------------------------------------------===//
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace llmc::testinput {

inline bool underCi() {
  const char *ci = std::getenv("CI");
  return ci && std::strcmp(ci, "true") == 0;
}

} // namespace llmc::testinput

/// Ends the current test: skipped, or failed under CI=true. `what` is
/// anything streamable that names the missing input. Use in a TEST body.
#define LLMC_MISSING_INPUT(what)                                                            \
  do {                                                                                      \
    if (::llmc::testinput::underCi())                                                         \
      GTEST_FAIL() << "missing test input under CI=true: " << what;                         \
    GTEST_SKIP() << "missing test input: " << what;                                         \
  } while (0)
