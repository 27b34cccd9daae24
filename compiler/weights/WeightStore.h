//===- WeightStore.h - The weights an llm.weight op names -------*- C++ -*-===//
// The compiler's side of `llm.weight "name"`: type, shape and bytes of every
// weight, initially pointing into the source file (nothing copied), replaced
// by owned buffers when a pass rewrites a weight (quantization, pruning).
// Passes reach the store of the compile in progress through
// WeightStore::active(); under llmc-opt there is none, and passes then change
// only the IR types (what lit tests check).
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/SourceModel.h"
#include <map>
#include <memory>
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

class WeightStore {
public:
  struct Entry {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const void *data = nullptr;
    int64_t nbytes = 0;
    std::shared_ptr<const std::vector<uint8_t>> owned; // set when a pass made the bytes
    nlohmann::json info = nlohmann::json::object();    // what produced it (recorded in the manifest)
    /// Side data of formats that need it (needsAux(dtype)): exported as the
    /// U8 tensor "<name>.aux"; auxBytes(dtype, rows, cols) per matrix.
    std::shared_ptr<const std::vector<uint8_t>> aux;
  };

  /// References every tensor of `src` (which must outlive the store).
  explicit WeightStore(const SourceModel &src);

  const Entry *find(const std::string &name) const;
  /// The model the store was made from (config, tokenizer, provenance).
  const SourceModel &source() const { return *source_; }
  void replace(const std::string &name, DType dtype, std::vector<int64_t> shape,
               std::vector<uint8_t> bytes, nlohmann::json info,
               std::vector<uint8_t> aux = {});

  /// Rows [firstRow, firstRow + numRows) of the 2-D view [rows, cols] of the
  /// weight (a 3-D [E, F, D] weight is [E*F, D]), dequantized to f32.
  static void dequantizeRows(const Entry &e, int64_t firstRow, int64_t numRows, float *out);

  /// The store of the compile in progress on this thread, or nullptr.
  static WeightStore *active();

  /// Where passes write progress lines for this compile: stderr, or nothing
  /// when the compile is quiet (llmc compile -q). progressStream() is the
  /// active store's stream, or stderr when there is none (llmc-opt).
  void setQuiet(bool quiet) { quiet_ = quiet; }
  llvm::raw_ostream &progress() const;
  static llvm::raw_ostream &progressStream();

  /// Makes `store` the active one for its lifetime.
  class Scope {
  public:
    explicit Scope(WeightStore &store);
    ~Scope();

  private:
    WeightStore *previous;
  };

private:
  bool quiet_ = false;
  const SourceModel *source_;
  std::map<std::string, Entry> entries;
};

} // namespace llmc
