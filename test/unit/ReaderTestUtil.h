//===- ReaderTestUtil.h - Files for the model reader tests -----*- C++ -*-===//
// A scratch directory that cleans up after itself, byte-level file helpers,
// a check that an ImportError names a file, and a seeded byte-corrupter for
// "never crash on bad input" sweeps. Shared by the *ReaderTest.cpp files.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/SourceModel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace llmc::readertest {

class ScratchDir {
public:
  explicit ScratchDir(const char *tag) {
    std::string tmpl = ::testing::TempDir() + "llmc_" + tag + "_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

inline void writeBytes(const std::string &path, const void *data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char *>(data), std::streamsize(n));
  if (!out)
    throw std::runtime_error("cannot write " + path);
}
inline void writeBytes(const std::string &path, const std::vector<uint8_t> &b) {
  writeBytes(path, b.data(), b.size());
}
inline void writeText(const std::string &path, const std::string &s) {
  writeBytes(path, s.data(), s.size());
}
inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Runs f, expecting an ImportError whose message contains every needle.
template <typename F>
void expectImportError(F &&f, const std::vector<std::string> &needles) {
  try {
    f();
    ADD_FAILURE() << "expected an ImportError";
  } catch (const ImportError &e) {
    std::string msg = e.what();
    for (const std::string &n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message '" << msg << "' lacks '" << n << "'";
  } catch (const std::exception &e) {
    ADD_FAILURE() << "expected an ImportError, got another exception: " << e.what();
  }
}

/// Feeds `rounds` corrupted copies of `good` to `read` (which reads the
/// given path): every outcome must be success or ImportError. Corruptions
/// flip, overwrite or truncate bytes, biased toward the first `hot` bytes.
/// Deterministic (fixed seed).
template <typename F>
void corruptionSweep(const std::string &path, const std::vector<uint8_t> &good, size_t hot,
                     int rounds, F &&read) {
  // LLMC_SWEEP_SCALE=N runs N times as many rounds (for longer local runs).
  if (const char *scale = std::getenv("LLMC_SWEEP_SCALE"))
    rounds *= std::max(1, std::atoi(scale));
  std::mt19937 rng(12345);
  int failures = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint8_t> b = good;
    const size_t span = std::min(hot, b.size());
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = (rng() % 4 == 0) ? rng() % b.size() : rng() % span;
      switch (rng() % 4) {
      case 0: b[pos] ^= uint8_t(1u << (rng() % 8)); break;
      case 1: b[pos] = uint8_t(rng()); break;
      case 2: b[pos] = 0xFF; break;
      default: b.resize(pos); break;
      }
      if (b.empty())
        break;
    }
    writeBytes(path, b);
    try {
      read(path);
    } catch (const ImportError &) {
      ++failures;
    } catch (const std::exception &e) {
      ADD_FAILURE() << "round " << r << ": non-ImportError exception: " << e.what();
    }
  }
  EXPECT_GT(failures, 0); // the sweep did exercise the error paths
}

} // namespace llmc::readertest
