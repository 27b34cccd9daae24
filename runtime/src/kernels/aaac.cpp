//===- aaac.cpp - AAAC rows: layout, dequantization, fused dots -----------===//
// PLACEHOLDER until the AAAC format lands (owned by the AAAC work).
//===----------------------------------------------------------------------===//
#include "family_rows.h"
#include <stdexcept>

namespace llmc::detail {
int64_t aaacAuxBytes(const AaacSpec &s, int64_t, int64_t) { return 2 * (int64_t(1) << s.bits) * 2; }
void aaacDequantRow(const AaacSpec &, const uint8_t *, const uint8_t *, float *, int64_t) {
  throw std::runtime_error("aaac: not implemented yet");
}
} // namespace llmc::detail
namespace llmc::kernels {
void aaacDotRows(const AaacSpec &, const uint8_t *, const uint8_t *, int64_t, const float *,
                 int64_t, int, float *, int64_t) {
  throw std::runtime_error("aaac: not implemented yet");
}
} // namespace llmc::kernels
