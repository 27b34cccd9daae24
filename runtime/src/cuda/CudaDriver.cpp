//===- CudaDriver.cpp - libcuda through dlopen ----------------------------===//
#include "llmc/cuda.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace llmc::cuda {

// The driver API's C declarations, as the stable ABI defines them (CUresult
// 0 is success; handles are opaque pointers; CUdevice an int; device
// pointers 64-bit). Versioned entry points are bound by their _v2 names.
struct DriverApi {
  void *lib = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*errorString)(int, const char **) = nullptr;
  int (*deviceCount)(int *) = nullptr;
  int (*deviceGet)(int *, int) = nullptr;
  int (*deviceAttribute)(int *, int, int) = nullptr;
  int (*deviceName)(char *, int, int) = nullptr;
  int (*ctxRetain)(void **, int) = nullptr;
  int (*ctxRelease)(int) = nullptr;
  int (*ctxSetCurrent)(void *) = nullptr;
  int (*ctxSynchronize)() = nullptr;
  int (*moduleLoadData)(void **, const void *) = nullptr;
  int (*moduleUnload)(void *) = nullptr;
  int (*moduleFunction)(void **, void *, const char *) = nullptr;
  int (*memAlloc)(uint64_t *, size_t) = nullptr;
  int (*memFree)(uint64_t) = nullptr;
  int (*memcpyHtoD)(uint64_t, const void *, size_t) = nullptr;
  int (*memcpyDtoH)(void *, uint64_t, size_t) = nullptr;
  int (*launchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                      unsigned, void *, void **, void **) = nullptr;
  int (*eventCreate)(void **, unsigned) = nullptr;
  int (*eventRecord)(void *, void *) = nullptr;
  int (*eventSynchronize)(void *) = nullptr;
  int (*eventElapsed)(float *, void *, void *) = nullptr;
  int (*eventDestroy)(void *) = nullptr;
  int (*streamCreate)(void **, unsigned) = nullptr;
  int (*streamDestroy)(void *) = nullptr;
  int (*streamSynchronize)(void *) = nullptr;
  int (*memcpyHtoDAsync)(uint64_t, const void *, size_t, void *) = nullptr;
  int (*memcpyDtoHAsync)(void *, uint64_t, size_t, void *) = nullptr;
  int (*memsetD8Async)(uint64_t, unsigned char, size_t, void *) = nullptr;
  int (*beginCapture)(void *, int) = nullptr;
  int (*endCapture)(void *, void **) = nullptr;
  int (*graphInstantiate)(void **, void *, unsigned long long) = nullptr;
  int (*graphLaunch)(void *, void *) = nullptr;
  int (*graphExecDestroy)(void *) = nullptr;
  int (*graphDestroy)(void *) = nullptr;

  void check(int rc, const char *what) const {
    if (rc == 0)
      return;
    const char *s = nullptr;
    if (errorString)
      errorString(rc, &s);
    throw std::runtime_error(std::string("cuda: ") + what + " failed: " +
                             (s ? s : "error " + std::to_string(rc)));
  }
};

namespace {

constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
constexpr unsigned kStreamNonBlocking = 1;          // CU_STREAM_NON_BLOCKING
constexpr int kCaptureModeRelaxed = 2;              // CU_STREAM_CAPTURE_MODE_RELAXED

template <typename F> bool bind(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

/// The bound API, or nullptr with `why` (once per process).
const DriverApi *driver(std::string &why) {
  static DriverApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    // LLMC_CUDA_DRIVER: another driver library (the tests' host-emulating
    // stand-in, test/fakecuda); whoever sets the environment could preload
    // any library anyway.
    // PTX the driver JIT-compiles (a GPU without a matching cubin) is
    // cached in llmc's own directory unless the user chose one.
    if (!std::getenv("CUDA_CACHE_PATH")) {
      const char *xdg = std::getenv("XDG_CACHE_HOME"), *home = std::getenv("HOME");
      if ((xdg && *xdg) || (home && *home)) {
        const std::string base = xdg && *xdg ? xdg : std::string(home) + "/.cache";
        const std::string dir = base + "/llmc/cuda-jit";
        ::mkdir(base.c_str(), 0700);
        ::mkdir((base + "/llmc").c_str(), 0700);
        if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST)
          ::setenv("CUDA_CACHE_PATH", dir.c_str(), 0);
      }
    }
    const char *path = std::getenv("LLMC_CUDA_DRIVER");
    const std::string lib = path && *path ? path : "libcuda.so.1";
    api.lib = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!api.lib) {
      error = "no CUDA driver (" + lib + " not found)";
      return;
    }
    void *l = api.lib;
    const bool ok =
        bind(l, "cuInit", api.init) && bind(l, "cuGetErrorString", api.errorString) &&
        bind(l, "cuDeviceGetCount", api.deviceCount) && bind(l, "cuDeviceGet", api.deviceGet) &&
        bind(l, "cuDeviceGetAttribute", api.deviceAttribute) &&
        bind(l, "cuDeviceGetName", api.deviceName) &&
        bind(l, "cuDevicePrimaryCtxRetain", api.ctxRetain) &&
        bind(l, "cuDevicePrimaryCtxRelease_v2", api.ctxRelease) &&
        bind(l, "cuCtxSetCurrent", api.ctxSetCurrent) &&
        bind(l, "cuCtxSynchronize", api.ctxSynchronize) &&
        bind(l, "cuModuleLoadData", api.moduleLoadData) &&
        bind(l, "cuModuleUnload", api.moduleUnload) &&
        bind(l, "cuModuleGetFunction", api.moduleFunction) &&
        bind(l, "cuMemAlloc_v2", api.memAlloc) && bind(l, "cuMemFree_v2", api.memFree) &&
        bind(l, "cuMemcpyHtoD_v2", api.memcpyHtoD) &&
        bind(l, "cuMemcpyDtoH_v2", api.memcpyDtoH) &&
        bind(l, "cuLaunchKernel", api.launchKernel) &&
        bind(l, "cuEventCreate", api.eventCreate) && bind(l, "cuEventRecord", api.eventRecord) &&
        bind(l, "cuEventSynchronize", api.eventSynchronize) &&
        bind(l, "cuEventElapsedTime", api.eventElapsed) &&
        bind(l, "cuEventDestroy_v2", api.eventDestroy) &&
        bind(l, "cuStreamCreate", api.streamCreate) &&
        bind(l, "cuStreamDestroy_v2", api.streamDestroy) &&
        bind(l, "cuStreamSynchronize", api.streamSynchronize) &&
        bind(l, "cuMemcpyHtoDAsync_v2", api.memcpyHtoDAsync) &&
        bind(l, "cuMemcpyDtoHAsync_v2", api.memcpyDtoHAsync) &&
        bind(l, "cuMemsetD8Async", api.memsetD8Async) &&
        bind(l, "cuStreamBeginCapture_v2", api.beginCapture) &&
        bind(l, "cuStreamEndCapture", api.endCapture) &&
        bind(l, "cuGraphInstantiateWithFlags", api.graphInstantiate) &&
        bind(l, "cuGraphLaunch", api.graphLaunch) &&
        bind(l, "cuGraphExecDestroy", api.graphExecDestroy) &&
        bind(l, "cuGraphDestroy", api.graphDestroy);
    if (!ok)
      error = "the CUDA driver lacks an entry point llmc needs (driver too old)";
    else if (int rc = api.init(0); rc != 0)
      error = "cuInit failed (error " + std::to_string(rc) + "): no usable GPU or driver";
    if (!error.empty()) {
      dlclose(api.lib);
      api.lib = nullptr;
    }
  });
  why = error;
  return api.lib ? &api : nullptr;
}

} // namespace

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (api_ && ptr_)
      api_->memFree(ptr_);
    api_ = o.api_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (api_ && ptr_)
    api_->memFree(ptr_);
}

std::unique_ptr<CudaDevice> CudaDevice::open(std::string &why) {
  const DriverApi *api = driver(why);
  if (!api)
    return nullptr;
  int count = 0;
  if (api->deviceCount(&count) != 0 || count < 1) {
    why = "no CUDA device";
    return nullptr;
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->api_ = api;
  try {
    api->check(api->deviceGet(&d->device_, 0), "cuDeviceGet");
    api->check(api->deviceAttribute(&d->major_, kAttrCcMajor, d->device_), "cuDeviceGetAttribute");
    api->check(api->deviceAttribute(&d->minor_, kAttrCcMinor, d->device_), "cuDeviceGetAttribute");
    char name[256] = {};
    api->check(api->deviceName(name, int(sizeof name) - 1, d->device_), "cuDeviceGetName");
    d->name_ = name;
    api->check(api->ctxRetain(&d->ctx_, d->device_), "cuDevicePrimaryCtxRetain");
    api->check(api->ctxSetCurrent(d->ctx_), "cuCtxSetCurrent");
    api->check(api->streamCreate(&d->stream_, kStreamNonBlocking), "cuStreamCreate");
  } catch (const std::exception &e) {
    why = e.what();
    return nullptr;
  }
  return d;
}

CudaDevice::~CudaDevice() {
  if (stream_) {
    api_->streamSynchronize(stream_);
    api_->streamDestroy(stream_);
  }
  for (void *m : modules_)
    api_->moduleUnload(m);
  if (ctx_)
    api_->ctxRelease(device_);
}

DeviceBuffer CudaDevice::alloc(size_t bytes) const {
  uint64_t p = 0;
  api_->check(api_->memAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  return DeviceBuffer(api_, p, bytes);
}

void CudaDevice::upload(const DeviceBuffer &dst, const void *src, size_t bytes) const {
  if (bytes > dst.bytes())
    throw std::runtime_error("cuda: upload of " + std::to_string(bytes) + " bytes into " +
                             std::to_string(dst.bytes()));
  api_->check(api_->streamSynchronize(stream_), "cuStreamSynchronize"); // in stream order
  api_->check(api_->memcpyHtoD(dst.ptr(), src, bytes), "cuMemcpyHtoD");
}

void CudaDevice::download(void *dst, const DeviceBuffer &src, size_t bytes) const {
  if (bytes > src.bytes())
    throw std::runtime_error("cuda: download of " + std::to_string(bytes) + " bytes from " +
                             std::to_string(src.bytes()));
  api_->check(api_->streamSynchronize(stream_), "cuStreamSynchronize"); // in stream order
  api_->check(api_->memcpyDtoH(dst, src.ptr(), bytes), "cuMemcpyDtoH");
}

void *CudaDevice::loadModule(const std::string &image) {
  void *m = nullptr;
  const std::string img = image + '\0'; // PTX must be NUL-terminated; harmless for ELF
  api_->check(api_->moduleLoadData(&m, img.data()), "cuModuleLoadData");
  modules_.push_back(m);
  return m;
}

void *CudaDevice::function(void *module, const std::string &name) const {
  void *f = nullptr;
  api_->check(api_->moduleFunction(&f, module, name.c_str()), ("cuModuleGetFunction " + name).c_str());
  return f;
}

void CudaDevice::launch(void *f, unsigned grid, unsigned block, void **args) const {
  api_->check(api_->launchKernel(f, grid, 1, 1, block, 1, 1, 0, stream_, args, nullptr),
              "cuLaunchKernel");
}

void CudaDevice::synchronize() const {
  api_->check(api_->streamSynchronize(stream_), "cuStreamSynchronize");
  api_->check(api_->ctxSynchronize(), "cuCtxSynchronize");
}

void CudaDevice::uploadAsync(const DeviceBuffer &dst, size_t offset, const void *src,
                             size_t bytes) const {
  if (offset > dst.bytes() || bytes > dst.bytes() - offset)
    throw std::runtime_error("cuda: upload past the end of a device buffer");
  api_->check(api_->memcpyHtoDAsync(dst.ptr() + offset, src, bytes, stream_), "cuMemcpyHtoDAsync");
}

void CudaDevice::downloadAsync(void *dst, const DeviceBuffer &src, size_t offset,
                               size_t bytes) const {
  if (offset > src.bytes() || bytes > src.bytes() - offset)
    throw std::runtime_error("cuda: download past the end of a device buffer");
  api_->check(api_->memcpyDtoHAsync(dst, src.ptr() + offset, bytes, stream_), "cuMemcpyDtoHAsync");
}

void CudaDevice::zero(const DeviceBuffer &dst) const {
  api_->check(api_->memsetD8Async(dst.ptr(), 0, dst.bytes(), stream_), "cuMemsetD8Async");
}

CudaGraph::~CudaGraph() {
  if (api_ && exec_)
    api_->graphExecDestroy(exec_);
}

CudaGraph &CudaGraph::operator=(CudaGraph &&o) noexcept {
  if (this != &o) {
    if (api_ && exec_)
      api_->graphExecDestroy(exec_);
    api_ = o.api_;
    exec_ = o.exec_;
    o.exec_ = nullptr;
  }
  return *this;
}

CudaGraph CudaDevice::capture(const std::function<void()> &launches) const {
  api_->check(api_->beginCapture(stream_, kCaptureModeRelaxed), "cuStreamBeginCapture");
  void *graph = nullptr;
  try {
    launches();
  } catch (...) {
    api_->endCapture(stream_, &graph);
    if (graph)
      api_->graphDestroy(graph);
    throw;
  }
  api_->check(api_->endCapture(stream_, &graph), "cuStreamEndCapture");
  void *exec = nullptr;
  const int rc = api_->graphInstantiate(&exec, graph, 0);
  api_->graphDestroy(graph);
  api_->check(rc, "cuGraphInstantiate");
  CudaGraph g;
  g.api_ = api_;
  g.exec_ = exec;
  return g;
}

void CudaDevice::replay(const CudaGraph &g) const {
  api_->check(api_->graphLaunch(g.exec_, stream_), "cuGraphLaunch");
}

float CudaDevice::timeMs(const std::function<void()> &run) const {
  void *a = nullptr, *b = nullptr;
  api_->check(api_->eventCreate(&a, 0), "cuEventCreate");
  api_->check(api_->eventCreate(&b, 0), "cuEventCreate");
  float ms = 0;
  try {
    synchronize();
    api_->check(api_->eventRecord(a, stream_), "cuEventRecord");
    run();
    api_->check(api_->eventRecord(b, stream_), "cuEventRecord");
    api_->check(api_->eventSynchronize(b), "cuEventSynchronize");
    api_->check(api_->eventElapsed(&ms, a, b), "cuEventElapsedTime");
  } catch (...) {
    api_->eventDestroy(a);
    api_->eventDestroy(b);
    throw;
  }
  api_->eventDestroy(a);
  api_->eventDestroy(b);
  return ms;
}

std::vector<float> CudaDevice::timeEach(size_t n, const std::function<void(size_t)> &run) const {
  std::vector<void *> ev(n + 1, nullptr);
  std::vector<float> ms(n, 0.0f);
  auto release = [&] {
    for (void *e : ev)
      if (e)
        api_->eventDestroy(e);
  };
  try {
    for (void *&e : ev)
      api_->check(api_->eventCreate(&e, 0), "cuEventCreate");
    api_->check(api_->eventRecord(ev[0], stream_), "cuEventRecord");
    for (size_t i = 0; i < n; ++i) {
      run(i);
      api_->check(api_->eventRecord(ev[i + 1], stream_), "cuEventRecord");
    }
    api_->check(api_->eventSynchronize(ev[n]), "cuEventSynchronize");
    for (size_t i = 0; i < n; ++i)
      api_->check(api_->eventElapsed(&ms[i], ev[i], ev[i + 1]), "cuEventElapsedTime");
  } catch (...) {
    release();
    throw;
  }
  release();
  return ms;
}

std::string pickCudaImage(const std::vector<std::string> &cubinArchs,
                          const std::vector<std::string> &ptxArchs, int major, int minor,
                          std::string &why) {
  // A cubin runs on its own major version at an equal or higher minor: the
  // highest such; else PTX of a capability at or below the device's.
  std::string best;
  int bestCc = -1;
  for (const std::string &a : cubinArchs) {
    if (a.rfind("sm_", 0) != 0 || a.size() < 5)
      continue;
    const int cc = std::atoi(a.c_str() + 3);
    if (cc / 10 == major && cc % 10 <= minor && cc > bestCc) {
      best = a;
      bestCc = cc;
    }
  }
  if (!best.empty())
    return best;
  for (const std::string &a : ptxArchs) {
    if (a.rfind("compute_", 0) != 0 || a.size() < 10)
      continue;
    const int cc = std::atoi(a.c_str() + 8);
    if (cc <= major * 10 + minor && cc > bestCc) {
      best = a;
      bestCc = cc;
    }
  }
  if (best.empty())
    why = "no CUDA image for compute capability " + std::to_string(major) + "." +
          std::to_string(minor) + " in the artifact (a GPU of compute capability 8.0 or newer "
          "runs its sm_80/sm_90 cubin or compute_80 PTX)";
  return best;
}

} // namespace llmc::cuda
