//===- MixedPrecision.h - llmc compile --target-bpw -------------*- C++ -*-===//
// Mixed precision under a size budget: the user's pipeline keeps its one
// llm-quantize pass (method, group, sym, skip, overrides; none: rtn g64) and
// this plan only decides each free matrix weight's width, written as that
// pass's `override=NAME:bits` entries after the user's own (first match
// wins, so the user's overrides and skips stay and count against the budget).
//
// Sensitivity: each free weight alone is rounded (RTN) to a probe width in
// the source model and the mean KL divergence of the logits from the
// unquantized model is measured on a short window of the calibration text
// (one forward per weight, the other weights untouched). Other widths are
// predicted from the RTN weight error energy (quant::predictKld), and the
// widths are chosen by quant::allocateBits with exact byte costs
// (llmc::rowBytes), bits per weight counted over every matrix weight,
// scales and minimums included.
//
// Calibrated methods change which weights matter (AWQ removes most of the
// error of weights behind outlier channels, where RTN is worst): the method
// is run uniformly at the probe width, and each weight's RTN sensitivity at
// that width and wider is scaled by the method's output error energy over
// RTN's (llm-quantize's out_rel_err against RTN's on the probe window's
// inputs). For AWQ, the weights its scales couple (q,k,v,o;
// gate,up,down) share one width, since llm-quantize scales a site only
// when all its weights have one grid.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/driver/Compile.h"
#include "compiler/driver/QuantizeStep.h"
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc {

struct MixedPrecisionOptions {
  double targetBpw = 0;
  /// The user's --pipeline: at most one llm-quantize pass, of a grouped
  /// integer method (rtn, gptq, awq, osaq).
  std::string pipeline;
  /// Text (or .ids token file) the probes run on; empty: the default
  /// calibration text.
  std::string calibPath;
  int64_t probeTokens = 64;
  int probeBits = 3;
  std::vector<int> candidates = {2, 3, 4, 5, 6, 8};
  /// Diagnostics: also measure this many weights (evenly spaced) at every
  /// candidate width and record measured vs predicted KLD.
  int validate = 0;
  int threads = 0; // executor threads for the probes (0: all cores)
  std::function<void(const std::string &)> progress;
};

struct MixedPrecisionPlan {
  /// The pipeline to compile: the user's with the chosen widths appended
  /// to the llm-quantize pass's overrides (anchored, as MLIR prints it).
  std::string pipeline;
  /// For manifest["mixed_precision"]: target, planned bytes and bits per
  /// weight, probe settings, per-weight widths, predicted KLD, histogram.
  nlohmann::json record;
  std::string summary; // one line: histogram, predicted KLD, bits per weight
};

/// Throws MixedPrecisionUsageError (a pipeline readQuantizeStep rejects, a
/// budget below the narrowest plan), CompileError (the pipeline does not
/// parse) or std::runtime_error (a free weight whose rows are not whole
/// groups, an unreadable calibration text, a model that cannot run).
MixedPrecisionPlan planMixedPrecision(mlir::MLIRContext &ctx, const SourceModel &src,
                                      const MixedPrecisionOptions &opts);

/// Bits per weight over the compiled model's matrix weights (rank >= 2;
/// side data "<weight>.aux" counted with its weight).
double matrixBitsPerWeight(const CompiledModel &cm);

} // namespace llmc
