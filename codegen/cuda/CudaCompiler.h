//===- CudaCompiler.h - CUDA C++ to cubin and PTX through NVRTC -*- C++ -*-===//
// NVRTC is loaded at run time (dlopen of libnvrtc), so the compiler starts
// on machines without the CUDA toolkit and only `--target cuda` needs it.
// No GPU is needed: NVRTC compiles for a named architecture.
//===----------------------------------------------------------------------===//
#pragma once
#include <optional>
#include <string>

namespace llmc::codegen {

/// NVRTC's version ("13.0"), or nullopt when libnvrtc cannot be loaded
/// (`why`, when given, says what was tried).
std::optional<std::string> nvrtcVersion(std::string *why = nullptr);

/// `source` compiled for `arch`: "sm_80", "sm_90", ... give a cubin (ELF),
/// "compute_80", ... PTX text. std::runtime_error with NVRTC's log on a
/// compile error, or when NVRTC is missing. A build of the same source,
/// architecture and NVRTC version kept by the kernel cache
/// (codegen/KernelCache.h) is taken from there.
std::string compileCuda(const std::string &source, const std::string &arch);

} // namespace llmc::codegen
