//===- WeightStore.h - The weights the IR holds, by name --------*- C++ -*-===//
// A view of the weights a module carries (`llm.weight` ops with a `value`
// attribute; see LlmOps.td): type, shape and bytes by name, pointing into
// the IR's blobs (nothing copied). `replace` writes a new blob back into
// every `llm.weight` op of that name and retypes it, so the IR stays the
// one source of truth: a pass builds a store from the module it runs on,
// and no pass reaches weights through anything but the IR.
// The blobs live as long as the MLIRContext; so do the store's pointers.
//===----------------------------------------------------------------------===//
#pragma once
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/dtype.h"
#include "llmc/tokenizer.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

class WeightStore {
public:
  struct Entry {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const void *data = nullptr; // null: the IR gives only the weight's type
    int64_t nbytes = 0;
    /// Side data of formats that need it (needsAux(dtype)): exported as the
    /// U8 tensor "<name>.aux"; auxBytes(dtype, rows, cols) per matrix.
    llvm::ArrayRef<uint8_t> aux;
    nlohmann::json info = nlohmann::json::object(); // `transform`: what produced it
    std::shared_ptr<std::vector<uint8_t>> expanded;  // a splat literal, expanded
  };

  /// Every weight of `module`. Throws std::runtime_error on a weight op whose
  /// type is not a storage type or whose blob has no data.
  explicit WeightStore(mlir::ModuleOp module);

  const Entry *find(const std::string &name) const;
  /// True when every weight carries its bytes (false: a types-only module).
  bool hasData() const { return hasData_; }
  /// The names in the IR, sorted.
  std::vector<std::string> names() const;

  /// Writes `bytes` (and `aux`, `info`) as weight `name` into every llm.weight
  /// op of that name, retyped to `dtype`. Throws on a side-data size mismatch.
  void replace(const std::string &name, DType dtype, std::vector<int64_t> shape,
               std::vector<uint8_t> bytes, nlohmann::json info,
               std::vector<uint8_t> aux = {});

  /// Rows [firstRow, firstRow + numRows) of the 2-D view [rows, cols] of the
  /// weight (a 3-D [E, F, D] weight is [E*F, D]), dequantized to f32.
  static void dequantizeRows(const Entry &e, int64_t firstRow, int64_t numRows, float *out);

  /// What the model op carries beside weights: its tokenizer (empty when the
  /// IR has none), its vocabulary size, and where it came from.
  TokenizerData tokenizer() const;
  int64_t vocabSize() const;
  std::string sourcePath() const;

  mlir::ModuleOp module() const { return module_; }

private:
  Entry read(llm::WeightOp op) const;

  mlir::ModuleOp module_;
  bool hasData_ = true;
  std::map<std::string, Entry> entries;
  std::map<std::string, std::vector<llm::WeightOp>> ops_;
};

/// The one `llm.model` of `module`; null when there is none.
llm::ModelOp modelOf(mlir::ModuleOp module);

/// Progress lines of a pass, each emitted as a remark on `op` when its
/// newline is written (the last one when the stream goes out of scope):
/// llmc compile prints remarks as plain progress lines and drops them with
/// -q; llmc-opt prints them as MLIR remarks. No global stream, no flag.
class ProgressLog : public llvm::raw_ostream {
public:
  explicit ProgressLog(mlir::Operation *op) : op_(op) { SetUnbuffered(); }
  ~ProgressLog() override;

private:
  void write_impl(const char *ptr, size_t size) override;
  uint64_t current_pos() const override { return pos_; }
  void emitLine();

  mlir::Operation *op_;
  std::string line_;
  uint64_t pos_ = 0;
};

} // namespace llmc
