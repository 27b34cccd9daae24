//===- CudaCompiler.cpp - NVRTC, loaded at run time -----------------------===//
#include "codegen/cuda/CudaCompiler.h"
#include "codegen/KernelCache.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <vector>

namespace llmc::codegen {

namespace {

// NVRTC's C API, declared here (its header is not on the build's include
// path, and only these entry points are used). nvrtcResult 0 is success.
using Program = struct _nvrtcProgram *;
struct Nvrtc {
  void *lib = nullptr;
  std::string error;
  const char *(*errorString)(int) = nullptr;
  int (*version)(int *, int *) = nullptr;
  int (*create)(Program *, const char *, const char *, int, const char *const *,
                const char *const *) = nullptr;
  int (*compile)(Program, int, const char *const *) = nullptr;
  int (*logSize)(Program, size_t *) = nullptr;
  int (*log)(Program, char *) = nullptr;
  int (*ptxSize)(Program, size_t *) = nullptr;
  int (*ptx)(Program, char *) = nullptr;
  int (*cubinSize)(Program, size_t *) = nullptr;
  int (*cubin)(Program, char *) = nullptr;
  int (*destroy)(Program *) = nullptr;
};

template <typename F> bool bind(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

const Nvrtc &nvrtc() {
  static Nvrtc n;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char *name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                             "/usr/local/cuda/lib64/libnvrtc.so"})
      if ((n.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!n.lib) {
      n.error = "libnvrtc (CUDA 12 or 13) not found: install the CUDA toolkit's NVRTC";
      return;
    }
    const bool ok = bind(n.lib, "nvrtcGetErrorString", n.errorString) &&
                    bind(n.lib, "nvrtcVersion", n.version) &&
                    bind(n.lib, "nvrtcCreateProgram", n.create) &&
                    bind(n.lib, "nvrtcCompileProgram", n.compile) &&
                    bind(n.lib, "nvrtcGetProgramLogSize", n.logSize) &&
                    bind(n.lib, "nvrtcGetProgramLog", n.log) &&
                    bind(n.lib, "nvrtcGetPTXSize", n.ptxSize) &&
                    bind(n.lib, "nvrtcGetPTX", n.ptx) &&
                    bind(n.lib, "nvrtcGetCUBINSize", n.cubinSize) &&
                    bind(n.lib, "nvrtcGetCUBIN", n.cubin) &&
                    bind(n.lib, "nvrtcDestroyProgram", n.destroy);
    if (!ok) {
      n.error = "libnvrtc lacks an entry point llmc needs (nvrtcGetCUBIN: CUDA 11.1 or newer)";
      dlclose(n.lib);
      n.lib = nullptr;
    }
  });
  return n;
}

void check(const Nvrtc &n, int rc, const char *what) {
  if (rc != 0)
    throw std::runtime_error(std::string("nvrtc: ") + what + ": " + n.errorString(rc));
}

} // namespace

std::optional<std::string> nvrtcVersion(std::string *why) {
  const Nvrtc &n = nvrtc();
  if (!n.lib) {
    if (why)
      *why = n.error;
    return std::nullopt;
  }
  int major = 0, minor = 0;
  n.version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {
// NVRTC's options besides the architecture (part of the kernel cache key).
const char *const kNvrtcOptions[] = {"-std=c++17", "-default-device"};
std::string compileUncached(const std::string &source, const std::string &arch);
} // namespace

std::string compileCuda(const std::string &source, const std::string &arch) {
  const Nvrtc &n = nvrtc();
  if (!n.lib)
    throw std::runtime_error(n.error);
  int major = 0, minor = 0;
  n.version(&major, &minor);
  const std::string key = KernelCache::key(
      {"nvrtc", std::to_string(major) + "." + std::to_string(minor), arch,
       std::string(kNvrtcOptions[0]) + " " + kNvrtcOptions[1], source});
  return KernelCache::process().getOrBuild(key, [&] { return compileUncached(source, arch); });
}

namespace {
std::string compileUncached(const std::string &source, const std::string &arch) {
  const Nvrtc &n = nvrtc(); // loaded: compileCuda checked
  const bool cubin = arch.rfind("sm_", 0) == 0;
  if (!cubin && arch.rfind("compute_", 0) != 0)
    throw std::runtime_error("cuda: architecture '" + arch + "' is neither sm_XX nor compute_XX");
  Program prog = nullptr;
  check(n, n.create(&prog, source.c_str(), "llmc_kernels.cu", 0, nullptr, nullptr),
        "create program");
  struct Destroy {
    const Nvrtc &n;
    Program &p;
    ~Destroy() { n.destroy(&p); }
  } destroy{n, prog};
  const std::string archFlag = "--gpu-architecture=" + arch;
  const char *opts[] = {archFlag.c_str(), kNvrtcOptions[0], kNvrtcOptions[1]};
  const int rc = n.compile(prog, 3, opts);
  if (rc != 0) {
    size_t size = 0;
    n.logSize(prog, &size);
    std::string log(size, '\0');
    if (size)
      n.log(prog, log.data());
    throw std::runtime_error("nvrtc: compiling the kernels for " + arch + " failed: " +
                             n.errorString(rc) + "\n" + log);
  }
  size_t size = 0;
  check(n, cubin ? n.cubinSize(prog, &size) : n.ptxSize(prog, &size), "output size");
  std::string out(size, '\0');
  check(n, cubin ? n.cubin(prog, out.data()) : n.ptx(prog, out.data()), "output");
  if (!cubin && !out.empty() && out.back() == '\0')
    out.pop_back(); // PTX text: drop the terminating NUL
  return out;
}
} // namespace

} // namespace llmc::codegen
