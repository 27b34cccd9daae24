//===- LlmOps.cpp - llm dialect operations ----------------------*- C++ -*-===//
// Verifiers check every shape relation an op implies and say which operand
// is off, what it is and what was expected.
//===----------------------------------------------------------------------===//
#include <cmath>
#include "dialects/llm/IR/LlmOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace llmc::llm;

#define GET_OP_CLASSES
#include "dialects/llm/IR/LlmOps.cpp.inc"

namespace {
/// A shape as "[a, b, ?]".
std::string ShapeStr(ArrayRef<int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i)
      s += ", ";
    s += ShapedType::isDynamic(dims[i]) ? "?" : std::to_string(dims[i]);
  }
  return s + "]";
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// `what` (an operand name) must have exactly `expected` as its shape;
/// `meaning` explains the expected dimensions.
LogicalResult expectShape(Operation *op, StringRef what, Value v,
                          ArrayRef<int64_t> expected, StringRef meaning) {
  ArrayRef<int64_t> got = shapeOf(v);
  if (got == expected)
    return success();
  return op->emitOpError() << "'" << what << "' has shape " << ShapeStr(got)
                           << " but expected " << ShapeStr(expected) << " ("
                           << meaning << ")";
}

int64_t features(Value activation) { return shapeOf(activation)[1]; }

LogicalResult checkActivation(Operation *op, StringRef what, Value v) {
  if (ShapedType::isDynamic(features(v)))
    return op->emitOpError() << "'" << what
                             << "' must have a static feature dimension";
  return success();
}

LogicalResult checkActivation(Operation *op, StringRef what, Value v,
                              int64_t width, StringRef meaning) {
  if (failed(checkActivation(op, what, v)))
    return failure();
  if (features(v) != width)
    return op->emitOpError() << "'" << what << "' has " << features(v)
                             << " features but expected " << width << " ("
                             << meaning << ")";
  return success();
}

/// Bytes a weight of `type` takes as stored (f32 4, f16/bf16 2, a quant
/// format its block bytes per block).
int64_t storedBytes(RankedTensorType type) {
  const int64_t n = type.getNumElements();
  Type e = type.getElementType();
  if (auto q = dyn_cast<QuantType>(e))
    return n / q.getBlockSize() * q.getBlockBytes();
  return n * (e.isF32() ? 4 : 2);
}

/// `attr` holds stored bytes: a 1-D i8 attribute of `expected` bytes (any
/// size when negative), or a dense literal of the weight's own type.
LogicalResult verifyStoredBytes(Operation *op, StringRef what, ElementsAttr attr,
                                RankedTensorType weightType, int64_t expected) {
  auto t = cast<ShapedType>(attr.getType());
  if (expected >= 0 && isa<DenseElementsAttr>(attr) && t == weightType &&
      !isa<QuantType>(weightType.getElementType()))
    return success();
  if (t.getRank() != 1 || !t.getElementType().isInteger(8))
    return op->emitOpError() << "'" << what << "' must be a 1-D i8 attribute of the stored bytes"
                             << (expected >= 0 ? " (or a dense literal of the weight's type)" : "")
                             << ", got " << t;
  if (!isa<DenseResourceElementsAttr, DenseElementsAttr>(attr))
    return op->emitOpError() << "'" << what << "' must be dense or dense_resource";
  if (expected >= 0 && t.getNumElements() != expected)
    return op->emitOpError() << "'" << what << "' holds " << t.getNumElements()
                             << " bytes but the weight's type stores " << expected;
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

LogicalResult ModelOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 ||
      body.getArgument(0).getType() !=
          RankedTensorType::get({ShapedType::kDynamic},
                                IntegerType::get(getContext(), 32)))
    return emitOpError("body must take exactly one argument, the token ids "
                       "(tensor<?xi32>)");
  if (body.empty() || !isa<ReturnOp>(body.back()))
    return emitOpError("body must end with 'llm.return'");
  return success();
}

void LayerOp::build(OpBuilder &builder, OperationState &state, int64_t index,
                    Value input) {
  state.addAttribute(getIndexAttrName(state.name),
                     builder.getI64IntegerAttr(index));
  state.addOperands(input);
  state.addTypes(input.getType());
  Region *region = state.addRegion();
  Block *block = new Block();
  region->push_back(block);
  block->addArgument(input.getType(), state.location);
}

LogicalResult LayerOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 ||
      body.getArgument(0).getType() != getInput().getType())
    return emitOpError("body must take one argument of the input's type ")
           << getInput().getType();
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("body must end with 'llm.yield'");
  if ( yield.getValue().getType() != getResult().getType())
    return emitOpError("yields ") << yield.getValue().getType()
                                  << " but the layer returns "
                                  << getResult().getType();
  if (static_cast<int64_t>(getIndex()) < 0)
    return emitOpError("layer index must be non-negative, got ")
           << static_cast<int64_t>(getIndex());
  return success();
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  auto type = cast<RankedTensorType>(getResult().getType());
  if (getName().empty())
    return emitOpError("weight needs a non-empty name");
  if (!type.hasStaticShape())
    return emitOpError("weight '") << getName() << "' must have a static shape";
  if (type.getRank() == 0)
    return emitOpError("weight '") << getName() << "' must have rank >= 1";
  if (auto q = dyn_cast<QuantType>(type.getElementType())) {
    int64_t inner = type.getShape().back();
    if (inner % q.getBlockSize() != 0)
      return emitOpError("weight '")
             << getName() << "': innermost dimension " << inner
             << " is not a multiple of the " << q.getFormat()
             << " block size " << q.getBlockSize();
  }
  if (auto value = getValueAttr())
    if (failed(verifyStoredBytes(*this, "value", value, type, storedBytes(type))))
      return failure();
  if (auto aux = getAuxAttr())
    if (failed(verifyStoredBytes(*this, "aux", aux, type, -1)))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

LogicalResult EmbedOp::verify() {
  ArrayRef<int64_t> table = shapeOf(getTable());
  if (table.size() != 2)
    return emitOpError("'table' must be [vocab, hidden], got rank ")
           << table.size();
  return checkActivation(*this, "result", getResult(), table[1],
                         "the table's hidden size");
}

LogicalResult RMSNormOp::verify() {
  if (failed(checkActivation(*this, "x", getX())))
    return failure();
  if (getEps().convertToDouble() <= 0)
    return emitOpError("eps must be positive");
  return expectShape(*this, "weight", getWeight(), {features(getX())},
                     "one scale per feature of x");
}

LogicalResult LayerNormOp::verify() {
  if (failed(checkActivation(*this, "x", getX())))
    return failure();
  if (getEps().convertToDouble() <= 0)
    return emitOpError("eps must be positive");
  int64_t d = features(getX());
  if (failed(expectShape(*this, "weight", getWeight(), {d},
                         "one scale per feature of x")))
    return failure();
  if (getBias())
    return expectShape(*this, "bias", getBias(), {d},
                       "one offset per feature of x");
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(checkActivation(*this, "x", getX())))
    return failure();
  int64_t d = features(getX());
  int64_t h = getNumHeads(), kv = getNumKvHeads(), hd = getHeadDim();
  if (h <= 0 || kv <= 0 || hd <= 0)
    return emitOpError("num_heads, num_kv_heads and head_dim must be positive, got ")
           << h << ", " << kv << ", " << hd;
  if (h % kv != 0)
    return emitOpError("num_heads (")
           << h << ") must be a multiple of num_kv_heads (" << kv << ")";
  if (hd % 2 != 0)
    return emitOpError("head_dim must be even for RoPE, got ") << hd;
  if (getRopeTheta().convertToDouble() <= 0)
    return emitOpError("rope_theta must be positive");
  if (static_cast<int64_t>(getLayer()) < 0)
    return emitOpError("layer must be non-negative");
  if (failed(expectShape(*this, "wq", getWq(), {h * hd, d},
                         "num_heads * head_dim, hidden")) ||
      failed(expectShape(*this, "wk", getWk(), {kv * hd, d},
                         "num_kv_heads * head_dim, hidden")) ||
      failed(expectShape(*this, "wv", getWv(), {kv * hd, d},
                         "num_kv_heads * head_dim, hidden")) ||
      failed(expectShape(*this, "wo", getWo(), {d, h * hd},
                         "hidden, num_heads * head_dim")))
    return failure();
  bool hasQ = bool(getBq()), hasK = bool(getBk()), hasV = bool(getBv());
  if (hasQ != hasK || hasQ != hasV)
    return emitOpError("q, k and v biases come together or not at all");
  if (hasQ && (failed(expectShape(*this, "bq", getBq(), {h * hd},
                                  "num_heads * head_dim")) ||
               failed(expectShape(*this, "bk", getBk(), {kv * hd},
                                  "num_kv_heads * head_dim")) ||
               failed(expectShape(*this, "bv", getBv(), {kv * hd},
                                  "num_kv_heads * head_dim"))))
    return failure();
  return success();
}

LogicalResult MLPOp::verify() {
  if (failed(checkActivation(*this, "x", getX())))
    return failure();
  int64_t d = features(getX());
  ArrayRef<int64_t> gate = shapeOf(getGate());
  if (gate.size() != 2 || gate[1] != d)
    return emitOpError("'gate' has shape ")
           << ShapeStr(gate) << " but expected [intermediate, " << d << "]";
  int64_t f = gate[0];
  if (failed(expectShape(*this, "up", getUp(), {f, d}, "intermediate, hidden")))
    return failure();
  return expectShape(*this, "down", getDown(), {d, f}, "hidden, intermediate");
}

LogicalResult MoEOp::verify() {
  if (failed(checkActivation(*this, "x", getX())))
    return failure();
  int64_t d = features(getX());
  ArrayRef<int64_t> router = shapeOf(getRouter());
  if (router.size() != 2 || router[1] != d)
    return emitOpError("'router' has shape ")
           << ShapeStr(router) << " but expected [experts, " << d << "]";
  int64_t e = router[0];
  ArrayRef<int64_t> gate = shapeOf(getGate());
  if (gate.size() != 3 || gate[0] != e || gate[2] != d)
    return emitOpError("'gate' has shape ")
           << ShapeStr(gate) << " but expected [" << e << ", intermediate, "
           << d << "]";
  int64_t f = gate[1];
  if (failed(expectShape(*this, "up", getUp(), {e, f, d},
                         "experts, intermediate, hidden")) ||
      failed(expectShape(*this, "down", getDown(), {e, d, f},
                         "experts, hidden, intermediate")))
    return failure();
  if (getTopK() < 1 || getTopK() > e)
    return emitOpError("top_k must be in [1, ") << e << "], got " << getTopK();
  const double tau = getEnergyThreshold().convertToDouble();
  if (!(tau >= 0.0 && tau <= 1.0))
    return emitOpError("energy_threshold must be in [0, 1], got ") << tau;
  if (auto nu = getExpertEnergyAttr()) {
    if (int64_t(nu.size()) != e)
      return emitOpError("expert_energy has ") << nu.size() << " values for " << e << " experts";
    for (float v : nu.asArrayRef())
      if (!(v >= 0.0f && std::isfinite(v)))
        return emitOpError("expert_energy values must be finite and >= 0, got ") << v;
  } else if (tau > 0.0) {
    return emitOpError("energy_threshold > 0 needs expert_energy");
  }
  return success();
}

LogicalResult LMHeadOp::verify() {
  if (failed(checkActivation(*this, "x", getX())))
    return failure();
  int64_t d = features(getX());
  ArrayRef<int64_t> w = shapeOf(getWeight());
  if (w.size() != 2 || w[1] != d)
    return emitOpError("'weight' has shape ")
           << ShapeStr(w) << " but expected [vocab, " << d << "]";
  return checkActivation(*this, "result", getResult(), w[0],
                         "the vocabulary size of 'weight'");
}

LogicalResult SpeculateOp::verify() {
  if (getMaxDraft() < 1 || getMaxDraft() > 64)
    return emitOpError("max_draft must be in [1, 64], got ") << getMaxDraft();
  if (getSkipBlocksAttr() && getMethod() != SpecMethod::Self)
    return emitOpError("skip_blocks belongs to method 'self'");
  if (getTreeNodes() < 0 || getTreeNodes() > 64)
    return emitOpError("tree_nodes must be in [0, 64], got ") << getTreeNodes();
  if (getTreeNodes() > 0 && getMethod() != SpecMethod::Medusa)
    return emitOpError("tree_nodes belongs to method 'medusa'");
  if (getMethod() == SpecMethod::Self) {
    if (getHidden() || getHeads() || getBias() || getDraftVocabAttr())
      return emitOpError("method 'self' drafts with the model's own blocks and takes no "
                         "operands or draft_vocab");
    auto skip = getSkipBlocksAttr();
    if (!skip || skip.empty())
      return emitOpError("method 'self' needs skip_blocks (the blocks its drafter skips)");
    int64_t blocks = 0;
    for (Operation &op : (*this)->getParentOp()->getRegion(0).front())
      blocks += isa<LayerOp>(op);
    int64_t prev = -1;
    for (int64_t b : skip.asArrayRef()) {
      if (b <= prev || b >= blocks)
        return emitOpError("skip_blocks must be ascending block indices in [0, ")
               << blocks << "), got " << b;
      prev = b;
    }
    if (int64_t(skip.size()) >= blocks)
      return emitOpError("skip_blocks leaves the drafter no block");
    return success();
  }
  if (getMethod() == SpecMethod::Ngram) {
    if (getHidden() || getHeads() || getBias() || getDraftVocabAttr())
      return emitOpError("method 'ngram' drafts from the context and takes no operands or "
                         "draft_vocab");
    if (getNgram() < 1 || getNgram() > 16)
      return emitOpError("ngram must be in [1, 16], got ") << getNgram();
    return success();
  }
  // Medusa: heads over the LM head's input.
  if (!getHidden() || !getHeads() || !getBias())
    return emitOpError("method 'medusa' needs the final hidden state and its heads and bias");
  if (failed(checkActivation(*this, "hidden", getHidden())))
    return failure();
  if (!llvm::any_of(getHidden().getUsers(), [](Operation *u) { return isa<LMHeadOp>(u); }))
    return emitOpError("'hidden' must be the input of an 'llm.lm_head'");
  const int64_t d = features(getHidden());
  ArrayRef<int64_t> h = shapeOf(getHeads());
  if (h.size() != 3 || h[0] < 1 || h[1] != d || h[2] != 2 * d)
    return emitOpError("'heads' has shape ") << ShapeStr(h) << " but expected [heads, " << d
                                             << ", " << 2 * d << "]";
  auto f32 = [](Value v) { return cast<RankedTensorType>(v.getType()).getElementType().isF32(); };
  if (!f32(getHeads()) || !f32(getBias()))
    return emitOpError("'heads' and 'bias' must be f32");
  if (failed(expectShape(*this, "bias", getBias(), {h[0], d}, "heads, hidden")))
    return failure();
  if (getMaxDraft() > h[0])
    return emitOpError("max_draft ") << getMaxDraft() << " exceeds the " << h[0] << " heads";
  auto vocab = getDraftVocabAttr();
  if (!vocab || vocab.empty())
    return emitOpError("method 'medusa' needs a non-empty draft_vocab");
  int64_t prev = -1;
  for (int32_t id : vocab.asArrayRef()) {
    if (id <= prev)
      return emitOpError("draft_vocab must be increasing token ids, got ") << id << " after "
                                                                           << prev;
    prev = id;
  }
  for (Operation *u : getHidden().getUsers())
    if (auto lm = dyn_cast<LMHeadOp>(u))
      if (prev >= shapeOf(lm.getWeight())[0])
        return emitOpError("draft_vocab id ") << prev << " is outside the vocabulary of "
                                              << shapeOf(lm.getWeight())[0];
  return success();
}
