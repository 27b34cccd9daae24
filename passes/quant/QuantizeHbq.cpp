//===- QuantizeHbq.cpp - llm-quantize method=hbq -------------------------===//
// PLACEHOLDER until the Hbq method lands.
//===----------------------------------------------------------------------===//
#include "passes/quant/FamilyMethods.h"
#include <stdexcept>

namespace llmc::quant {
void hbqAll(QuantizeContext &, const HbqPassOptions &) {
  throw std::runtime_error("hbq: not implemented yet");
}
} // namespace llmc::quant
