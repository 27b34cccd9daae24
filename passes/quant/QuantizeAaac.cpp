//===- QuantizeAaac.cpp - llm-quantize method=aaac -------------------------===//
// PLACEHOLDER until the Aaac method lands.
//===----------------------------------------------------------------------===//
#include "passes/quant/FamilyMethods.h"
#include <stdexcept>

namespace llmc::quant {
void aaacBlock(QuantizeContext &, std::vector<std::unique_ptr<CalibrationSite>> &,
               const AaacPassOptions &, int64_t) {
  throw std::runtime_error("aaac: not implemented yet");
}
void aaacRemaining(QuantizeContext &, const AaacPassOptions &) {
  throw std::runtime_error("aaac: not implemented yet");
}
} // namespace llmc::quant
