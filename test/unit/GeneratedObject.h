//===- GeneratedObject.h - Build and load generated kernels in a test -*- C++ -*-===//
// Compiles generated kernel source with the host compiler at one level and
// dlopens it from a temporary file (closed and removed on destruction).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/codegen.h"
#include "codegen/cpu/HostCompiler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace llmc::cgtest {

struct GeneratedObject {
  void *h = nullptr;
  std::string path;
  ~GeneratedObject() {
    if (h)
      dlclose(h);
    if (!path.empty())
      unlink(path.c_str());
  }
  template <class Fn> Fn fn(const std::string &symbol) const {
    return reinterpret_cast<Fn>(dlsym(h, symbol.c_str()));
  }
};

/// Builds `source` at `level` into `l` (ASSERTs: check HasFatalFailure()).
inline void loadGenerated(GeneratedObject &l, const std::string &source, codegen::IsaLevel level) {
  codegen::SharedObject so = codegen::compileSharedObject(source, level);
  char tmpl[] = "/tmp/llmc-cgtest-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  l.path = tmpl;
  std::ofstream(l.path, std::ios::binary).write(so.bytes.data(), std::streamsize(so.bytes.size()));
  l.h = dlopen(l.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(l.h, nullptr) << dlerror();
}

/// The baseline level and this CPU's (when higher).
inline std::vector<codegen::IsaLevel> testLevels() {
  std::vector<codegen::IsaLevel> levels = {codegen::IsaLevel::X86_64};
  if (codegen::hostIsa() != codegen::IsaLevel::X86_64)
    levels.push_back(codegen::hostIsa());
  return levels;
}

} // namespace llmc::cgtest
