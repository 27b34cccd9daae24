//===- OnnxRaiser.h - Matching a decoder in an ONNX graph -------*- C++ -*-===//
// The raising step of the ONNX reader (OnnxDecoderReader.cpp: the graph
// walk and the checks; OnnxLayerReader.cpp: attention, MLP, rotary, head).
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/ReaderUtil.h"
#include "compiler/import/onnx/OnnxGraph.h"

#include <functional>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmc::onnx_import {

struct Use {
  int node = -1;
  int slot = -1;
};

struct Norm {
  std::string out, weight; // weight "": none in the graph (a scale of ones)
  double eps = 0;
  NormKind kind = NormKind::RMSNorm;
  std::string bias;        // LayerNorm's shift, "" if none
};

struct Linear {
  int node = -1;
  std::string weight;      // constant [in, out] (or its Transpose's source, [out, in])
  bool transposed = false; // weight already [out, in]
  bool nbits = false;       // com.microsoft MatMulNBits: weight is its packed codes
  int dq = -1;              // MatMul(x, DequantizeLinear(W [in, out])): that node
  std::string bias;        // "" if none
  std::string out;         // canonical value after the bias
  int64_t in = 0, outDim = 0;
  int64_t col0 = 0;        // first output column in the weight (a part of a fused one)
};

/// Two projections as a gated MLP: act(gate) * up (`hidden`, "" when the
/// activated one is not multiplied by the other).
struct Gated {
  Linear gate, up;
  std::string hidden;
  Activation kind = Activation::SiLU;
};

class Raiser {
public:
  explicit Raiser(const OnnxGraph &g) : g_(g) { index(); }
  SourceModel run();

private:
  const OnnxGraph &g_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<Use>> users_; // by canonical value
  std::set<std::string> claimed_;                           // constants raised
  std::map<std::string, Norm> fusedNorms_; // residual -> its SkipSimplifiedLayerNormalization
  SourceModel m_;
  std::string embedding_, ids_;
  std::vector<double> ropeFreqs_; // the RoPE frequencies read, and their precision
  double ropeTol_ = 0;
  int64_t cachePositions_ = 0;    // rows of cos/sin caches, if RoPE came as caches
  std::optional<double> normEps_;
  std::optional<NormKind> normKind_;
  std::optional<RopeStyle> ropeStyle_; // from RotaryEmbedding ops; rotate-half otherwise
  std::optional<Activation> activation_;
  bool attentionBias_ = false;
  int64_t qDim_ = 0, kvDim_ = 0, ffnDim_ = 0, headDim_ = 0, experts_ = 0, expertsPerToken_ = 0;
  double ropeBase_ = 0;

  [[noreturn]] void fail(const std::string &what) const { importFail(g_.path, what); }
  const OnnxNode &node(int i) const { return g_.nodes[size_t(i)]; }
  void index();
  std::string canon(std::string v) const;
  int producerOf(const std::string &v) const;
  const std::vector<Use> &users(const std::string &v) const;
  const OnnxConstant *constant(const std::string &v) const { return g_.constant(canon(v)); }
  std::optional<double> scalar(const std::string &v) const;
  std::optional<int> userOp(const std::string &v, const char *op, int slot = -1) const;

  std::optional<Norm> matchNorm(const std::string &r) const;
  /// x / sqrt(mean(x^2) + eps) [* w]: RMSNorm of `x` = r, or the variance
  /// half of a LayerNorm with x = r - mean(r) (`kind`).
  std::optional<Norm> matchDecomposedNorm(const std::string &x, const Use &pow,
                                          NormKind kind) const;
  std::optional<Norm> matchDecomposedLayerNorm(const std::string &r, const Use &mean) const;
  std::optional<Norm> fusedNorm(const OnnxNode &n, int slot) const;
  /// The LayerNorm shift after `n.out`: an Add of a 1-D float constant.
  void matchShift(Norm &n) const;
  bool isWeightMatMul(int n) const;
  std::vector<Linear> linearsFrom(const std::string &v) const;
  /// A fused projection's parts, one per Slice of its result (Phi-3's
  /// qkv_proj and gate_up_proj; OnnxFusedReader.cpp); {} if it is not one.
  std::vector<Linear> splitFused(const Linear &l) const;
  std::optional<int64_t> intValue(const std::string &v, const std::string &fused,
                                  int64_t columns, int depth) const;
  /// The MatMuls `v` flows into (not through Shape, not past a MatMul):
  /// activation-by-activation ones, or (weights) those with a weight.
  std::vector<Use> matmulsReached(const std::string &v, bool weights) const;
  enum class Flow { Continue, Stop, Done };
  void walkForward(const std::string &from, const std::function<Flow(const Use &)> &visit) const;
  /// The residual after adding `branch` to `r`: an Add's output, or a
  /// SkipSimplifiedLayerNormalization's sum (output 3; its normed output
  /// is then the next norm: fusedNorms_).
  std::string residualAdd(const std::string &r, const std::string &branch);
  bool reaches(const std::string &from, int target) const;
  int embeddingGather() const;
  bool isGraphOutput(const std::string &v) const; // looking through Cast and Identity

  void addConstant(const std::string &value, const std::string &name,
                   std::vector<int64_t> shape = {});
  void addNorm(Norm n, const std::string &name);
  void addLinear(const Linear &l, const std::string &name);
  /// MatMulNBits' weight [N, K] in float32 (OnnxNBitsReader.cpp).
  std::shared_ptr<OwnedBuffer> dequantizeNBits(const Linear &l);
  /// A DequantizeLinear weight [in, out] as float32 [out, in].
  std::shared_ptr<OwnedBuffer> dequantizeQdq(const Linear &l);
  /// An attention's projections and the value its output projection reads.
  struct QkvParts {
    Linear q, k, v;
    std::string context;
  };
  std::string raiseAttention(int64_t layer, const std::string &r);
  QkvParts softmaxAttention(int64_t layer, std::vector<Linear> lins);
  /// onnxruntime's GroupQueryAttention contrib op fed by the projections
  /// (OnnxAttentionReader.cpp); nullopt when none reads them.
  std::optional<QkvParts> contribAttention(int64_t layer, const std::vector<Linear> &lins);
  void useRopeStyle(RopeStyle style, const OnnxNode &n);
  std::string activationOf(const std::string &g, Activation &kind) const;
  std::optional<Gated> gatedPair(const Linear &a, const Linear &b) const;
  std::string raiseMlp(int64_t layer, const std::string &r);
  /// Mixtral's sparse MoE as torch traces it (OnnxMoeReader.cpp).
  std::string raiseMoe(int64_t layer, const std::string &r, const std::string &normed,
                       const Linear &router);
  int64_t topK(int64_t layer, const Linear &router) const;
  void addStacked(const std::vector<Linear> &experts, const std::string &name);
  void readRotary();
  void readRotaryCaches();
  void readRotaryEmbeddingOps();
  void useCaches(const OnnxConstant &cs, const OnnxConstant &sn, bool halfWidth);
  void useFrequencies(const std::vector<double> &f, double tol, const std::string &what);
  std::optional<double> ropeBaseOf(const std::vector<double> &f, double tol) const;
  bool ropeFits(const std::vector<double> &f, double tol, double base) const;
  void raiseHead(const Linear &head);
  void fillConfig(int64_t layers);
  static bool servingInput(const std::string &name);
  void checkCoverage(const std::string &logits) const;
  void readSideFiles();
};

} // namespace llmc::onnx_import
