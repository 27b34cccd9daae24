//===- KernelCacheTest.cpp - The kernel cache keeps builds, safely ---------===//
#include "codegen/KernelCache.h"
#include "codegen/cpu/HostCompiler.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace llmc;
using namespace llmc::codegen;
namespace fs = std::filesystem;

namespace {

// The unit tests' kernel builds share the build tree's cache with the lit
// and end-to-end tests (never the user's), unless LLMC_CACHE_DIR names one.
// Set before main(): the process's cache is resolved at its first use.
const bool kTestCacheDir = [] {
  setenv("LLMC_CACHE_DIR", LLMC_TEST_KERNEL_CACHE, /*overwrite=*/0);
  return true;
}();

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/llmc-kcache-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path &p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void setAge(const fs::path &p, int secondsAgo) {
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= secondsAgo;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, p.c_str(), times, 0), 0) << p;
}

} // namespace

// A build is kept and given back without building again; an entry whose
// bytes no longer match their checksum is thrown away and built again.
TEST(KernelCache, KeepsABuildAndRebuildsAnEntryWhoseBytesChanged) {
  TempDir tmp;
  KernelCache cache((tmp.path / "kernels").string(), 1 << 20);
  ASSERT_TRUE(cache.enabled()) << cache.why();
  struct stat st;
  ASSERT_EQ(stat(cache.dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  int builds = 0;
  auto build = [&] {
    ++builds;
    return std::string("object bytes \x01\x02", 15);
  };
  const std::string key = KernelCache::key({"cpu", "flags", "source"});
  bool hit = true;
  EXPECT_EQ(cache.getOrBuild(key, build, &hit), build());
  EXPECT_FALSE(hit);
  EXPECT_EQ(builds, 2); // one by getOrBuild, one for the comparison
  EXPECT_EQ(cache.getOrBuild(key, build, &hit), std::string("object bytes \x01\x02", 15));
  EXPECT_TRUE(hit);
  EXPECT_EQ(builds, 2);

  const fs::path entry = fs::path(cache.dir()) / (key + ".bin");
  ASSERT_TRUE(fs::exists(entry));
  std::string bytes = slurp(entry);
  bytes.back() ^= 1;
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_FALSE(fs::exists(entry)) << "a corrupt entry is removed";
  EXPECT_EQ(cache.stats().rejected, 1);
  EXPECT_EQ(cache.getOrBuild(key, build, &hit), std::string("object bytes \x01\x02", 15));
  EXPECT_FALSE(hit);
  EXPECT_EQ(builds, 3);
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << "LLMCKC1\n";
  EXPECT_FALSE(cache.load(key).has_value()) << "a truncated entry is a miss";
  EXPECT_EQ(cache.stats().rejected, 2);
  EXPECT_EQ(cache.stats().hits, 1);
}

TEST(KernelCache, KeysSeparateTheirParts) {
  EXPECT_NE(KernelCache::key({"ab", "c"}), KernelCache::key({"a", "bc"}));
  EXPECT_NE(KernelCache::key({"a", ""}), KernelCache::key({"a"}));
  EXPECT_EQ(KernelCache::key({"a", "b"}), KernelCache::key({"a", "b"}));
  EXPECT_EQ(KernelCache::key({"a"}).size(), 64u);
}

// Objects from the cache go into signed artifacts, so a directory another
// user could write to is never used.
TEST(KernelCache, ADirectoryOthersCanWriteOrALinkIsNotUsed) {
  TempDir tmp;
  const fs::path open = tmp.path / "open";
  ASSERT_EQ(mkdir(open.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  KernelCache shared(open.string(), 1 << 20);
  EXPECT_FALSE(shared.enabled());
  EXPECT_NE(shared.why().find("writable by group or others"), std::string::npos) << shared.why();
  shared.store(KernelCache::key({"x"}), "bytes");
  EXPECT_TRUE(fs::is_empty(open)) << "a disabled cache writes nothing";
  EXPECT_FALSE(shared.load(KernelCache::key({"x"})).has_value());

  const fs::path own = tmp.path / "own", link = tmp.path / "link";
  ASSERT_EQ(mkdir(own.c_str(), 0700), 0);
  fs::create_directory_symlink(own, link);
  KernelCache linked(link.string(), 1 << 20);
  EXPECT_FALSE(linked.enabled());
  EXPECT_NE(linked.why().find("symbolic link"), std::string::npos) << linked.why();
}

// Past its size the cache drops the entries used longest ago; a load
// counts as a use.
TEST(KernelCache, DropsTheLeastRecentlyUsedPastItsSize) {
  TempDir tmp;
  KernelCache cache((tmp.path / "k").string(), 400); // three 140-byte entries pass it
  const std::string a = KernelCache::key({"a"}), b = KernelCache::key({"b"}),
                    c = KernelCache::key({"c"});
  const std::string payload(100, 'p'); // 140 bytes with the header
  cache.store(a, payload);
  setAge(fs::path(cache.dir()) / (a + ".bin"), 30);
  cache.store(b, payload);
  setAge(fs::path(cache.dir()) / (b + ".bin"), 20);
  ASSERT_TRUE(cache.load(a).has_value()); // a is now the most recent
  cache.store(c, payload);                // 420 > 400: drop down to 300
  EXPECT_TRUE(cache.load(a).has_value());
  EXPECT_FALSE(cache.load(b).has_value()) << "b was used longest ago";
  EXPECT_TRUE(cache.load(c).has_value());
}

// The host compiler goes through the process's cache: the second build of
// a source is taken from it, byte for byte the first build.
TEST(KernelCache, TheSecondBuildOfASourceComesFromTheCache) {
  KernelCache &cache = KernelCache::process();
  if (!cache.enabled())
    GTEST_SKIP() << "kernel cache off: " << cache.why();
  const std::string source =
      "extern \"C\" int llmc_cache_probe() { return " +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007) +
      "; }\n";
  const SharedObject first = compileSharedObject(source, IsaLevel::X86_64);
  EXPECT_FALSE(first.cached);
  const SharedObject second = compileSharedObject(source, IsaLevel::X86_64);
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(first.bytes, second.bytes);
  EXPECT_FALSE(compileSharedObject(source, IsaLevel::V3).cached)
      << "another level is another key";
}
