//===- CudaBackend.cpp - llmk ops -> CUDA kernels (cubin and PTX) ---------===//
// The CUDA backend behind the same interface as the CPU one (Backend.h):
// every product's weights, by their IR type (format and width), give a
// matrix-vector kernel (CudaKernelSource.h) when the format has one. The
// source is compiled by NVRTC into cubin for sm_80 and sm_90 and PTX for
// compute_80 (which the driver JIT-compiles on other architectures); all
// four are artifact sections, listed under the manifest's "codegen_cuda".
// The runtime that loads them (driver API, CUDA Graphs) comes next: until
// then an artifact with CUDA kernels runs on the CPU as before.
//===----------------------------------------------------------------------===//
#include "codegen/Backend.h"
#include "codegen/cuda/CudaCompiler.h"
#include "codegen/cuda/CudaKernelSource.h"
#include "compiler/weights/WeightTypes.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "llmc/cuda.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>

using namespace mlir;

namespace llmc::codegen {

namespace {

struct CollectedKernels {
  std::vector<CudaMatvecSpec> products, embeddings;
  std::vector<CudaOpSpec> ops;
  std::vector<CudaAttentionSpec> attention;
  int onCpu = 0; // products, tables and attention shapes without a CUDA kernel
};

/// The (format, width) of every product weight of the lowered model, the
/// embedding tables, the attention shapes, and the op kernels (norms,
/// gates, adds) its ops need.
LogicalResult collectKernels(llm::ModelOp model, CollectedKernels &out) {
  std::vector<CudaMatvecSpec> &specs = out.products;
  std::vector<CudaOpSpec> &ops = out.ops;
  int &onCpu = out.onCpu;
  std::set<std::pair<int, int64_t>> seen;
  std::set<std::string> seenOps;
  std::set<std::tuple<int64_t, int64_t, int64_t>> polyKvShapes; // heads, KV heads, head size
  auto addOp = [&](const CudaOpSpec &o) {
    if (seenOps.insert(o.symbol()).second)
      ops.push_back(o);
  };
  auto norm = [&](Value x) {
    CudaOpSpec o;
    o.kind = CudaOpSpec::Kind::RmsNorm;
    o.cols = cast<RankedTensorType>(x.getType()).getDimSize(1);
    addOp(o);
  };
  auto gate = [&](llm::Activation a) {
    CudaOpSpec g;
    g.kind = CudaOpSpec::Kind::Gate;
    g.activation = a == llm::Activation::GELU ? Activation::GELU : Activation::SiLU;
    addOp(g);
  };
  auto add = [&](Operation *op, ValueRange weights) -> LogicalResult {
    for (Value v : weights) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      std::optional<DType> d = t ? dtypeOfElementType(t.getElementType()) : std::nullopt;
      if (!d || t.getRank() == 0)
        return op->emitOpError("has a weight operand of no stored type");
      const int64_t cols = t.getShape().back();
      if (!canGenerateCuda(*d, cols))
        ++onCpu;
      else if (seen.insert({int(*d), cols}).second)
        specs.push_back({*d, cols});
    }
    return success();
  };
  for (Operation &op : model.getBodyBlock()) {
    LogicalResult ok =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](llmk::NormMatmulOp m) {
              if (m.getNorm())
                norm(m.getX());
              return add(&op, m.getWeights());
            })
            .Case([&](llmk::NormGatedMatmulOp m) {
              if (m.getNorm())
                norm(m.getX());
              gate(m.getActivation());
              return add(&op, {m.getGate(), m.getUp()});
            })
            .Case([&](llmk::NormMoeOp m) {
              // Routed on the host: the router's product, then each chosen
              // expert's over the rows gathered for it.
              if (m.getNorm())
                norm(m.getX());
              gate(m.getActivation());
              CudaOpSpec rows;
              rows.kind = CudaOpSpec::Kind::MoeRows;
              addOp(rows);
              return add(&op, {m.getRouter(), m.getGate(), m.getUp(), m.getDown()});
            })
            .Case([&](llmk::MatmulAddOp m) {
              addOp(CudaOpSpec{}); // the residual add after the product
              return add(&op, {m.getWeight()});
            })
            .Case([&](llmk::RMSNormOp n) {
              norm(n.getX());
              return success();
            })
            .Case([&](llmk::AddOp) {
              addOp(CudaOpSpec{});
              return success();
            })
            .Case([&](llmk::EmbedOp e) -> LogicalResult {
              auto t = cast<RankedTensorType>(e.getTable().getType());
              std::optional<DType> d = dtypeOfElementType(t.getElementType());
              if (!d || t.getRank() != 2)
                return op.emitOpError("has an embedding table of no stored type");
              CudaMatvecSpec s{*d, t.getShape().back()};
              if (!canGenerateCuda(s.dtype, s.cols))
                ++onCpu;
              else if (std::none_of(out.embeddings.begin(), out.embeddings.end(),
                                    [&](const CudaMatvecSpec &o) {
                                      return o.embedSymbol() == s.embedSymbol();
                                    }))
                out.embeddings.push_back(s);
              return success();
            })
            .Case([&](llmk::RopeKvAppendOp r) {
              CudaAttentionSpec a;
              a.heads = int64_t(r.getNumHeads());
              a.kvHeads = int64_t(r.getNumKvHeads());
              a.headDim = int64_t(r.getHeadDim());
              a.theta = r.getRopeTheta().convertToDouble();
              a.style = r.getRopeStyle() == llm::RopeStyle::Interleaved ? RopeStyle::Interleaved
                                                                        : RopeStyle::Half;
              if (!canGenerateCudaAttention(a))
                ++onCpu;
              else if (std::none_of(out.attention.begin(), out.attention.end(),
                                    [&](const CudaAttentionSpec &o) {
                                      return o.ropeSymbol() == a.ropeSymbol();
                                    }))
                out.attention.push_back(a);
              return success();
            })
            .Case([&](llmk::AttendOp a) {
              // PolyKV entries need their own kernels for this shape.
              std::optional<DictionaryAttr> policy = a.getKvPolicy();
              auto quant = policy ? policy->getAs<StringAttr>("kv_quant") : StringAttr();
              if (quant && quant.getValue().str() == spelling(KvQuant::PolyKV))
                polyKvShapes.insert({int64_t(a.getNumHeads()), int64_t(a.getNumKvHeads()),
                                     int64_t(a.getHeadDim())});
              return success();
            })
            .Default([](Operation *) { return success(); });
    if (failed(ok))
      return failure();
  }
  for (CudaAttentionSpec &a : out.attention)
    if (polyKvShapes.count({a.heads, a.kvHeads, a.headDim})) {
      a.polyKv = canGenerateCudaPolyKv(a);
      out.onCpu += !a.polyKv;
    }
  return success();
}

class CudaBackend final : public Backend {
public:
  const char *name() const override { return "cuda"; }

  FailureOr<BackendOutput> generate(llm::ModelOp lowered) override {
    CollectedKernels k;
    if (failed(collectKernels(lowered, k)))
      return failure();
    const std::vector<CudaMatvecSpec> &specs = k.products;
    const std::vector<CudaOpSpec> &ops = k.ops;
    const int onCpu = k.onCpu;
    BackendOutput out;
    if (specs.empty()) {
      out.summary = "no CUDA kernels: no product weight is in a format with a CUDA kernel";
      return out;
    }
    std::string why;
    const std::optional<std::string> version = nvrtcVersion(&why);
    if (!version) {
      out.summary = "no CUDA kernels: " + why;
      return out;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string source = cudaKernelSource(specs, ops, k.embeddings, k.attention);
    nlohmann::json binaries = nlohmann::json::object(), ptx = nlohmann::json::object();
    try {
      for (const char *arch : {"sm_80", "sm_90", "compute_80"}) {
        const bool isPtx = std::string(arch).rfind("compute_", 0) == 0;
        const std::string section =
            std::string("codegen.cuda.") + arch + (isPtx ? ".ptx" : ".cubin");
        out.sections.push_back({section, compileCuda(source, arch)});
        (isPtx ? ptx : binaries)[arch] = section;
      }
    } catch (const std::exception &e) {
      out.sections.clear();
      out.summary = std::string("no CUDA kernels: ") + e.what();
      return out;
    }
    out.sections.push_back({"codegen.cuda.kernels.cu", std::move(source)});
    nlohmann::json kernels = nlohmann::json::array();
    for (const CudaMatvecSpec &s : specs)
      kernels.push_back({{"symbol", s.symbol()},
                         {"kind", "matvec"},
                         {"dtype", std::string(dtypeName(s.dtype))},
                         {"cols", s.cols},
                         {"max_tokens", kCudaMaxTokens},
                         {"rows_per_block", kCudaRowsPerBlock}});
    for (const CudaMatvecSpec &s : specs)
      kernels.push_back({{"symbol", s.decodeSymbol()},
                         {"kind", "matvec_decode"},
                         {"dtype", std::string(dtypeName(s.dtype))},
                         {"cols", s.cols},
                         {"max_tokens", 1},
                         {"rows_per_block", kCudaDecodeRowsPerBlock}});
    for (const CudaMatvecSpec &s : specs)
      if (canGenerateCudaMma(s.dtype, s.cols))
        kernels.push_back({{"symbol", s.mmaSymbol()},
                           {"kind", "matvec_mma"},
                           {"dtype", std::string(dtypeName(s.dtype))},
                           {"cols", s.cols},
                           {"max_tokens", 256}, // any T; the runtime's prompt chunk
                           {"rows_per_block", 16 * kCudaMmaWarps},
                           {"tokens_per_block", kCudaMmaTokens}});
    for (const CudaOpSpec &o : ops) {
      nlohmann::json e = {{"symbol", o.symbol()}};
      if (o.kind == CudaOpSpec::Kind::RmsNorm)
        e.update({{"kind", "rms_norm"}, {"cols", o.cols}});
      else if (o.kind == CudaOpSpec::Kind::Gate)
        e.update({{"kind", "gate"}, {"activation", std::string(spelling(o.activation))}});
      else if (o.kind == CudaOpSpec::Kind::MoeRows)
        e.update({{"kind", "moe_rows"},
                  {"symbols", {"llmc_cu_moe_gather", "llmc_cu_moe_scatter_add",
                               "llmc_cu_moe_fill"}}});
      else
        e["kind"] = "add";
      kernels.push_back(e);
    }
    for (const CudaMatvecSpec &s : k.embeddings)
      kernels.push_back({{"symbol", s.embedSymbol()},
                         {"kind", "embed"},
                         {"dtype", std::string(dtypeName(s.dtype))},
                         {"cols", s.cols}});
    for (const CudaAttentionSpec &a : k.attention) {
      const nlohmann::json shape = {{"heads", a.heads},
                                    {"kv_heads", a.kvHeads},
                                    {"head_dim", a.headDim},
                                    {"rope_theta", a.theta},
                                    {"rope_style", std::string(spelling(a.style))},
                                    {"kv_block", kCudaKvBlock},
                                    {"kv_type", "f16"}};
      nlohmann::json rope = shape, attend = shape, combine = shape;
      rope.update({{"symbol", a.ropeSymbol()}, {"kind", "rope_kv_append"}});
      attend.update({{"symbol", a.attendSymbol()}, {"kind", "attend_split"}});
      combine.update({{"symbol", a.combineSymbol()}, {"kind", "attend_combine"}});
      kernels.push_back(rope);
      kernels.push_back(attend);
      kernels.push_back(combine);
      if (!a.polyKv)
        continue;
      rope.update({{"symbol", a.polyKvRopeSymbol()}, {"kv_type", "polykv"}});
      attend.update({{"symbol", a.polyKvAttendSymbol()}, {"kv_type", "polykv"}});
      combine.update({{"symbol", a.polyKvCombineSymbol()}, {"kv_type", "polykv"}});
      kernels.push_back(rope);
      kernels.push_back(attend);
      kernels.push_back(combine);
    }
    out.manifest = {{"abi", cuda::kCudaKernelAbi},           {"source", "codegen.cuda.kernels.cu"},
                    {"cubin", binaries},  {"ptx", ptx},
                    {"kernels", kernels}, {"compiler", "nvrtc " + *version}};
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[256];
    snprintf(buf, sizeof buf,
             "generated %zu CUDA kernels (%zu products, %zu ops, %zu embeddings, %zu attention "
             "shapes; %d weights or shapes have none) with NVRTC %s: cubin for sm_80 and sm_90, "
             "PTX for compute_80, in %.2f s",
             kernels.size(),
             specs.size(), ops.size(), k.embeddings.size(), k.attention.size(), onCpu,
             version->c_str(), seconds);
    out.summary = buf;
    return out;
  }
};

} // namespace

std::unique_ptr<Backend> createCudaBackend() { return std::make_unique<CudaBackend>(); }

} // namespace llmc::codegen
