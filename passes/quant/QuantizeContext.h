//===- QuantizeContext.h - Shared state of one llm-quantize run -*- C++ -*-===//
// What every method of llm-quantize needs: the grid spec, the weight store,
// the llm.weight ops by name (to retype them), loading a weight as f32,
// writing a quantized matrix (store bytes + IR type + manifest info + one
// progress line on stderr), and the run's summary.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/quant/Gptq.h"
#include "compiler/quant/GroupGrid.h"
#include "compiler/weights/WeightStore.h"
#include "dialects/llm/IR/LlmOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace llmc::quant {

/// A weight loaded as f32, viewed as a matrix [rows, cols] (a 3-D expert
/// tensor [E, F, D] is [E*F, D]).
struct FloatWeight {
  std::vector<int64_t> shape;
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
};

class QuantizeContext {
public:
  /// `format`: the storage format this context writes; by default the
  /// grouped-integer format of `spec`. Methods with their own formats
  /// (AAAC, QTEA, HBQ) pass theirs and write with writeFormatted; spec then
  /// carries their bits and group.
  QuantizeContext(mlir::ModuleOp module, WeightStore &store, GridSpec spec,
                  std::set<std::string> targets, int64_t calibrationTokens,
                  std::optional<DType> format = std::nullopt);

  const GridSpec &spec() const { return spec_; }
  DType format() const { return format_; }
  int64_t calibrationTokens() const { return calibrationTokens_; }
  WeightStore &store() { return store_; }
  mlir::ModuleOp module() { return module_; }
  /// Weights the pass should quantize and has not written yet.
  bool pending(const std::string &name) const { return targets_.count(name) && !done_.count(name); }
  const std::set<std::string> &targets() const { return targets_; }
  /// The llm.weight ops that read this name.
  llvm::ArrayRef<llm::WeightOp> opsOf(llvm::StringRef name) const;

  FloatWeight load(const std::string &name) const;
  /// Store q (packed gq) as weight `name` and retype its ops. `original` is
  /// the weight before any transform, for the reported error; `extra` is
  /// merged into the manifest info.
  void writeQuantized(const std::string &name, const FloatWeight &original,
                      const std::vector<float> &dequantized, std::vector<uint8_t> bytes,
                      const std::string &method, double seconds, nlohmann::json extra);
  /// Store a weight quantized to this context's format(): `bytes` the packed
  /// rows, `aux` the side data (needsAux(format()); for a 3-D expert tensor
  /// one matrix's worth per expert, back to back), `dequantized` the f32
  /// values the runtime will compute with.
  void writeFormatted(const std::string &name, const FloatWeight &original,
                      const std::vector<float> &dequantized, std::vector<uint8_t> bytes,
                      std::vector<uint8_t> aux, const std::string &method, double seconds,
                      nlohmann::json extra);
  /// Quantizes weight `name` slab by slab (one slab for a 2-D weight, one per
  /// expert for a 3-D expert tensor) and writes it. `slab(e, w, rows, cols)`
  /// returns the quantized slab and the Hessian its output error is measured
  /// against, or nullopt for an expert without calibration data (then RTN).
  /// `extra` gets "out_rel_err" when any slab reported a Hessian, then
  /// `finish` (if set) may add what the slabs measured, before the write.
  using SlabResult = std::optional<std::pair<QuantizedMatrix, const Eigen::MatrixXd *>>;
  using SlabQuantizer =
      std::function<SlabResult(int64_t expert, const float *w, int64_t rows, int64_t cols)>;
  void quantizeSlabs(const std::string &name, const std::string &method, const SlabQuantizer &slab,
                     nlohmann::json extra,
                     const std::function<void(nlohmann::json &)> &finish = nullptr);
  /// quantizeSlabs for several weights at once: every slab of every weight
  /// is quantized on `threads` threads (<= 0: the machine's cores), then the
  /// weights are written in the order given (loaded as f32 a group at a
  /// time, at most 1 GiB unless one weight alone is larger). `slab` must be
  /// safe to call from several threads at once; each slab's result does not
  /// depend on which thread ran it or when.
  using NamedSlabQuantizer = std::function<SlabResult(
      const std::string &name, int64_t expert, const float *w, int64_t rows, int64_t cols)>;
  void quantizeSlabsParallel(const std::vector<std::string> &names, const std::string &method,
                             const NamedSlabQuantizer &slab, const nlohmann::json &extra,
                             int threads = 0);
  /// End of the batch of names[first..] whose f32 copies fit 1 GiB together
  /// (at least one weight): what quantizeSlabsParallel loads at once.
  size_t loadBatchEnd(const std::vector<std::string> &names, size_t first) const;
  /// Replace a (norm/bias) vector or a not-yet-quantized matrix with f32 values.
  void writeF32(const std::string &name, const std::vector<int64_t> &shape,
                std::vector<float> values, nlohmann::json info);

  /// RTN of every pending target (used for rtn, and for weights no
  /// calibration site reads: embeddings, the LM head).
  void rtnRemaining();

  /// One summary line on stderr.
  void summarize(const std::string &method, double seconds) const;

private:
  void retype(const std::string &name, DType t);
  /// quantizeSlabsParallel for weights loaded all at once; `finish` (if
  /// set) is quantizeSlabs's, called for each weight before its write.
  void quantizeWeightsAtOnce(const std::vector<std::string> &names, const std::string &method,
                             const NamedSlabQuantizer &slab, const nlohmann::json &extra,
                             int threads, const std::function<void(nlohmann::json &)> &finish);
  /// A slab as written: its codes and, when a Hessian came with it, its
  /// output error terms.
  struct FinishedSlab {
    QuantizedMatrix q;
    std::optional<OutputErrorTerms> terms;
  };
  /// RTN for a slab without a result, the output error for one with.
  FinishedSlab finishSlab(SlabResult done, const float *w, int64_t rows, int64_t cols) const;
  /// The slabs (one per expert) as one weight, with its output error.
  void writeSlabs(const std::string &name, const FloatWeight &w, std::vector<FinishedSlab> slabs,
                  const std::string &method, double seconds, nlohmann::json extra,
                  const std::function<void(nlohmann::json &)> &finish);
  void write(const std::string &name, DType t, const FloatWeight &original,
             const std::vector<float> &dequantized, std::vector<uint8_t> bytes,
             std::vector<uint8_t> aux, const std::string &method, double seconds,
             nlohmann::json extra);

  mlir::ModuleOp module_;
  WeightStore &store_;
  GridSpec spec_;
  DType format_;
  std::set<std::string> targets_, done_;
  int64_t calibrationTokens_;
  llvm::StringMap<llvm::SmallVector<llm::WeightOp, 2>> ops_;
  double sumRelErr_ = 0, sumQuantSeconds_ = 0;
  int64_t quantized_ = 0, weightsQuantized_ = 0;
};

std::string shapeText(const std::vector<int64_t> &s);

} // namespace llmc::quant
