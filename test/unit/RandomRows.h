//===- RandomRows.h - Random stored rows for kernel tests -------*- C++ -*-===//
#pragma once
#include "llmc/random_rows.h"

namespace llmc::testing {
using llmc::randomRow;
} // namespace llmc::testing
