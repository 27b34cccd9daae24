//===- qtea.cpp - QTEA rows: layout, dequantization, fused dots -----------===//
// PLACEHOLDER until the QTEA format lands (owned by the QTEA work).
//===----------------------------------------------------------------------===//
#include "family_rows.h"
#include <stdexcept>

namespace llmc::detail {
int64_t qteaAuxBytes(const QteaSpec &, int64_t, int64_t) { return 0; }
void qteaDequantRow(const QteaSpec &, const uint8_t *, const uint8_t *, int64_t, int64_t, float *,
                    int64_t) {
  throw std::runtime_error("qtea: not implemented yet");
}
} // namespace llmc::detail
namespace llmc::kernels {
void qteaDotRows(const QteaSpec &, const uint8_t *, const uint8_t *, int64_t, int64_t, int64_t,
                 const float *, int64_t, int, float *, int64_t) {
  throw std::runtime_error("qtea: not implemented yet");
}
} // namespace llmc::kernels
