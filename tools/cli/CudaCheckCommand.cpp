//===- CudaCheckCommand.cpp - llmc cuda-check: an artifact's CUDA kernels on the GPU ===//
// Loads the artifact's CUDA image for this GPU (signed by a trusted key,
// bytes matching their signed digests), runs every matvec kernel on seeded
// rows of its format and width (--rows of them) for 1 and 8 tokens (the
// tensor-core ones for 16 and 37, within f16 rounding: 2e-3), and
// compares with the CPU's double-precision product of the same rows
// dequantized; reports the largest relative error, the time per call and
// the bytes streamed per second. Without a usable GPU: a clean message and
// exit 4.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "llmc/dtype.h"
#include "llmc/random_rows.h"
#include "llmc/cuda.h"

#include <cmath>
#include <cstdio>
#include <random>

namespace llmc::tool {

namespace {

constexpr double kMaxRelError = 1e-5; // of sum |w x|: the host emulation test's bound
// The tensor-core kernels round weights and activations to f16 (2^-11 each).
constexpr double kMaxRelErrorF16 = 2e-3;

struct CudaCheckArgs {
  std::string artifact;
  int64_t rows = 8192;
  int reps = 20;
  bool json = false;
  std::vector<std::string> trustedKeys;
};

struct KernelResult {
  std::string symbol;
  int tokens = 0;
  double maxRelError = 0, ms = 0, gbps = 0;
};

/// A matvec kernel entry of the manifest (codegen/cuda/CudaKernelSource.h's
/// ABI and launch shape, as the entry states them).
struct KernelEntry {
  std::string symbol;
  DType dtype = DType::F32;
  int64_t cols = 0;
  int maxTokens = 0, rowsPerBlock = 0;
  bool decode = false; // llmc_cu_mv1_*: one token, (w, stride, x, y, rows, res)
  int tokensPerBlock = 0; // llmc_cu_mm_* (tensor cores): blocks also split the tokens
};

KernelEntry parseEntry(const nlohmann::json &k) {
  KernelEntry e;
  e.symbol = k.value("symbol", "");
  const std::optional<DType> d = dtypeFromName(k.value("dtype", ""));
  e.cols = k.value("cols", int64_t(0));
  e.maxTokens = k.value("max_tokens", 0);
  e.rowsPerBlock = k.value("rows_per_block", 0);
  e.decode = k.value("kind", "") == "matvec_decode";
  const bool mma = k.value("kind", "") == "matvec_mma";
  e.tokensPerBlock = mma ? k.value("tokens_per_block", 0) : 0;
  if (e.symbol.empty() || !d || e.cols <= 0 || e.cols % 32 != 0 || e.maxTokens < 1 ||
      e.maxTokens > (mma ? 4096 : 64) || e.rowsPerBlock < 1 ||
      e.rowsPerBlock > (mma ? 256 : 32) || (mma && (e.tokensPerBlock < 1 ||
                                                     e.tokensPerBlock > 256 ||
                                                     e.rowsPerBlock % 16 != 0)))
    throw std::runtime_error("codegen_cuda: a malformed kernel entry: " + k.dump());
  e.dtype = *d;
  return e;
}

/// One kernel on `rows` seeded rows, for T tokens.
KernelResult checkKernel(cuda::CudaDevice &dev, void *fn, const KernelEntry &e, int64_t rows,
                         int T, int reps) {
  const DType dtype = e.dtype;
  const int64_t cols = e.cols;
  const std::string &symbol = e.symbol;
  const int64_t stride = rowBytes(dtype, cols);
  std::mt19937 rng(uint32_t(cols * 31 + T));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<unsigned char> w(size_t(rows * stride));
  std::vector<float> deq(static_cast<size_t>(rows * cols)),
      x(static_cast<size_t>(T * cols)), y(static_cast<size_t>(T * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t> bytes = randomRow(dtype, cols, rng);
    std::copy(bytes.begin(), bytes.end(), w.begin() + r * stride);
    dequantizeRow(dtype, w.data() + r * stride, deq.data() + r * cols, cols);
  }
  for (float &v : x)
    v = nd(rng);
  cuda::DeviceBuffer dw = dev.alloc(w.size()), dx = dev.alloc(x.size() * 4),
                     dy = dev.alloc(y.size() * 4);
  dev.upload(dw, w.data(), w.size());
  dev.upload(dx, x.data(), x.size() * 4);
  uint64_t pw = dw.ptr(), px = dx.ptr(), py = dy.ptr();
  long long lstride = stride, ldx = cols, ldy = rows, nrows = rows;
  int tokens = T;
  uint64_t noResidual = 0;
  long long ldr = 0;
  void *general[] = {&pw, &lstride, &px, &ldx, &tokens, &py, &ldy, &nrows, &noResidual, &ldr};
  void *decode[] = {&pw, &lstride, &px, &py, &nrows, &noResidual};
  void **args = e.decode ? decode : general;
  unsigned grid = unsigned((rows + e.rowsPerBlock - 1) / e.rowsPerBlock);
  unsigned block = 32u * unsigned(e.rowsPerBlock);
  if (e.tokensPerBlock > 0) { // tensor cores: a warp per 16 rows, blocks over the tokens too
    grid *= unsigned((T + e.tokensPerBlock - 1) / e.tokensPerBlock);
    block = 32u * unsigned(e.rowsPerBlock / 16);
  }
  dev.launch(fn, grid, block, args);
  dev.synchronize();
  dev.download(y.data(), dy, y.size() * 4);
  KernelResult res{symbol, T};
  for (int t = 0; t < T; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(deq[size_t(r * cols + c)]) * x[size_t(t * cols + c)];
        ref += p;
        mag += std::fabs(p);
      }
      res.maxRelError = std::max(res.maxRelError,
                                 std::fabs(y[size_t(t * rows + r)] - ref) / (mag + 1e-30));
    }
  res.ms = dev.timeMs([&] {
             for (int i = 0; i < reps; ++i)
               dev.launch(fn, grid, block, args);
           }) / reps;
  res.gbps = double(w.size() + x.size() * 4 + y.size() * 4) / (res.ms * 1e-3) / 1e9;
  return res;
}

int runCudaCheck(const CudaCheckArgs &a) {
  // Only the manifest and the CUDA sections are read, and those sections
  // are checked against their signed SHA-256 (verifyCudaSections).
  std::unique_ptr<Artifact> art = Artifact::open(a.artifact, /*verify_tensors=*/false);
  const signing::CodeTrust trust = signing::loadCodeTrust(a.trustedKeys, /*requireSigned=*/true);
  cuda::verifyCudaSections(*art, trust); // before any device: refusals are the same everywhere
  std::string why;
  std::unique_ptr<cuda::CudaDevice> dev = cuda::CudaDevice::open(why);
  if (!dev) {
    fprintf(stderr, "llmc cuda-check: no usable CUDA device: %s\n", why.c_str());
    return kNoDevice;
  }
  const cuda::CudaImage img = cuda::trustedCudaImage(*art, trust, dev->ccMajor(), dev->ccMinor());
  void *module = dev->loadModule(img.bytes);
  if (!a.json)
    printf("device: %s (compute capability %d.%d), image %s\n", dev->name().c_str(),
           dev->ccMajor(), dev->ccMinor(), img.arch.c_str());
  bool ok = true;
  for (const nlohmann::json &k : art->manifest()["codegen_cuda"].value("kernels", nlohmann::json::array())) {
    const std::string kind = k.value("kind", "");
    if (kind != "matvec" && kind != "matvec_decode" && kind != "matvec_mma")
      continue;
    const KernelEntry e = parseEntry(k);
    if (e.decode && e.maxTokens != 1)
      throw std::runtime_error("codegen_cuda: a decode kernel entry for more than one token: " +
                               k.dump());
    void *fn = dev->function(module, e.symbol);
    const std::vector<int> tokenCounts = e.decode           ? std::vector<int>{1}
                                         : e.tokensPerBlock ? std::vector<int>{16, 37}
                                                            : std::vector<int>{1, e.maxTokens};
    for (int T : tokenCounts) {
      const KernelResult r = checkKernel(*dev, fn, e, a.rows, T, a.reps);
      const bool pass = r.maxRelError <= (e.tokensPerBlock ? kMaxRelErrorF16 : kMaxRelError);
      ok = ok && pass;
      if (a.json)
        printf("{\"kernel\": \"%s\", \"tokens\": %d, \"rows\": %lld, \"max_rel_error\": %.3g, "
               "\"ms\": %.4f, \"gbps\": %.1f, \"pass\": %s, \"device\": \"%s\", \"image\": \"%s\"}\n",
               r.symbol.c_str(), r.tokens, (long long)a.rows, r.maxRelError, r.ms, r.gbps,
               pass ? "true" : "false", dev->name().c_str(), img.arch.c_str());
      else
        printf("%-28s T=%d  max rel error %.2e  %8.4f ms  %7.1f GB/s  %s\n", r.symbol.c_str(),
               r.tokens, r.maxRelError, r.ms, r.gbps, pass ? "ok" : "OFF");
    }
  }
  return ok ? int(kOk) : int(kError);
}

} // namespace

std::function<int()> addCudaCheckCommand(CLI::App &app) {
  auto a = std::make_shared<CudaCheckArgs>();
  CLI::App *cmd = app.add_subcommand(
      "cuda-check", "Run an artifact's CUDA kernels on this machine's GPU against the CPU: each "
                    "matvec kernel on seeded rows of its format and width, 1 and 8 tokens "
                    "(tensor-core kernels: 16 and 37) (largest relative error, time per call, "
                    "GB/s)");
  cmd->footer("Exit codes: 0 every kernel within tolerance, 1 a kernel off or an error, 2 bad "
              "flags, 4 no usable CUDA device (no driver or no GPU).");
  cmd->add_option("artifact", a->artifact, "artifact compiled with --target cpu,cuda or cuda")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--rows", a->rows, "rows per kernel check (default 8192)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--reps", a->reps, "timed launches per kernel (default 20)")
      ->check(CLI::Range(1, 10000));
  cmd->add_flag("--json", a->json, "one JSON object per kernel and token count");
  cmd->add_option("--trusted-key", a->trustedKeys,
                  "also trust this public key (KEY.pub) for the artifact's kernels");
  return [a] { return runCudaCheck(*a); };
}

} // namespace llmc::tool
