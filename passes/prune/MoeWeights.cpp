//===- MoeWeights.cpp - MLP and MoE layers between the IR and Eigen ------===//
#include "passes/prune/MoeWeights.h"
#include "compiler/weights/InMemoryModel.h"
#include "compiler/weights/IrAttributes.h"
#include "compiler/weights/WeightTypes.h"
#include "llmc/executor.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

using namespace mlir;

namespace llmc::prune {

std::vector<RowMatrix> captureFfnInputs(ModuleOp module, const WeightStore &store,
                                        const std::string &path, int64_t tokens, int64_t seqLen,
                                        CalibrationUse &use) {
  const std::vector<int32_t> ids = calibrationIds(store, path, tokens, use);
  std::unique_ptr<Artifact> art = buildInMemoryArtifact(module, store);
  int64_t blocks = 0;
  module.walk([&](llm::LayerOp l) { blocks = std::max<int64_t>(blocks, int64_t(l.getIndex()) + 1); });
  std::vector<std::vector<float>> rows(static_cast<size_t>(blocks));
  std::vector<int64_t> width(static_cast<size_t>(blocks), 0);
  ExecutorOptions o;
  o.engine = Engine::Reference;
  o.max_context = std::min<int64_t>(seqLen, int64_t(ids.size()));
  o.hook_block = -1; // every block
  o.linear_input_hook = [&](const LinearInput &in) {
    const std::string &role = in.roles->front();
    if (in.block < 0 || in.block >= blocks || in.expert >= 0 || (role != "gate" && role != "router"))
      return;
    std::vector<float> &r = rows[size_t(in.block)];
    r.insert(r.end(), in.x, in.x + in.rows * in.cols);
    width[size_t(in.block)] = in.cols;
  };
  Executor ex(*art, o);
  for (size_t at = 0; at < ids.size(); at += size_t(seqLen)) {
    const std::vector<int32_t> seq(ids.begin() + long(at),
                                   ids.begin() + long(std::min(ids.size(), at + size_t(seqLen))));
    ex.reset();
    (void)ex.forward(seq);
    use.tokens += int64_t(seq.size());
    ++use.sequences;
  }
  std::vector<RowMatrix> out(static_cast<size_t>(blocks));
  for (int64_t l = 0; l < blocks; ++l) {
    const int64_t w = width[size_t(l)];
    if (w == 0)
      continue;
    out[size_t(l)] = Eigen::Map<const RowMatrix>(rows[size_t(l)].data(),
                                                 int64_t(rows[size_t(l)].size()) / w, w);
  }
  return out;
}

std::string nameOfWeight(Value v) {
  auto w = v.getDefiningOp<llm::WeightOp>();
  return w ? w.getName().str() : std::string();
}

RowMatrix weightRows(const WeightStore &store, Value v, int64_t first, int64_t rows) {
  const std::string name = nameOfWeight(v);
  const WeightStore::Entry *e = store.find(name);
  if (!e || !e->data)
    throw std::runtime_error("weight '" + name + "' has no data in the IR (llmc compile)");
  RowMatrix m(rows, e->shape.back());
  WeightStore::dequantizeRows(*e, first, rows, m.data());
  return m;
}

RowMatrix weightMatrix(const WeightStore &store, Value v) {
  const WeightStore::Entry *e = store.find(nameOfWeight(v));
  if (!e)
    throw std::runtime_error("operand is not a weight in the IR");
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < e->shape.size(); ++i)
    rows *= e->shape[i];
  return weightRows(store, v, 0, rows);
}

MoeLayer readMoe(const WeightStore &store, llm::MoEOp op) {
  MoeLayer m;
  m.router = weightMatrix(store, op.getRouter());
  const int64_t E = m.router.rows();
  auto shape = cast<RankedTensorType>(op.getGate().getType()).getShape();
  auto dshape = cast<RankedTensorType>(op.getDown().getType()).getShape();
  const int64_t F = shape[1], Dout = dshape[1];
  for (int64_t e = 0; e < E; ++e) {
    m.gate.push_back(weightRows(store, op.getGate(), e * F, F));
    m.up.push_back(weightRows(store, op.getUp(), e * F, F));
    m.down.push_back(weightRows(store, op.getDown(), e * Dout, Dout));
  }
  m.act = static_cast<Activation>(op.getActivation());
  m.gating = static_cast<MoEGating>(op.getGating());
  m.renormalize = op.getRenormalize();
  m.topK = op.getTopK();
  return m;
}

std::vector<uint8_t> f32Bytes(const std::vector<float> &values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!values.empty())
    std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

llm::WeightOp createF32Weight(OpBuilder &b, Location loc, const std::string &name,
                              std::vector<int64_t> shape, const std::vector<float> &values,
                              const nlohmann::json &info) {
  MLIRContext *ctx = b.getContext();
  auto type = RankedTensorType::get(shape, weightElementType(ctx, DType::F32));
  auto op = llm::WeightOp::create(b, loc, type, b.getStringAttr(name), nullptr, nullptr, nullptr);
  op.setValueAttr(ownedBytesAttr(ctx, name, f32Bytes(values)));
  op.setTransformAttr(cast<DictionaryAttr>(jsonToAttribute(b, info)));
  return op;
}

} // namespace llmc::prune
