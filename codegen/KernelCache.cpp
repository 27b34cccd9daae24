//===- KernelCache.cpp - Compiled kernel objects kept between compiles ----===//
#include "codegen/KernelCache.h"

#include "llmc/signing.h"

#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using llmc::signing::Digest;
using llmc::signing::sha256;
using llmc::signing::toHex;

namespace llmc::codegen {
namespace {

constexpr char kMagic[] = "LLMCKC1\n"; // 8 bytes, then the SHA-256 of the bytes
constexpr size_t kMagicSize = 8, kHeaderSize = kMagicSize + 32;
constexpr uint64_t kDefaultMaxMiB = 2048;

/// Why `dir` may not hold objects that go into signed artifacts, or "".
std::string unsafeBecause(const std::string &dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0)
    return std::string("cannot stat it: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode))
    return "it is a symbolic link";
  if (!S_ISDIR(st.st_mode))
    return "it is not a directory";
  if (st.st_uid != geteuid())
    return "it belongs to another user";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "it is writable by group or others";
  return "";
}

std::string defaultDir() {
  if (const char *d = std::getenv("LLMC_CACHE_DIR"); d && *d)
    return std::string(d) + "/kernels";
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/llmc/kernels";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/llmc/kernels";
  return "";
}

bool turnedOff() {
  const char *v = std::getenv("LLMC_KERNEL_CACHE");
  if (!v)
    return false;
  const std::string s(v);
  return s == "off" || s == "0" || s == "false" || s == "no";
}

uint64_t maxBytesFromEnv() {
  const char *v = std::getenv("LLMC_KERNEL_CACHE_MB");
  if (!v || !*v)
    return kDefaultMaxMiB << 20;
  char *end = nullptr;
  const unsigned long long mib = std::strtoull(v, &end, 10);
  if (*end || mib == 0) {
    std::fprintf(stderr, "llmc: warning: LLMC_KERNEL_CACHE_MB='%s' is not a positive number of "
                         "MiB; using %llu\n", v, (unsigned long long)kDefaultMaxMiB);
    return kDefaultMaxMiB << 20;
  }
  return uint64_t(mib) << 20;
}

std::string header(const std::string &bytes) {
  const Digest d = sha256(bytes.data(), bytes.size());
  return std::string(kMagic, kMagicSize) + std::string(reinterpret_cast<const char *>(d.data()), d.size());
}

} // namespace

KernelCache::KernelCache(std::string dir, uint64_t maxBytes)
    : dir_(std::move(dir)), maxBytes_(maxBytes) {
  if (dir_.empty()) {
    why_ = "no cache directory (set LLMC_CACHE_DIR or HOME)";
    return;
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir_).parent_path(), ec);
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    why_ = std::string("cannot create it: ") + std::strerror(errno);
    return;
  }
  why_ = unsafeBecause(dir_);
}

KernelCache &KernelCache::process() {
  static KernelCache *cache = [] {
    if (turnedOff()) {
      auto *c = new KernelCache("", 0);
      c->why_ = "LLMC_KERNEL_CACHE turns it off";
      return c;
    }
    auto *c = new KernelCache(defaultDir(), maxBytesFromEnv());
    if (!c->enabled() && !c->dir_.empty())
      std::fprintf(stderr, "llmc: warning: the kernel cache %s is not used: %s\n",
                   c->dir_.c_str(), c->why_.c_str());
    return c;
  }();
  return *cache;
}

std::string KernelCache::key(const std::vector<std::string> &parts) {
  std::string all;
  for (const std::string &p : parts)
    all += std::to_string(p.size()) + ":" + p;
  return toHex(sha256(all.data(), all.size()));
}

std::string KernelCache::entryPath(const std::string &key) const {
  return dir_ + "/" + key + ".bin";
}

std::optional<std::string> KernelCache::load(const std::string &key) {
  if (!enabled())
    return std::nullopt;
  const std::string path = entryPath(key);
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.misses;
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string all = ss.str();
  std::string bytes;
  if (all.size() >= kHeaderSize)
    bytes = all.substr(kHeaderSize);
  if (all.size() < kHeaderSize || all.compare(0, kHeaderSize, header(bytes)) != 0) {
    std::remove(path.c_str());
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.rejected;
    ++stats_.misses;
    return std::nullopt;
  }
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // recently used
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.hits;
  return bytes;
}

void KernelCache::store(const std::string &key, const std::string &bytes) {
  if (!enabled())
    return;
  static std::atomic<unsigned> serial{0};
  const std::string tmp = dir_ + "/" + key + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(serial++);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return;
  const std::string all = header(bytes) + bytes;
  size_t done = 0;
  while (done < all.size()) {
    const ssize_t n = write(fd, all.data() + done, all.size() - done);
    if (n <= 0)
      break;
    done += size_t(n);
  }
  const bool ok = close(fd) == 0 && done == all.size();
  if (!ok || std::rename(tmp.c_str(), entryPath(key).c_str()) != 0) {
    std::remove(tmp.c_str());
    return;
  }
  trim();
}

std::string KernelCache::getOrBuild(const std::string &key,
                                    const std::function<std::string()> &build, bool *hit) {
  if (std::optional<std::string> stored = load(key)) {
    if (hit)
      *hit = true;
    return std::move(*stored);
  }
  std::string bytes = build();
  store(key, bytes);
  if (hit)
    *hit = false;
  return bytes;
}

KernelCache::Stats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void KernelCache::trim() {
  struct Entry {
    fs::path path;
    fs::file_time_type used;
    uint64_t size;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".bin" || !e.is_regular_file(ec))
      continue;
    const uint64_t size = e.file_size(ec);
    entries.push_back({e.path(), e.last_write_time(ec), size});
    total += size;
  }
  if (total <= maxBytes_)
    return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry &a, const Entry &b) { return a.used < b.used; });
  for (const Entry &e : entries) {
    if (total <= maxBytes_ / 4 * 3)
      break;
    if (fs::remove(e.path, ec))
      total -= e.size;
  }
}

} // namespace llmc::codegen
