//===- KernelCache.h - Compiled kernel objects kept between compiles -*- C++ -*-===//
// Building a model's generated kernels (clang at six x86-64 levels, NVRTC
// for each CUDA architecture) is most of a compile. The output is a pure
// function of the source, the flags and the compiler, so it is kept in a
// per-user cache and a later compile of the same kernels (another pass
// pipeline over the same model, a CI job compiling again) takes the stored
// bytes: the artifact is byte-identical either way.
//
// Where: $LLMC_CACHE_DIR/kernels, else $XDG_CACHE_HOME/llmc/kernels, else
// $HOME/.cache/llmc/kernels. LLMC_KERNEL_CACHE=off (or 0) turns it off.
// The objects end up in signed artifacts that run without a compiler, so the
// directory must be the user's own: created 0700, and a directory that is a
// symbolic link, belongs to another user or is writable by group or others
// is not used (one warning on stderr). Each entry holds the SHA-256 of its
// bytes; an entry that does not match (truncated, edited) is removed and
// rebuilt. Writes go to a private temporary file renamed into place, so
// concurrent compiles never see a partial entry. When the entries pass
// LLMC_KERNEL_CACHE_MB (default 2048) the least recently used are removed.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace llmc::codegen {

class KernelCache {
public:
  /// A cache in `dir` (created 0700 when missing) holding at most
  /// `maxBytes` of entries. disabled() with why() when `dir` cannot be used.
  KernelCache(std::string dir, uint64_t maxBytes);
  /// The cache the environment selects (see above), resolved once.
  static KernelCache &process();

  bool enabled() const { return why_.empty(); }
  const std::string &why() const { return why_; }
  const std::string &dir() const { return dir_; }

  /// Hex SHA-256 over the parts, each length-prefixed (no part can run into
  /// the next).
  static std::string key(const std::vector<std::string> &parts);
  /// The stored bytes of `key`, or nullopt (no entry, cache off, or an entry
  /// whose checksum fails: that one is removed).
  std::optional<std::string> load(const std::string &key);
  /// Keeps `bytes` under `key` (best effort: a full disk only loses the
  /// entry), then trims the cache to its size.
  void store(const std::string &key, const std::string &bytes);

  /// `build()`'s bytes, from the cache when `key` is there; `hit` tells which.
  std::string getOrBuild(const std::string &key, const std::function<std::string()> &build,
                         bool *hit = nullptr);

  struct Stats {
    int hits = 0, misses = 0, rejected = 0;
  };
  Stats stats() const;

private:
  std::string entryPath(const std::string &key) const;
  void trim();

  std::string dir_, why_;
  uint64_t maxBytes_;
  mutable std::mutex mutex_;
  Stats stats_;
};

} // namespace llmc::codegen
