//===- FuzzCommon.h - Shared helpers of the libFuzzer targets --*- C++ -*-===//
// Readers that take a path get the input through a per-process scratch
// file in $TMPDIR. Every target catches std::exception (a clean error is
// the right answer to a malformed input); a crash, a sanitizer report, an
// uncaught exception or a leak is a finding.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace llmc::fuzz {

/// A scratch path for this process (`name` inside a private folder).
inline std::string scratchPath(const std::string &name) {
  static const std::string dir = [] {
    const char *t = std::getenv("TMPDIR");
    std::string d = std::string(t && *t ? t : "/tmp") + "/llmc-fuzz-" + std::to_string(getpid());
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0)
      std::abort();
    return d;
  }();
  return dir + "/" + name;
}

/// Writes the bytes to `path` (aborts if it cannot: that is the harness's
/// failure, not the target's).
inline void writeFile(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0)
    std::abort();
}

} // namespace llmc::fuzz
