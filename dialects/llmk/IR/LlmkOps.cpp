//===- LlmkOps.cpp - llmk op verifiers --------------------------*- C++ -*-===//
// Shapes only: every matrix is [rows, cols] with cols equal to the width of
// the activation it multiplies, and result widths add up.
//===----------------------------------------------------------------------===//
#include "dialects/llmk/IR/LlmkOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace llmc::llmk;

namespace {
int64_t width(Value v) { return cast<RankedTensorType>(v.getType()).getDimSize(1); }
ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

/// A matrix [rows, in] multiplying activations of width `in`.
LogicalResult checkMatrix(Operation *op, Value w, int64_t in, StringRef role) {
  ArrayRef<int64_t> s = shapeOf(w);
  if (s.size() != 2 || s[1] != in)
    return op->emitOpError() << role << " must be a [rows, " << in << "] matrix, got "
                             << w.getType();
  return success();
}

LogicalResult checkNorm(Operation *op, Value norm, std::optional<APFloat> eps, int64_t D) {
  if (!norm) {
    if (eps)
      return op->emitOpError("has 'eps' but no norm weight");
    return success();
  }
  ArrayRef<int64_t> s = shapeOf(norm);
  if (s.size() != 1 || s[0] != D)
    return op->emitOpError() << "norm weight must be a vector of " << D << ", got "
                             << norm.getType();
  if (!eps)
    return op->emitOpError("with a norm weight needs 'eps'");
  return success();
}
} // namespace

LogicalResult NormMatmulOp::verify() {
  const int64_t D = width(getX());
  if (failed(checkNorm(*this, getNorm(), getEps(), D)))
    return failure();
  if (getWeights().empty())
    return emitOpError("needs at least one weight");
  int64_t rows = 0;
  for (Value w : getWeights()) {
    if (failed(checkMatrix(*this, w, D, "every weight")))
      return failure();
    rows += shapeOf(w)[0];
  }
  if (width(getResult()) != rows)
    return emitOpError() << "result width " << width(getResult())
                         << " is not the weights' total rows " << rows;
  return success();
}

LogicalResult NormGatedMatmulOp::verify() {
  const int64_t D = width(getX());
  if (failed(checkNorm(*this, getNorm(), getEps(), D)) ||
      failed(checkMatrix(*this, getGate(), D, "gate")) ||
      failed(checkMatrix(*this, getUp(), D, "up")))
    return failure();
  if (shapeOf(getGate())[0] != shapeOf(getUp())[0] || width(getResult()) != shapeOf(getUp())[0])
    return emitOpError("gate, up and the result must have the same number of rows / width");
  return success();
}

LogicalResult MatmulAddOp::verify() {
  if (failed(checkMatrix(*this, getWeight(), width(getX()), "weight")))
    return failure();
  if (shapeOf(getWeight())[0] != width(getResidual()) || getResidual().getType() != getType())
    return emitOpError("residual, result and the weight's rows must have the same width");
  return success();
}

LogicalResult NormMoeOp::verify() {
  const int64_t D = width(getX());
  if (failed(checkNorm(*this, getNorm(), getEps(), D)) ||
      failed(checkMatrix(*this, getRouter(), D, "router")))
    return failure();
  const int64_t E = shapeOf(getRouter())[0];
  ArrayRef<int64_t> g = shapeOf(getGate()), u = shapeOf(getUp()), d = shapeOf(getDown());
  if (g.size() != 3 || g[0] != E || g[2] != D || u != g)
    return emitOpError() << "gate and up must be [" << E << ", intermediate, " << D
                         << "] expert tensors, got " << getGate().getType() << " and "
                         << getUp().getType();
  if (d.size() != 3 || d[0] != E || d[2] != g[1] || d[1] != width(getResult()))
    return emitOpError() << "down must be [" << E << ", " << width(getResult()) << ", " << g[1]
                         << "], got " << getDown().getType();
  if (getResidual() && getResidual().getType() != getType())
    return emitOpError("residual and result must have the same type");
  if (getTopK() < 1 || getTopK() > E)
    return emitOpError() << "top_k must be in [1, " << E << "], got " << getTopK();
  const double tau = getEnergyThreshold().convertToDouble();
  if (!(tau >= 0.0 && tau <= 1.0))
    return emitOpError() << "energy_threshold must be in [0, 1], got " << tau;
  if (auto nu = getExpertEnergyAttr()) {
    if (int64_t(nu.size()) != E)
      return emitOpError() << "expert_energy has " << nu.size() << " values for " << E
                           << " experts";
  } else if (tau > 0.0) {
    return emitOpError("energy_threshold > 0 needs expert_energy");
  }
  if (auto l = getLayoutsAttr(); l && l.size() != 4)
    return emitOpError("layouts must name 4 layouts (router, gate, up, down)");
  return success();
}

LogicalResult RopeKvAppendOp::verify() {
  const int64_t H = getNumHeads(), KV = getNumKvHeads(), hd = getHeadDim();
  if (H <= 0 || KV <= 0 || hd <= 0 || H % KV || hd % 2)
    return emitOpError("needs positive head counts, num_heads a multiple of num_kv_heads and "
                       "an even head_dim");
  if (width(getQkv()) != (H + 2 * KV) * hd)
    return emitOpError() << "qkv width " << width(getQkv()) << " is not (num_heads + 2 * "
                         << "num_kv_heads) * head_dim = " << (H + 2 * KV) * hd;
  if (width(getResult()) != H * hd)
    return emitOpError() << "result width must be num_heads * head_dim = " << H * hd;
  return success();
}

#define GET_OP_CLASSES
#include "dialects/llmk/IR/LlmkOps.cpp.inc"
