//===- FakeCudaDriver.cpp - A CUDA driver that runs kernels on the host ---===//
// Test-only stand-in for libcuda.so.1 (selected with LLMC_CUDA_DRIVER=path
// of this library): one "GPU" of compute capability 9.0 whose memory is
// host memory and whose kernels are the artifact's generated CUDA source
// run by the host emulation (test/unit/CudaEmulation.h). So the whole GPU
// engine (uploads, slot addresses, launch arguments, graph capture and
// replay, paged KV) runs end to end on a machine without a GPU.
//
// cuModuleLoadData ignores the image it is given (cubin or PTX: not
// runnable here) and builds the CUDA source named by LLMC_FAKECUDA_SOURCE
// (the artifact's codegen.cuda.kernels.cu) with the system C++ compiler
// ($CXX, else c++) and the emulation shim, once per program: the shared
// object is kept in a cache folder keyed by the program's and the
// command's hash (the e2e tests load the same source many times). Launches are dispatched by the
// kernel's name to its ABI (codegen/cuda/CudaKernelSource.h,
// CudaAttentionSource.h); a launch during stream capture is recorded with
// its argument values and run by cuGraphLaunch. Kernels with warp-wide
// calls run each warp's lanes as fibers (CudaEmulation.h);
// LLMC_FAKECUDA_REPLAY=1 replays them instead (the same bits, slower).
//===----------------------------------------------------------------------===//
#include "../unit/CudaEmulation.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

using namespace llmc::cgtest;

namespace {

using ll = long long;
using us = unsigned short;

enum Error { kSuccess = 0, kInvalidValue = 1, kNotFound = 500, kInvalidImage = 200,
             kCapturedEvent = 907, kUnknown = 999 };

struct Module {
  void *so = nullptr;
  std::string path;
  CudaEmuEntries emu;
};

struct Function {
  Module *m = nullptr;
  void *sym = nullptr;
  std::string name;
};

bool capturing = false;
std::vector<std::function<void()>> recorded;
std::set<void *> capturedEvents; // last recorded in a capturing stream
std::string lastError;

template <typename T> T arg(void **args, int i) { return *static_cast<T *>(args[i]); }
bool startsWith(const std::string &s, const char *p) { return s.rfind(p, 0) == 0; }

/// A RoPE + KV append kernel's launch: f16 pools (us), or PolyKV's (bytes,
/// then the layer's signs; its warp-wide steps replayed).
template <typename Pool>
std::function<void()> bindRope(const Function &f, unsigned grid, unsigned block, void **a) {
  constexpr bool polyKv = !std::is_same_v<Pool, us>;
  Module &m = *f.m;
  auto qkv = arg<const float *>(a, 0);
  auto ld = arg<ll>(a, 1);
  auto T = arg<int>(a, 2);
  auto pos = arg<const int *>(a, 3);
  auto slot = arg<const int *>(a, 4);
  auto seq = arg<const int *>(a, 5);
  auto q = arg<float *>(a, 6);
  auto ldq = arg<ll>(a, 7);
  auto k = arg<Pool *>(a, 8);
  auto v = arg<Pool *>(a, 9);
  auto table = arg<const int *>(a, 10);
  auto mb = arg<int>(a, 11);
  if constexpr (polyKv) {
    auto fn = reinterpret_cast<void (*)(const float *, ll, int, const int *, const int *,
                                        const int *, float *, ll, Pool *, Pool *, const int *,
                                        int, const float *)>(f.sym);
    auto signs = arg<const float *>(a, 12);
    return [=, &m] {
      runKernelReplay(m.emu, grid, block,
                      [&] { fn(qkv, ld, T, pos, slot, seq, q, ldq, k, v, table, mb, signs); });
    };
  } else {
    auto fn = reinterpret_cast<void (*)(const float *, ll, int, const int *, const int *,
                                        const int *, float *, ll, Pool *, Pool *, const int *,
                                        int)>(f.sym);
    return [=, &m] {
      runKernel(m.emu.set, grid, block,
                [&] { fn(qkv, ld, T, pos, slot, seq, q, ldq, k, v, table, mb); });
    };
  }
}

/// An attention kernel's launch (its pools' rows of type Pool: f16 bits,
/// or PolyKV's bytes): all-lane sums, replayed.
template <typename Pool>
std::function<void()> bindAttend(const Function &f, unsigned grid, unsigned block, void **a) {
  Module &m = *f.m;
  auto fn = reinterpret_cast<void (*)(const float *, ll, int, const int *, const int *,
                                      const int *, const Pool *, const Pool *, const int *, int,
                                      int, int, float *)>(f.sym);
  auto q = arg<const float *>(a, 0);
  auto ldq = arg<ll>(a, 1);
  auto T = arg<int>(a, 2);
  auto pos = arg<const int *>(a, 3);
  auto seq = arg<const int *>(a, 4);
  auto hole = arg<const int *>(a, 5);
  auto k = arg<const Pool *>(a, 6);
  auto v = arg<const Pool *>(a, 7);
  auto table = arg<const int *>(a, 8);
  auto mb = arg<int>(a, 9);
  auto ns = arg<int>(a, 10);
  auto sl = arg<int>(a, 11);
  auto part = arg<float *>(a, 12);
  return [=, &m] {
    runKernelReplay(m.emu, grid, block,
                    [&] { fn(q, ldq, T, pos, seq, hole, k, v, table, mb, ns, sl, part); });
  };
}

/// The launch of f with these arguments' values, as a closure.
std::function<void()> bindLaunch(const Function &f, unsigned grid, unsigned block, void **a) {
  Module &m = *f.m;
  const std::string &n = f.name;
  if (startsWith(n, "llmc_cu_mv1_")) { // the one-token decode kernel
    auto fn = reinterpret_cast<void (*)(const unsigned char *, ll, const float *, float *, ll,
                                        const float *)>(f.sym);
    auto w = arg<const unsigned char *>(a, 0);
    auto stride = arg<ll>(a, 1);
    auto x = arg<const float *>(a, 2);
    auto y = arg<float *>(a, 3);
    auto rows = arg<ll>(a, 4);
    auto res = arg<const float *>(a, 5);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(w, stride, x, y, rows, res); }); };
  }
  // llmc_cu_mv_* and the tensor-core llmc_cu_mm_* share the ABI; the
  // latter's warp-wide mma is replayed.
  const bool mma = startsWith(n, "llmc_cu_mm_");
  if (mma || startsWith(n, "llmc_cu_mv_")) {
    auto fn = reinterpret_cast<void (*)(const unsigned char *, ll, const float *, ll, int, float *,
                                        ll, ll, const float *, ll)>(f.sym);
    auto w = arg<const unsigned char *>(a, 0);
    auto stride = arg<ll>(a, 1);
    auto x = arg<const float *>(a, 2);
    auto ldx = arg<ll>(a, 3);
    auto T = arg<int>(a, 4);
    auto y = arg<float *>(a, 5);
    auto ldy = arg<ll>(a, 6);
    auto rows = arg<ll>(a, 7);
    auto res = arg<const float *>(a, 8);
    auto ldr = arg<ll>(a, 9);
    return [=, &m] {
      auto call = [&] { fn(w, stride, x, ldx, T, y, ldy, rows, res, ldr); };
      if (mma)
        runKernelReplay(m.emu, grid, block, call);
      else
        runKernel(m.emu.set, grid, block, call);
    };
  }
  if (startsWith(n, "llmc_cu_rms_norm_")) {
    auto fn = reinterpret_cast<void (*)(const float *, const float *, float *, ll, float)>(f.sym);
    auto x = arg<const float *>(a, 0);
    auto w = arg<const float *>(a, 1);
    auto y = arg<float *>(a, 2);
    auto rows = arg<ll>(a, 3);
    auto eps = arg<float>(a, 4);
    return [=, &m] {
      runKernelReplay(m.emu, grid, block, [&] { fn(x, w, y, rows, eps); });
    };
  }
  if (startsWith(n, "llmc_cu_gate_")) {
    auto fn = reinterpret_cast<void (*)(float *, const float *, ll)>(f.sym);
    auto g = arg<float *>(a, 0);
    auto u = arg<const float *>(a, 1);
    auto cnt = arg<ll>(a, 2);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(g, u, cnt); }); };
  }
  if (n == "llmc_cu_add") {
    auto fn = reinterpret_cast<void (*)(const float *, const float *, float *, ll)>(f.sym);
    auto x = arg<const float *>(a, 0);
    auto b = arg<const float *>(a, 1);
    auto y = arg<float *>(a, 2);
    auto cnt = arg<ll>(a, 3);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(x, b, y, cnt); }); };
  }
  if (n == "llmc_cu_moe_gather") {
    auto fn = reinterpret_cast<void (*)(const float *, ll, const int *, int, float *, ll, ll)>(
        f.sym);
    auto x = arg<const float *>(a, 0);
    auto ldx = arg<ll>(a, 1);
    auto rows = arg<const int *>(a, 2);
    auto cnt = arg<int>(a, 3);
    auto y = arg<float *>(a, 4);
    auto ldy = arg<ll>(a, 5);
    auto cols = arg<ll>(a, 6);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(x, ldx, rows, cnt, y, ldy, cols); }); };
  }
  if (n == "llmc_cu_moe_scatter_add") {
    auto fn = reinterpret_cast<void (*)(const float *, ll, const int *, const float *, int,
                                        float *, ll, ll)>(f.sym);
    auto y = arg<const float *>(a, 0);
    auto ldy = arg<ll>(a, 1);
    auto rows = arg<const int *>(a, 2);
    auto w = arg<const float *>(a, 3);
    auto cnt = arg<int>(a, 4);
    auto out = arg<float *>(a, 5);
    auto ldo = arg<ll>(a, 6);
    auto cols = arg<ll>(a, 7);
    return [=, &m] {
      runKernel(m.emu.set, grid, block, [&] { fn(y, ldy, rows, w, cnt, out, ldo, cols); });
    };
  }
  if (n == "llmc_cu_moe_fill") {
    auto fn = reinterpret_cast<void (*)(const float *, float *, ll)>(f.sym);
    auto src = arg<const float *>(a, 0);
    auto dst = arg<float *>(a, 1);
    auto cnt = arg<ll>(a, 2);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(src, dst, cnt); }); };
  }
  if (startsWith(n, "llmc_cu_embed_")) {
    auto fn = reinterpret_cast<void (*)(const unsigned char *, ll, ll, const int *, int, float *,
                                        ll)>(f.sym);
    auto t = arg<const unsigned char *>(a, 0);
    auto stride = arg<ll>(a, 1);
    auto vocab = arg<ll>(a, 2);
    auto tok = arg<const int *>(a, 3);
    auto T = arg<int>(a, 4);
    auto out = arg<float *>(a, 5);
    auto ldo = arg<ll>(a, 6);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(t, stride, vocab, tok, T, out, ldo); }); };
  }
  if (startsWith(n, "llmc_cu_rope_kv_")) // ABI 3: the rows' cache slots beside positions
    return bindRope<us>(f, grid, block, a);
  if (startsWith(n, "llmc_cu_pkv_rope_")) // PolyKV: encoded by warp-wide steps (replayed)
    return bindRope<unsigned char>(f, grid, block, a);
  if (startsWith(n, "llmc_cu_pkv_combine_")) {
    auto fn = reinterpret_cast<void (*)(const float *, int, int, float *, ll, const float *)>(
        f.sym);
    auto part = arg<const float *>(a, 0);
    auto T = arg<int>(a, 1);
    auto ns = arg<int>(a, 2);
    auto out = arg<float *>(a, 3);
    auto ldo = arg<ll>(a, 4);
    auto signs = arg<const float *>(a, 5);
    return [=, &m] {
      runKernelReplay(m.emu, grid, block,
                      [&] { fn(part, T, ns, out, ldo, signs); });
    };
  }
  if (startsWith(n, "llmc_cu_pkv_attend_")) // PolyKV rows: bytes
    return bindAttend<unsigned char>(f, grid, block, a);
  if (startsWith(n, "llmc_cu_attend_combine_")) {
    auto fn = reinterpret_cast<void (*)(const float *, int, int, float *, ll)>(f.sym);
    auto part = arg<const float *>(a, 0);
    auto T = arg<int>(a, 1);
    auto ns = arg<int>(a, 2);
    auto out = arg<float *>(a, 3);
    auto ldo = arg<ll>(a, 4);
    return [=, &m] { runKernel(m.emu.set, grid, block, [&] { fn(part, T, ns, out, ldo); }); };
  }
  if (startsWith(n, "llmc_cu_attend_")) // ABI 3: a hole of slots per (sequence, KV head)
    return bindAttend<us>(f, grid, block, a);

  return nullptr;
}

std::string readFile(const char *path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return f ? s.str() : std::string();
}

} // namespace

extern "C" {

int cuInit(unsigned) { return kSuccess; }
int cuGetErrorString(int rc, const char **s) {
  *s = lastError.empty() ? "fake CUDA driver error" : lastError.c_str();
  (void)rc;
  return kSuccess;
}
int cuDeviceGetCount(int *n) {
  *n = 1;
  return kSuccess;
}
int cuDeviceGet(int *d, int) {
  *d = 0;
  return kSuccess;
}
int cuDeviceGetAttribute(int *v, int attr, int) {
  *v = attr == 75 ? 9 : 0; // compute capability 9.0
  return kSuccess;
}
int cuDeviceGetName(char *name, int len, int) {
  snprintf(name, size_t(len), "llmc host emulation (fake CUDA driver)");
  return kSuccess;
}
int cuDevicePrimaryCtxRetain(void **ctx, int) {
  static int token;
  *ctx = &token;
  return kSuccess;
}
int cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
int cuCtxSetCurrent(void *) { return kSuccess; }
int cuCtxSynchronize() { return kSuccess; }

/// FNV-1a, 64 bits: the host build cache's key.
uint64_t fnv1a(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

/// The host build of `program` (the shim and the CUDA source) as a shared
/// object, from the build cache ($TMPDIR or /tmp)/llmc-fakecuda-UID/HASH.so
/// when an earlier process built the same program with the same command;
/// "" (lastError set) when the build fails. `temporary`: the object is in a
/// work folder of its own (no usable cache folder), to remove once loaded.
std::string hostBuild(const std::string &program, bool &temporary) {
  temporary = false;
  const char *cxx = getenv("CXX");
  // -march=native with -ffp-contract=off: no fused multiply-adds, so the
  // same IEEE results as a plain build (checked: identical logits), faster.
  const std::string flags = " -std=c++17 -O2 -march=native -ffp-contract=off -fPIC -shared -w";
  const std::string compiler = std::string(cxx && *cxx ? cxx : "c++") + flags;
  const char *tmp = getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/llmc-fakecuda-" +
                          std::to_string(getuid());
  char key[32];
  snprintf(key, sizeof key, "%016llx", (unsigned long long)fnv1a(compiler + '\n' + program));
  mkdir(dir.c_str(), 0700);
  // Only a folder of our own that nobody else can write is trusted.
  struct stat st;
  const bool cacheOk = stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
                       st.st_uid == getuid() && !(st.st_mode & (S_IWGRP | S_IWOTH));
  const std::string so = cacheOk ? dir + "/" + key + ".so" : "";
  if (cacheOk && access(so.c_str(), R_OK) == 0)
    return so;
  char work[] = "/tmp/llmc-fakecuda-XXXXXX";
  if (!mkdtemp(work)) {
    lastError = "fake CUDA driver: no temporary folder";
    return "";
  }
  const std::string cpp = std::string(work) + "/k.cpp", built = std::string(work) + "/k.so";
  std::ofstream(cpp) << program;
  const std::string cmd = compiler + " -o " + built + " " + cpp;
  const int rc = std::system(cmd.c_str());
  unlink(cpp.c_str());
  // Renamed into place whole, so a concurrent process never loads half a file.
  if (rc == 0 && cacheOk && std::rename(built.c_str(), so.c_str()) == 0) {
    rmdir(work);
    return so;
  }
  if (rc != 0) {
    unlink(built.c_str());
    rmdir(work);
    lastError = "fake CUDA driver: the host build of the CUDA source failed: " + cmd;
    return "";
  }
  temporary = true; // no cache: loaded from the work folder, then removed
  return built;
}

int cuModuleLoadData(void **module, const void *) {
  const char *src = getenv("LLMC_FAKECUDA_SOURCE");
  const std::string source = src ? readFile(src) : std::string();
  if (source.empty()) {
    lastError = "fake CUDA driver: set LLMC_FAKECUDA_SOURCE to the artifact's CUDA source";
    return kInvalidImage;
  }
  auto m = std::make_unique<Module>();
  bool temporary = false;
  m->path = hostBuild(std::string(kCudaHostShim) + source, temporary);
  if (m->path.empty())
    return kInvalidImage;
  m->so = dlopen(m->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (temporary) {
    unlink(m->path.c_str());
    rmdir(m->path.substr(0, m->path.rfind('/')).c_str());
  }
  if (!m->so)
    return kInvalidImage;
  void *so = m->so;
  m->emu = CudaEmuEntries::lookUp([so](const char *name) { return dlsym(so, name); });
  // LLMC_FAKECUDA_REPLAY=1: replays instead of fibers (their reference).
  const char *replay = getenv("LLMC_FAKECUDA_REPLAY");
  m->emu.useFibers = !(replay && *replay == '1');
  *module = m.release();
  return kSuccess;
}
int cuModuleUnload(void *module) {
  auto *m = static_cast<Module *>(module);
  if (m->so)
    dlclose(m->so);
  delete m;
  return kSuccess;
}
int cuModuleGetFunction(void **fn, void *module, const char *name) {
  auto *m = static_cast<Module *>(module);
  void *sym = dlsym(m->so, name);
  if (!sym)
    return kNotFound;
  static std::vector<std::unique_ptr<Function>> functions; // live as long as the process
  functions.push_back(std::make_unique<Function>(Function{m, sym, name}));
  *fn = functions.back().get();
  return kSuccess;
}

int cuMemAlloc_v2(uint64_t *p, size_t bytes) {
  void *m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m)
    return 2; // out of memory
  std::memset(m, 0xff, bytes); // garbage, as fresh device memory may be
  *p = uint64_t(reinterpret_cast<uintptr_t>(m));
  return kSuccess;
}
int cuMemFree_v2(uint64_t p) {
  std::free(reinterpret_cast<void *>(uintptr_t(p)));
  return kSuccess;
}
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) {
  std::memcpy(reinterpret_cast<void *>(uintptr_t(dst)), src, n);
  return kSuccess;
}
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
  std::memcpy(dst, reinterpret_cast<const void *>(uintptr_t(src)), n);
  return kSuccess;
}
int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *) {
  if (capturing)
    return kInvalidValue; // the engine copies outside graphs
  return cuMemcpyHtoD_v2(dst, src, n);
}
int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *) {
  if (capturing)
    return kInvalidValue;
  return cuMemcpyDtoH_v2(dst, src, n);
}
int cuMemsetD8Async(uint64_t dst, unsigned char v, size_t n, void *) {
  std::memset(reinterpret_cast<void *>(uintptr_t(dst)), v, n);
  return kSuccess;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *, void **args, void **extra) {
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || shmem != 0 || extra || bx % 32 != 0) {
    lastError = "fake CUDA driver: only 1-D launches of whole warps without shared memory";
    return kInvalidValue;
  }
  std::function<void()> run = bindLaunch(*static_cast<Function *>(f), gx, bx, args);
  if (!run) {
    lastError = "fake CUDA driver: no ABI known for " + static_cast<Function *>(f)->name;
    return kInvalidValue;
  }
  if (capturing)
    recorded.push_back(std::move(run));
  else
    run();
  return kSuccess;
}

int cuEventCreate(void **e, unsigned) {
  *e = new std::chrono::steady_clock::time_point();
  return kSuccess;
}
int cuEventRecord(void *e, void *) {
  if (capturing) { // a node of the graph, as the driver does
    capturedEvents.insert(e);
    return kSuccess;
  }
  capturedEvents.erase(e);
  *static_cast<std::chrono::steady_clock::time_point *>(e) = std::chrono::steady_clock::now();
  return kSuccess;
}
// As the driver: an event last recorded in a capturing stream cannot be waited on.
int cuEventSynchronize(void *e) {
  if (!capturedEvents.count(e))
    return kSuccess;
  lastError = "operation not permitted on an event last recorded in a capturing stream";
  return kCapturedEvent;
}
int cuEventElapsedTime(float *ms, void *a, void *b) {
  using TP = std::chrono::steady_clock::time_point;
  *ms = std::chrono::duration<float, std::milli>(*static_cast<TP *>(b) - *static_cast<TP *>(a))
            .count();
  return kSuccess;
}
int cuEventDestroy_v2(void *e) {
  delete static_cast<std::chrono::steady_clock::time_point *>(e);
  return kSuccess;
}

int cuStreamCreate(void **s, unsigned) {
  static int token;
  *s = &token;
  return kSuccess;
}
int cuStreamDestroy_v2(void *) { return kSuccess; }
int cuStreamSynchronize(void *) { return kSuccess; }

int cuStreamBeginCapture_v2(void *, int) {
  if (capturing)
    return kInvalidValue;
  capturing = true;
  recorded.clear();
  return kSuccess;
}
int cuStreamEndCapture(void *, void **graph) {
  if (!capturing)
    return kInvalidValue;
  capturing = false;
  *graph = new std::vector<std::function<void()>>(std::move(recorded));
  recorded.clear();
  return kSuccess;
}
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long) {
  *exec = new std::vector<std::function<void()>>(
      *static_cast<std::vector<std::function<void()>> *>(graph));
  return kSuccess;
}
int cuGraphLaunch(void *exec, void *) {
  for (const auto &run : *static_cast<std::vector<std::function<void()>> *>(exec))
    run();
  return kSuccess;
}
int cuGraphExecDestroy(void *exec) {
  delete static_cast<std::vector<std::function<void()>> *>(exec);
  return kSuccess;
}
int cuGraphDestroy(void *graph) {
  delete static_cast<std::vector<std::function<void()>> *>(graph);
  return kSuccess;
}

} // extern "C"
