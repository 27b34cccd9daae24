//===- SourceImporter.cpp - SourceModel -> llm IR ---------------*- C++ -*-===//
// The one importer every reader feeds: it knows the canonical tensor names
// (SourceModel.h) and the llm dialect, and nothing about file formats.
// Weights become `llm.weight` ops whose `value` blobs reference the source
// file's mapping (no weight byte is copied; the blobs keep the mapping
// alive); the tokenizer and provenance become attributes of `llm.model`.
//===----------------------------------------------------------------------===//
#include "compiler/import/SourceImporter.h"
#include "compiler/weights/IrAttributes.h"
#include "compiler/weights/WeightTypes.h"
#include <sys/stat.h>
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/artifact.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace llmc {

namespace {

class Importer {
public:
  Importer(MLIRContext &ctx, const SourceModel &src, bool carryWeights)
      : ctx(ctx), src(src), b(&ctx), carryWeights(carryWeights),
        keepAlive(std::make_shared<std::vector<std::shared_ptr<SourceBuffer>>>(src.buffers)) {}

  OwningOpRef<ModuleOp> run() {
    const ModelConfig &c = src.config;
    Location fileLoc = FileLineColLoc::get(&ctx, src.path, 0, 0);
    OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
    b.setInsertionPointToEnd(module->getBody());

    SmallVector<NamedAttribute> cfg;
    nlohmann::json cfgJson = configToJson(c);
    for (auto &[k, v] : cfgJson.items())
      if (!v.is_null())
        cfg.push_back(b.getNamedAttr(k, jsonToAttribute(b, v)));
    auto model = llm::ModelOp::create(b, fileLoc, b.getStringAttr(symbolName()),
                                      b.getDictionaryAttr(cfg), /*tokenizer=*/nullptr,
                                      /*source=*/nullptr, /*passes=*/nullptr);
    if (carryWeights) {
      const std::string tok = tokenizerToJson(src.tokenizer).dump();
      model.setTokenizerAttr(ownedBytesAttr(&ctx, "tokenizer", {tok.begin(), tok.end()}));
      model.setSourceAttr(cast<DictionaryAttr>(jsonToAttribute(b, sourceJson())));
    }
    Block *body = new Block();
    model.getBody().push_back(body);
    Value tokens = body->addArgument(
        RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type()), fileLoc);
    b.setInsertionPointToEnd(body);

    Value table = weight("token_embd.weight", {c.vocab_size, c.hidden_size});
    Value h = llm::EmbedOp::create(b, loc("token_embd"), act(c.hidden_size),
                                   tokens, table);
    for (int64_t l = 0; l < c.num_layers; ++l)
      h = layer(l, h);
    Value fnorm = weight("output_norm.weight", {c.hidden_size});
    h = norm(h, fnorm, "output_norm", "output_norm.bias");
    Value head = c.tied_embeddings || !src.find("output.weight")
                     ? table
                     : weight("output.weight", {c.vocab_size, c.hidden_size});
    Value logits = llm::LMHeadOp::create(b, loc("output"), act(c.vocab_size),
                                         h, head);
    llm::ReturnOp::create(b, loc("output"), logits);
    return module;
  }

private:
  std::string symbolName() const {
    std::string s = src.config.name.empty() ? src.config.architecture
                                            : src.config.name;
    for (char &ch : s)
      if (!isalnum(static_cast<unsigned char>(ch)) && ch != '_')
        ch = '_';
    if (s.empty() || isdigit(static_cast<unsigned char>(s[0])))
      s = "m_" + s;
    return s;
  }

  /// Where the model came from (recorded in the artifact's manifest).
  nlohmann::json sourceJson() const {
    nlohmann::json source = {{"format", src.format}, {"path", src.path}};
    struct stat st;
    if (::stat(src.path.c_str(), &st) == 0) {
      source["size"] = (int64_t)st.st_size;
      source["mtime"] = (int64_t)st.st_mtime;
    }
    for (auto &[k, v] : src.metadata)
      source["metadata"][k] = v;
    return source;
  }

  Location loc(const std::string &name) {
    return NameLoc::get(b.getStringAttr(name));
  }

  RankedTensorType act(int64_t width) {
    return RankedTensorType::get({ShapedType::kDynamic, width}, b.getF32Type());
  }

  [[noreturn]] void fail(const std::string &msg) {
    throw ImportError(src.path + ": " + msg);
  }

  static std::string shapeStr(const std::vector<int64_t> &s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i)
      r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  }

  /// A weight that must exist with the given shape.
  Value weight(const std::string &name, const std::vector<int64_t> &shape) {
    const SourceTensor *t = src.find(name);
    if (!t)
      fail("missing tensor '" + name + "'");
    if (t->shape != shape)
      fail("tensor '" + name + "' has shape " + shapeStr(t->shape) +
           ", expected " + shapeStr(shape));
    return weightOf(*t);
  }

  Value optionalWeight(const std::string &name,
                       const std::vector<int64_t> &shape) {
    return src.find(name) ? weight(name, shape) : Value();
  }

  Value weightOf(const SourceTensor &t) {
    auto type = RankedTensorType::get(t.shape, weightElementType(&ctx, t.dtype));
    auto op = llm::WeightOp::create(b, loc(t.name), type, b.getStringAttr(t.name),
                                    /*value=*/nullptr, /*aux=*/nullptr, /*transform=*/nullptr);
    if (carryWeights)
      op.setValueAttr(borrowedBytesAttr(&ctx, t.name, t.data, t.nbytes, keepAlive));
    return op;
  }

  Value norm(Value x, Value w, const std::string &what,
             const std::string &biasName) {
    const ModelConfig &c = src.config;
    auto eps = b.getF64FloatAttr(c.norm_eps);
    if (c.norm == NormKind::LayerNorm) {
      Value bias = optionalWeight(biasName, {c.hidden_size});
      return llm::LayerNormOp::create(b, loc(what), x.getType(), x, w, bias,
                                      eps);
    }
    return llm::RMSNormOp::create(b, loc(what), x.getType(), x, w, eps);
  }

  Value layer(int64_t l, Value input) {
    const ModelConfig &c = src.config;
    std::string p = "blk." + std::to_string(l) + ".";
    OpBuilder::InsertionGuard guard(b);
    auto op = llm::LayerOp::create(b, loc("blk." + std::to_string(l)), l, input);
    Block &body = op.getBody().front();
    b.setInsertionPointToEnd(&body);
    Value x = body.getArgument(0);
    int64_t d = c.hidden_size, h = c.num_heads, kv = c.num_kv_heads,
            hd = c.head_dim, f = c.intermediate_size;

    Value n1 = norm(x, weight(p + "attn_norm.weight", {d}), p + "attn_norm",
                    p + "attn_norm.bias");
    Value wq = weight(p + "attn_q.weight", {h * hd, d});
    Value wk = weight(p + "attn_k.weight", {kv * hd, d});
    Value wv = weight(p + "attn_v.weight", {kv * hd, d});
    Value wo = weight(p + "attn_output.weight", {d, h * hd});
    Value bq, bk, bv;
    if (src.find(p + "attn_q.bias") || c.attention_bias) {
      bq = weight(p + "attn_q.bias", {h * hd});
      bk = weight(p + "attn_k.bias", {kv * hd});
      bv = weight(p + "attn_v.bias", {kv * hd});
    }
    auto attn = llm::AttentionOp::create(
        b, loc(p + "attn"), x.getType(), n1, wq, wk, wv, wo, bq, bk, bv,
        b.getI64IntegerAttr(l), b.getI64IntegerAttr(h), b.getI64IntegerAttr(kv),
        b.getI64IntegerAttr(hd), b.getF64FloatAttr(c.rope_theta),
        llm::RopeStyleAttr::get(&ctx, llm::RopeStyle(uint32_t(c.rope_style))), b.getBoolAttr(true),
        DictionaryAttr());
    Value r1 = llm::AddOp::create(b, loc(p + "attn_residual"), x.getType(), x, attn);

    Value n2 = norm(r1, weight(p + "ffn_norm.weight", {d}), p + "ffn_norm",
                    p + "ffn_norm.bias");
    Value ffn;
    auto actName = llm::ActivationAttr::get(&ctx, llm::Activation(uint32_t(c.activation)));
    if (c.num_experts > 0) {
      int64_t e = c.num_experts;
      Value router = weight(p + "ffn_gate_inp.weight", {e, d});
      Value g = weight(p + "ffn_gate_exps.weight", {e, f, d});
      Value u = weight(p + "ffn_up_exps.weight", {e, f, d});
      Value dn = weight(p + "ffn_down_exps.weight", {e, d, f});
      ffn = llm::MoEOp::create(b, loc(p + "moe"), x.getType(), n2, router, g, u,
                               dn, b.getI64IntegerAttr(c.num_experts_per_token),
                               actName, b.getBoolAttr(true),
                               llm::MoEGatingAttr::get(&ctx, llm::MoEGating::Softmax),
                               DenseF32ArrayAttr(), b.getF64FloatAttr(0.0));
    } else {
      Value g = weight(p + "ffn_gate.weight", {f, d});
      Value u = weight(p + "ffn_up.weight", {f, d});
      Value dn = weight(p + "ffn_down.weight", {d, f});
      ffn = llm::MLPOp::create(b, loc(p + "mlp"), x.getType(), n2, g, u, dn,
                               actName);
    }
    Value r2 = llm::AddOp::create(b, loc(p + "ffn_residual"), x.getType(), r1, ffn);
    llm::YieldOp::create(b, loc(p + "out"), r2);
    return op.getResult();
  }

  MLIRContext &ctx;
  const SourceModel &src;
  OpBuilder b;
  bool carryWeights;
  std::shared_ptr<const void> keepAlive; // the source's buffers, held by every blob
};
} // namespace

OwningOpRef<ModuleOp> importSourceModel(MLIRContext &ctx, const SourceModel &src,
                                        bool carryWeights) {
  ctx.getOrLoadDialect<llm::LlmDialect>();
  return Importer(ctx, src, carryWeights).run();
}

} // namespace llmc
