//===- llmc/cuda.h - GPUs through the CUDA driver API -----------*- C++ -*-===//
// libcuda is dlopen'ed (never linked; LLMC_CUDA_DRIVER names another
// library, e.g. the tests' host emulation), so the runtime starts on machines
// without a driver or GPU; CudaDevice::open() then says why there is none
// and every GPU path reports it cleanly. PTX the driver JIT-compiles is
// cached in $XDG_CACHE_HOME/llmc/cuda-jit (~/.cache/...) unless
// CUDA_CACHE_PATH says otherwise. Only what the runtime uses is
// bound; calls throw std::runtime_error naming the call and the driver's
// error string.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/signing.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llmc::cuda {

/// The generated kernels' calling conventions (codegen/cuda/CudaKernelSource.h,
/// CudaAttentionSource.h) that this runtime launches; an artifact records
/// the ABI its kernels were generated for (codegen_cuda.abi) and one of
/// another ABI is refused, never launched with the wrong arguments.
/// 2: matvec takes a residual (res, ldr); attention splits stretch to cover
/// the position (len = max(splitLen, ceil((pos + 1) / nSplits))).
/// 3: RoPE + KV append takes each row's cache slot beside its position (KV
/// policies evict entries, so the slot falls behind the position), and
/// attention a per-(sequence, KV head) hole of slots to skip.
constexpr int kCudaKernelAbi = 3;

struct DriverApi; // the bound entry points (CudaDriver.cpp)

/// Device memory of `bytes` bytes, freed on destruction.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DriverApi *api, uint64_t ptr, size_t bytes) : api_(api), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();
  uint64_t ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

private:
  const DriverApi *api_ = nullptr;
  uint64_t ptr_ = 0;
  size_t bytes_ = 0;
};

/// An instantiated CUDA Graph (a captured sequence of launches and copies),
/// destroyed with this object.
class CudaGraph {
public:
  CudaGraph() = default;
  CudaGraph(CudaGraph &&o) noexcept { *this = std::move(o); }
  CudaGraph &operator=(CudaGraph &&o) noexcept;
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;
  ~CudaGraph();
  explicit operator bool() const { return exec_ != nullptr; }

private:
  friend class CudaDevice;
  const DriverApi *api_ = nullptr;
  void *exec_ = nullptr;
};

/// One GPU (device 0) with its primary context current on the calling
/// thread, and one stream that every launch, copy and graph of it uses (in
/// order).
class CudaDevice {
public:
  /// The device, or nullptr with `why` saying why none can be used (no
  /// libcuda, no device, an error from the driver).
  static std::unique_ptr<CudaDevice> open(std::string &why);
  ~CudaDevice();

  const std::string &name() const { return name_; }
  int ccMajor() const { return major_; }
  int ccMinor() const { return minor_; }

  DeviceBuffer alloc(size_t bytes) const;
  void upload(const DeviceBuffer &dst, const void *src, size_t bytes) const;
  void download(void *dst, const DeviceBuffer &src, size_t bytes) const;
  /// A module from a cubin or PTX image (NUL-terminated text for PTX: the
  /// driver JIT-compiles it); its functions stay valid while the device lives.
  void *loadModule(const std::string &image);
  void *function(void *module, const std::string &name) const;
  /// Launches f on a 1-D grid; args are pointers to each argument's value.
  void launch(void *f, unsigned grid, unsigned block, void **args) const;
  /// Waits for everything queued on the stream.
  void synchronize() const;
  /// Copies queued on the stream (the host memory must stay valid until a
  /// synchronize); bounds-checked against the buffer.
  void uploadAsync(const DeviceBuffer &dst, size_t offset, const void *src, size_t bytes) const;
  void downloadAsync(void *dst, const DeviceBuffer &src, size_t offset, size_t bytes) const;
  void zero(const DeviceBuffer &dst) const;
  /// Records what `launches` queues on the stream (nothing runs) into a
  /// graph; replay() then queues all of it with one call. Arguments are
  /// captured by value: what changes between replays must live in device
  /// memory the kernels read.
  CudaGraph capture(const std::function<void()> &launches) const;
  void replay(const CudaGraph &g) const;
  /// Milliseconds `run` takes on the GPU (events around it, after a sync).
  float timeMs(const std::function<void()> &run) const;
  /// GPU milliseconds of each of n consecutive pieces of stream work:
  /// run(i) issues piece i between two recorded events; one synchronize at
  /// the end (LLMC_CUDA_PROFILE's per-step times).
  std::vector<float> timeEach(size_t n, const std::function<void(size_t)> &run) const;

private:
  CudaDevice() = default;
  const DriverApi *api_ = nullptr;
  int device_ = 0;
  void *ctx_ = nullptr;
  void *stream_ = nullptr;
  std::vector<void *> modules_;
  std::string name_;
  int major_ = 0, minor_ = 0;
};

/// The image of an artifact's "codegen_cuda" entry to load on a device of
/// compute capability major.minor: the sm_90 cubin on 9.x, the sm_80 cubin
/// on 8.x, otherwise the PTX (JIT-compiled by the driver; 8.0 or newer).
/// Returns the chosen architecture ("sm_90", "compute_80", ...), or "" with
/// `why` when none fits.
std::string pickCudaImage(const std::vector<std::string> &cubinArchs,
                          const std::vector<std::string> &ptxArchs, int major, int minor,
                          std::string &why);

/// An artifact's CUDA image (cubin or PTX) for a device, handed out only
/// when the artifact is signed by a trusted key and the section's bytes
/// match their signed SHA-256: GPU code from a file is native code too.
struct CudaImage {
  std::string arch;  // "sm_90", "compute_80", ...
  std::string bytes; // cubin (ELF) or PTX text
};

/// Checks that the artifact's CUDA kernels may run here: it has some, it is
/// signed by a trusted key (or was compiled in this process) and every CUDA
/// section matches its signed SHA-256. std::runtime_error saying which not.
void verifyCudaSections(const Artifact &art, const signing::CodeTrust &trust);

/// The image for compute capability major.minor (pickCudaImage), checked.
/// std::runtime_error when the artifact has no CUDA kernels, none fits the
/// device, the signature is not trusted, or the bytes were changed.
CudaImage trustedCudaImage(const Artifact &art, const signing::CodeTrust &trust, int major,
                           int minor);

} // namespace llmc::cuda
