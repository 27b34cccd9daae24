//===- HostCompiler.h - Build generated C++ into shared objects -*- C++ -*-===//
// The compiler side of codegen: the generated kernel source is built once
// per x86-64 level when an artifact is compiled (never by the runtime), in
// this process, by the clang and lld libraries of the LLVM that llmc links
// (no compiler subprocess, no compiler needed on PATH).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/codegen.h"

#include <string>

namespace llmc::codegen {

struct SharedObject {
  std::string bytes;    // the .so file
  std::string compiler; // what built it (compilerDescription())
  double seconds = 0;
  bool cached = false;  // taken from the kernel cache (codegen/KernelCache.h)
};

/// "clang 22.1.8 and lld 22.1.8, in process": recorded in the manifest.
std::string compilerDescription();

/// Compile `source` at `level` (-O3 -march=<level>, vectorized reductions
/// allowed with -fopenmp-simd) and link it into a shared object, or take
/// the object from the kernel cache when these exact source, flags and
/// compiler built it before (KernelCache::process()). Throws
/// std::runtime_error with clang's or lld's diagnostics on failure. Safe to
/// call from several threads at once (compiles run in parallel, links one
/// at a time).
SharedObject compileSharedObject(const std::string &source, IsaLevel level);

/// Flags the objects are built with (recorded in the manifest).
std::string compileFlags(IsaLevel level);

} // namespace llmc::codegen
