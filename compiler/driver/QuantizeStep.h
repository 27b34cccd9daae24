//===- QuantizeStep.h - The llm-quantize pass of a --target-bpw pipeline -*- C++ -*-===//
// `llmc compile --target-bpw` keeps the user's pipeline and only appends
// per-weight widths to its one llm-quantize pass. This reads that pass's
// options the way MLIR parsed them (the pass prints its options; no second
// parser of the option syntax to drift from MLIR's), appends
// llm-quantize{method=rtn group=64} when the pipeline has none, rejects
// what cannot be planned, and re-prints the pipeline with extra
// `override` entries (after the user's: the pass takes the first match).
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc {

/// A --pipeline (or budget) that --target-bpw cannot plan: a usage error.
struct MixedPrecisionUsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct QuantizeStep {
  /// One user `override` entry GLOB:bits[:group].
  struct Override {
    std::string text, glob;
    int bits = 0;
    int64_t group = 0;
  };
  std::string pipeline; // anchored; the pass appended when the user had none
  std::string method;   // rtn, gptq, awq or osaq
  int bits = 4;
  int64_t group = 64;
  bool sym = false;
  std::vector<std::string> skip;
  std::vector<Override> overrides;
};

/// Throws MixedPrecisionUsageError for llm-quantize-rtn, more than one
/// llm-quantize (or one nested below the top level), a method other than
/// rtn/gptq/awq/osaq, or a malformed override entry; CompileError when the
/// pipeline does not parse.
QuantizeStep readQuantizeStep(const std::string &userPipeline);

/// The step's pipeline with `entries` (GLOB:bits[:group]) appended to its
/// llm-quantize pass's overrides, anchored, as MLIR prints it.
std::string withOverrides(const QuantizeStep &step, const std::vector<std::string> &entries);

} // namespace llmc
