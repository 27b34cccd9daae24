//===- hbq.cpp - HBQ rows: layout, dequantization, fused dots -------------===//
// PLACEHOLDER until the HBQ format lands (owned by the HBQ work).
//===----------------------------------------------------------------------===//
#include "family_rows.h"
#include <stdexcept>

namespace llmc::detail {
void hbqDequantRow(const HbqSpec &, const uint8_t *, float *, int64_t) {
  throw std::runtime_error("hbq: not implemented yet");
}
} // namespace llmc::detail
namespace llmc::kernels {
void hbqDotRows(const HbqSpec &, const uint8_t *, int64_t, const float *, int64_t, int, float *,
                int64_t) {
  throw std::runtime_error("hbq: not implemented yet");
}
} // namespace llmc::kernels
