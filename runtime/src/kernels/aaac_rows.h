//===- aaac_rows.h - AAAC row helpers (internal) ---------------*- C++ -*-===//
// Shared by aaac.cpp (dequantization, fused dots) and aaac_pack.cpp
// (packing): argument checks, the codebook table of one matrix as floats,
// and the portable dot (exposed for tests). Layout: llmc/format/aaac.h.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"
#include "llmc/format/aaac.h"

#include <cstdint>
#include <string>

namespace llmc::detail {

/// "aaac4_g64" for {4, 64}.
std::string aaacName(const AaacSpec &s);
/// The spec of t; throws std::runtime_error (prefixed by `what`) otherwise.
AaacSpec requireAaac(DType t, const char *what);
/// Groups in a row of n; throws (prefixed by `what`, naming n and the group)
/// unless the group divides n.
int64_t aaacGroups(const AaacSpec &s, int64_t n, const char *what);

/// Both codebooks as floats: book[0] = A, book[1] = B, 16 slots each (the
/// entries beyond 2^bits are 0). 32-byte aligned for SIMD loads.
struct alignas(32) AaacTable {
  float book[2][16];
};
AaacTable aaacTable(const AaacSpec &s, const uint8_t *aux);

} // namespace llmc::detail

namespace llmc::kernels {

/// aaacDotRows with the portable kernel, whatever the build targets (tests).
void aaacDotRowsScalar(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, int64_t n,
                       const float *x, int64_t ldx, int nx, float *out, int64_t ldo);
/// Whether aaacDotRows uses SIMD kernels in this build.
bool haveSimdAaacDot();

} // namespace llmc::kernels
