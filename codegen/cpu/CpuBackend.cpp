//===- CpuBackend.cpp - llmk ops -> x86-64 kernel objects -----------------===//
// Walks the lowered model's llmk ops in order: every product's weights (by
// their IR type: format and width) give the matrix-vector and eight-row
// int8 kernels, the other ops their op kernels with the model's constants
// (norm width, activation, RoPE heads/theta/style, head_dim, the embedding
// table's format). The C++ source is built in process once per x86-64 level.
//===----------------------------------------------------------------------===//
#include "codegen/Backend.h"
#include "codegen/cpu/CpuKernelSource.h"
#include "codegen/cpu/CpuOpKernels.h"
#include "codegen/cpu/HostCompiler.h"
#include "compiler/weights/WeightTypes.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "llmc/codegen.h"
#include "llmc/kv_row_type.h"
#include "runtime/src/exec/ThreadPool.h"
#include "runtime/src/kernels/rows8.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <thread>

using namespace mlir;

namespace llmc::codegen {

Backend::~Backend() = default;

namespace {

/// The format and row width of a weight operand, from its IR type.
struct WeightShape {
  DType dtype;
  int64_t cols;
};

FailureOr<WeightShape> weightShape(Operation *op, Value w) {
  auto t = dyn_cast<RankedTensorType>(w.getType());
  std::optional<DType> d = t ? dtypeOfElementType(t.getElementType()) : std::nullopt;
  if (!d || t.getRank() == 0)
    return op->emitOpError("has a weight operand of no stored type"), failure();
  return WeightShape{*d, t.getShape().back()};
}

int64_t activationWidth(Value x) { return cast<RankedTensorType>(x.getType()).getDimSize(1); }

/// What the CPU backend generates for one lowered model.
class CpuKernelSet {
public:
  LogicalResult collect(llm::ModelOp model) {
    for (Operation &op : model.getBodyBlock()) {
      LogicalResult ok =
          llvm::TypeSwitch<Operation *, LogicalResult>(&op)
              .Case([&](llmk::EmbedOp e) { return addEmbed(e); })
              .Case([&](llmk::NormMatmulOp m) {
                if (m.getNorm())
                  addOp(rmsNorm(activationWidth(m.getX())));
                return addProducts(&op, m.getWeights());
              })
              .Case([&](llmk::NormGatedMatmulOp m) {
                addNormAndGate(m.getNorm(), m.getX(), m.getActivation());
                return addProducts(&op, {m.getGate(), m.getUp()});
              })
              .Case([&](llmk::MatmulAddOp m) { return addProducts(&op, {m.getWeight()}); })
              .Case([&](llmk::NormMoeOp m) {
                addNormAndGate(m.getNorm(), m.getX(), m.getActivation());
                // The experts' kernels go by their slabs' format and width.
                return addProducts(&op, {m.getRouter(), m.getGate(), m.getUp(), m.getDown()});
              })
              .Case([&](llmk::RMSNormOp n) {
                addOp(rmsNorm(activationWidth(n.getX())));
                return success();
              })
              .Case([&](llmk::RopeKvAppendOp r) {
                OpKernelSpec s;
                s.kind = OpKernelSpec::Kind::Rope;
                s.heads = r.getNumHeads();
                s.kvHeads = r.getNumKvHeads();
                s.headDim = r.getHeadDim();
                s.theta = r.getRopeTheta().convertToDouble();
                s.interleaved = r.getRopeStyle() == llm::RopeStyle::Interleaved;
                addOp(s);
                return success();
              })
              .Case([&](llmk::AttendOp a) {
                OpKernelSpec s;
                s.kind = OpKernelSpec::Kind::AttendF32;
                s.headDim = a.getHeadDim();
                addOp(s);
                s.kind = OpKernelSpec::Kind::AttendF32Rows; // for paged caches
                addOp(s);
                // GQA: the heads that share a KV head in one pass over its rows.
                const int64_t heads = a.getNumHeads(), kv = a.getNumKvHeads();
                if (kv > 0 && heads % kv == 0 && heads / kv >= 2 && s.headDim % 8 == 0) {
                  s.heads = heads / kv;
                  s.kind = OpKernelSpec::Kind::AttendF32Group;
                  addOp(s);
                  s.kind = OpKernelSpec::Kind::AttendF32RowsGroup;
                  addOp(s);
                  s.kind = OpKernelSpec::Kind::AttendF16RowsGroup; // f16 KV pools
                  addOp(s);
                  if (s.headDim % kKvQ8Group == 0) { // q8_0 KV pools
                    s.kind = OpKernelSpec::Kind::AttendQ8RowsGroup;
                    addOp(s);
                  }
                }
                return success();
              })
              .Case([&](llmk::AddOp) {
                OpKernelSpec s;
                s.kind = OpKernelSpec::Kind::Add;
                addOp(s);
                return success();
              })
              .Case([&](llm::WeightOp) { return success(); })
              .Case([&](llm::ReturnOp) { return success(); })
              .Default([&](Operation *o) {
                return o->emitOpError("is not a kernel op (lower the model first)");
              });
      if (failed(ok))
        return failure();
    }
    return success();
  }

  std::vector<MatvecSpec> products;
  std::vector<OpKernelSpec> ops;
  int productsOnLibrary = 0; // products in formats with no generated kernel
  int opsOnLibrary = 0;      // embedding tables in other formats

private:
  static OpKernelSpec rmsNorm(int64_t cols) {
    OpKernelSpec s;
    s.kind = OpKernelSpec::Kind::RmsNorm;
    s.cols = cols;
    return s;
  }

  /// A gated product's fused RMSNorm (if any) and its activation.
  void addNormAndGate(Value norm, Value x, llm::Activation activation) {
    if (norm)
      addOp(rmsNorm(activationWidth(x)));
    OpKernelSpec s;
    s.kind = OpKernelSpec::Kind::Gate;
    s.activation = llm::stringifyActivation(activation).str();
    addOp(s);
  }

  void addOp(const OpKernelSpec &s) {
    if (seenOps.insert(s.symbol()).second)
      ops.push_back(s);
  }

  LogicalResult addEmbed(llmk::EmbedOp e) {
    auto w = weightShape(e, e.getTable());
    if (failed(w))
      return failure();
    OpKernelSpec s;
    s.kind = OpKernelSpec::Kind::Embed;
    s.dtype = w->dtype;
    s.cols = w->cols;
    if (canGenerateEmbed(s.dtype, s.cols))
      addOp(s);
    else
      ++opsOnLibrary;
    return success();
  }

  LogicalResult addProducts(Operation *op, ValueRange weights) {
    for (Value v : weights) {
      auto w = weightShape(op, v);
      if (failed(w))
        return failure();
      // Grouped integers whose eight-row layout is Q4_0/Q4_1/Q8_0 run that
      // layout's int8 kernel.
      const std::optional<DType> layout = kernels::rows8Layout(w->dtype);
      const DType dtype = layout && w->cols % 32 == 0 ? *layout : w->dtype;
      if (!canGenerate(dtype, w->cols) && !canGenerateRows8(dtype, w->cols)) {
        ++productsOnLibrary;
        continue;
      }
      if (seenProducts.insert({int(dtype), w->cols}).second)
        products.push_back({dtype, w->cols});
    }
    return success();
  }

  std::set<std::string> seenOps;
  std::set<std::pair<int, int64_t>> seenProducts;
};

/// `source` built for every level, as many at once as there are cores.
std::vector<SharedObject> buildObjects(const std::string &source,
                                       const std::vector<IsaLevel> &levels) {
  std::vector<SharedObject> built(levels.size());
  ThreadPool pool(int(std::min<size_t>(levels.size(), size_t(defaultThreadCount()))));
  pool.parallelFor(0, int64_t(levels.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      built[size_t(i)] = compileSharedObject(source, levels[size_t(i)]);
  });
  return built;
}

nlohmann::json kernelEntries(const CpuKernelSet &set) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const MatvecSpec &s : set.products) {
    const std::string dt(dtypeName(s.dtype));
    if (canGenerate(s.dtype, s.cols))
      kernels.push_back({{"symbol", s.symbol()}, {"kind", "matvec"}, {"dtype", dt}, {"cols", s.cols}});
    if (canGenerateRows8(s.dtype, s.cols))
      kernels.push_back(
          {{"symbol", s.rows8Symbol()}, {"kind", "rows8_int8"}, {"dtype", dt}, {"cols", s.cols}});
  }
  for (const OpKernelSpec &o : set.ops)
    kernels.push_back(o.manifestEntry());
  return kernels;
}

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(std::vector<IsaLevel> levels) : levels_(std::move(levels)) {
    if (levels_.empty())
      levels_.assign(std::begin(kAllIsaLevels), std::end(kAllIsaLevels));
  }
  const char *name() const override { return "cpu"; }

  FailureOr<BackendOutput> generate(llm::ModelOp lowered) override {
    CpuKernelSet set;
    if (failed(set.collect(lowered)))
      return failure();
    BackendOutput out;
    if (set.products.empty() && set.ops.empty()) {
      out.summary = "no generated kernels: the plan has no step in a generated format";
      return out;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::string source = kernelSource(set.products, set.ops);
    // One object per x86-64 level asked for (by default all: the artifact
    // then runs at its best on any machine of its architecture with no
    // compiler there).
    const std::vector<IsaLevel> &levels = levels_;
    std::vector<SharedObject> built;
    try {
      built = buildObjects(source, levels);
    } catch (const std::exception &e) {
      out.summary = std::string("no generated kernels: ") + e.what();
      return out;
    }
    nlohmann::json objects = nlohmann::json::object(), flags = nlohmann::json::object();
    for (size_t i = 0; i < levels.size(); ++i) {
      const std::string section = std::string("codegen.") + isaName(levels[i]) + ".so";
      out.sections.push_back({section, std::move(built[i].bytes)});
      objects[isaName(levels[i])] = section;
      flags[isaName(levels[i])] = compileFlags(levels[i]);
    }
    out.sections.push_back({"codegen.kernels.cpp", std::move(source)});
    const nlohmann::json kernels = kernelEntries(set);
    out.manifest = {{"abi", kAbi},          {"source", "codegen.kernels.cpp"},
                    {"objects", objects},   {"kernels", kernels},
                    {"compiler", built.back().compiler}, {"flags", flags}};
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t cached = size_t(std::count_if(built.begin(), built.end(),
                                               [](const SharedObject &o) { return o.cached; }));
    char buf[360];
    snprintf(buf, sizeof buf,
             "generated %zu kernels: %zu (format, width) product pairs (%d products in other "
             "formats use library kernels) and %zu op kernels (%d ops use library kernels), "
             "built for %zu level%s in %.2f s%s",
             kernels.size(), set.products.size(), set.productsOnLibrary, set.ops.size(),
             set.opsOnLibrary, levels.size(), levels.size() == 1 ? "" : "s", seconds,
             cached == 0 ? ""
             : cached == levels.size() ? " (all from the kernel cache)"
                                       : " (some from the kernel cache)");
    out.summary = buf;
    return out;
  }

private:
  std::vector<IsaLevel> levels_;
};

} // namespace

std::unique_ptr<Backend> createCpuBackend(std::vector<IsaLevel> levels) {
  return std::make_unique<CpuBackend>(std::move(levels));
}

} // namespace llmc::codegen
