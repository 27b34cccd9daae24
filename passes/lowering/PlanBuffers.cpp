//===- PlanBuffers.cpp - One arena for every kernel activation ------------===//
// See Passes.td (llmk-plan-buffers). Offsets are in floats per token, so the
// plan holds for any step length T (a value of width w at offset o occupies
// [o*T, (o+w)*T): disjoint intervals stay disjoint when scaled by T).
//===----------------------------------------------------------------------===//
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "passes/lowering/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include <algorithm>

using namespace mlir;

namespace llmc::lowering {
#define GEN_PASS_DEF_PLANBUFFERSPASS
#include "passes/lowering/Passes.h.inc"

namespace {

struct Slot {
  int64_t offset = 0, width = 0, lastUse = 0;
};

/// Lowest offset where `width` floats overlap none of `live`.
int64_t firstFit(const std::vector<Slot> &live, int64_t width) {
  std::vector<std::pair<int64_t, int64_t>> used;
  for (const Slot &s : live)
    used.push_back({s.offset, s.offset + s.width});
  std::sort(used.begin(), used.end());
  int64_t at = 0;
  for (auto [lo, hi] : used) {
    if (lo - at >= width)
      return at;
    at = std::max(at, hi);
  }
  return at;
}

LogicalResult planModel(llm::ModelOp model) {
  Block &body = model.getBodyBlock();
  llvm::DenseMap<Operation *, int64_t> index;
  int64_t i = 0;
  for (Operation &op : body)
    index[&op] = i++;

  Value output;
  if (auto ret = dyn_cast<llm::ReturnOp>(body.back()))
    output = ret.getLogits();

  llvm::DenseMap<Value, Slot> slots;
  std::vector<Value> live; // values holding a slot
  int64_t arena = 0;
  Builder b(model.getContext());
  for (Operation &op : body) {
    if (op.getDialect() == nullptr || op.getDialect()->getNamespace() != "llmk")
      continue;
    if (op.getNumResults() != 1)
      return op.emitOpError("expected one result");
    Value v = op.getResult(0);
    const int64_t here = index[&op];
    int64_t last = here;
    for (Operation *user : v.getUsers())
      last = std::max(last, index.lookup(body.findAncestorOpInBlock(*user)));
    // Values dead before this op give their slots back.
    llvm::erase_if(live, [&](Value x) { return slots[x].lastUse < here; });
    if (v == output)
      continue; // the logits go to the caller's buffer

    const int64_t width = cast<RankedTensorType>(v.getType()).getDimSize(1);
    // In place: an element-wise update of a value whose life ends here.
    Value reuse;
    if (auto ma = dyn_cast<llmk::MatmulAddOp>(op))
      reuse = ma.getResidual();
    else if (auto add = dyn_cast<llmk::AddOp>(op))
      reuse = add.getLhs();
    else if (auto moe = dyn_cast<llmk::NormMoeOp>(op))
      reuse = moe.getResidual(); // the runtime reads x (copied) before it writes
    Slot s;
    s.width = width;
    s.lastUse = last;
    if (reuse && slots.count(reuse) && slots[reuse].lastUse == here) {
      s.offset = slots[reuse].offset;
      llvm::erase(live, reuse);
    } else {
      std::vector<Slot> busy;
      for (Value x : live)
        busy.push_back(slots[x]);
      s.offset = firstFit(busy, width);
    }
    slots[v] = s;
    live.push_back(v);
    arena = std::max(arena, s.offset + width);
    op.setAttr("arena_offset", b.getI64IntegerAttr(s.offset));
  }
  model->setAttr("llmk.arena_floats_per_token", b.getI64IntegerAttr(arena));
  return success();
}

struct PlanBuffersPass final : impl::PlanBuffersPassBase<PlanBuffersPass> {
  using Base::Base;
  void runOnOperation() override {
    for (llm::ModelOp model : getOperation().getOps<llm::ModelOp>())
      if (failed(planModel(model)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace llmc::lowering
