//===- QuantizeQtea.cpp - llm-quantize method=qtea -------------------------===//
// PLACEHOLDER until the Qtea method lands.
//===----------------------------------------------------------------------===//
#include "passes/quant/FamilyMethods.h"
#include <stdexcept>

namespace llmc::quant {
void qteaBlock(QuantizeContext &, std::vector<std::unique_ptr<CalibrationSite>> &,
               const QteaPassOptions &, int64_t) {
  throw std::runtime_error("qtea: not implemented yet");
}
void qteaRemaining(QuantizeContext &, const QteaPassOptions &) {
  throw std::runtime_error("qtea: not implemented yet");
}
} // namespace llmc::quant
