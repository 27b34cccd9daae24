//===- HostCompiler.h - Build generated C++ into shared objects -*- C++ -*-===//
// The compiler side of codegen: the generated kernel source is built with
// the system C++ compiler, once per x86-64 level, when an artifact is
// compiled (never by the runtime). The compiler command is $LLMC_CXX, else
// the first of clang++, clang++-22, c++, g++ on PATH.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/codegen.h"

#include <string>

namespace llmc::codegen {

/// The compiler command, or "" when none is found.
std::string findHostCompiler();

struct SharedObject {
  std::string bytes;    // the .so file
  std::string compiler; // command and version line
  double seconds = 0;
};

/// Compile `source` at `level` (-O3 -march=<level>, vectorized reductions
/// allowed with -fopenmp-simd). Throws std::runtime_error with the
/// compiler's output on failure or when there is no compiler. Safe to call
/// from several threads at once.
SharedObject compileSharedObject(const std::string &source, IsaLevel level);

/// Flags the objects are built with (recorded in the manifest).
std::string compileFlags(IsaLevel level);

} // namespace llmc::codegen
