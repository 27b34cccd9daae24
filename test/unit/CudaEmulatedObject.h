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
  CudaEmuSetFn set = nullptr;
  CudaEmuPlayFn play = nullptr;
  CudaEmuDepositedFn deposited = nullptr;
};

/// Builds `source` behind the shim into e (a fatal gtest failure when the
/// build or a lookup fails).
inline void loadEmulatedCuda(EmulatedCuda &e, const std::string &source) {
  loadGenerated(e.obj, std::string(kCudaHostShim) + source, codegen::IsaLevel::X86_64);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  e.set = e.obj.fn<CudaEmuSetFn>("llmc_emu_set");
  e.play = e.obj.fn<CudaEmuPlayFn>("llmc_emu_play");
  e.deposited = e.obj.fn<CudaEmuDepositedFn>("llmc_emu_deposited");
  ASSERT_TRUE(e.set && e.play && e.deposited);
}

} // namespace llmc::cgtest
