//===- MoeWeights.h - MLP and MoE layers between the IR and Eigen -*- C++ -*-===//
// What llm-moefy and llm-prune-experts share: the rows entering every
// block's MLP or MoE op on calibration text (one reference-engine forward
// per sequence with the linear-input hook), a layer's weights read from
// the IR in f32, and new f32 weights written back as llm.weight ops.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/prune/ExpertScores.h"
#include "compiler/weights/WeightStore.h"
#include "dialects/llm/IR/LlmOps.h"
#include "passes/prune/BlockActivations.h"
#include "mlir/IR/Builders.h"
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc::prune {

/// Per block (llm.layer index), the calibration rows [N, D] entering its
/// llm.mlp or llm.moe, from the first `tokens` tokens of `path` (empty: the
/// default calibration text) in sequences of at most `seqLen`.
std::vector<RowMatrix> captureFfnInputs(mlir::ModuleOp module, const WeightStore &store,
                                        const std::string &path, int64_t tokens, int64_t seqLen,
                                        CalibrationUse &use);

/// The f32 view [rows, cols] of rows [first, first + rows) of weight `v`'s
/// 2-D view (a 3-D [E, F, D] weight is [E*F, D]).
RowMatrix weightRows(const WeightStore &store, mlir::Value v, int64_t first, int64_t rows);
/// The whole 2-D view.
RowMatrix weightMatrix(const WeightStore &store, mlir::Value v);

/// An MoE op's weights (dequantized) and routing semantics.
MoeLayer readMoe(const WeightStore &store, llm::MoEOp op);

/// A new f32 llm.weight `name` of `shape` holding `values`, at the
/// builder's insertion point.
llm::WeightOp createF32Weight(mlir::OpBuilder &b, mlir::Location loc, const std::string &name,
                              std::vector<int64_t> shape, const std::vector<float> &values,
                              const nlohmann::json &info);

/// f32 values -> bytes.
std::vector<uint8_t> f32Bytes(const std::vector<float> &values);

/// Weight name of `v` ("" when it is not an llm.weight).
std::string nameOfWeight(mlir::Value v);

} // namespace llmc::prune
