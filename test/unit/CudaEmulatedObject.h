//===- CudaEmulatedObject.h - Generated CUDA source, built for emulation -*- C++ -*-===//
// A kernel source with the host shim (CudaEmulation.h), built by the host
// compiler and opened, with the emulation's entry points looked up.
//===----------------------------------------------------------------------===//
#pragma once
#include "CudaEmulation.h"
#include "GeneratedObject.h"

#include <gtest/gtest.h>

#include <string>

namespace llmc::cgtest {

struct EmulatedCuda {
  GeneratedObject obj;
  CudaEmuEntries emu;
};

/// Builds `source` behind the shim into e (a fatal gtest failure when the
/// build or a lookup fails).
inline void loadEmulatedCuda(EmulatedCuda &e, const std::string &source) {
  loadGenerated(e.obj, std::string(kCudaHostShim) + source, codegen::IsaLevel::X86_64);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  e.emu = CudaEmuEntries::lookUp([&](const char *name) { return e.obj.fn<void *>(name); });
  ASSERT_TRUE(e.emu.complete());
#if defined(__x86_64__)
  ASSERT_NE(e.emu.fibers, nullptr) << "the shim's fibers (x86-64)";
#endif
}

} // namespace llmc::cgtest
