//===- family_rows.h - Row code of the AAAC, QTEA and HBQ families -*- C++ -*-===//
// What dtype.cpp / families.cpp / Matmul need from each parametric family
// beyond its name and block geometry (families.cpp): side-data size,
// dequantization and fused dots. One file per family implements its part
// (aaac.cpp, qtea.cpp, hbq.cpp). Internal to the runtime.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <optional>
#include <string_view>

namespace llmc::detail {

/// Block geometry (one block = one group / L1 block of a row).
constexpr int64_t aaacBlockBytes(const AaacSpec &s) { return 2 + s.group * s.bits / 8; }
constexpr int64_t qteaBlockBytes(const QteaSpec &s) { return 4 + (s.group + 4) / 5; }
constexpr int64_t hbqBlockBytes(const HbqSpec &s) { return 3 + s.block * s.bits / 8; }

// AAAC (aaac.cpp)
int64_t aaacAuxBytes(const AaacSpec &s, int64_t rows, int64_t cols);
void aaacDequantRow(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, float *dst,
                    int64_t n);
// QTEA (qtea.cpp)
int64_t qteaAuxBytes(const QteaSpec &s, int64_t rows, int64_t cols);
void qteaDequantRow(const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
                    int64_t rows, float *dst, int64_t n);
// HBQ (hbq.cpp): no side data
void hbqDequantRow(const HbqSpec &s, const uint8_t *row, float *dst, int64_t n);

} // namespace llmc::detail

namespace llmc::kernels {

/// Most activation rows one family dot call handles.
inline constexpr int kMaxFamilyDotRows = 4;

/// out[j * ldo] = dot(row r of the matrix, x + j * ldx) for j < nx
/// (1..kMaxFamilyDotRows), over n elements; the fastest kernel this build has.
void aaacDotRows(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, int64_t n,
                 const float *x, int64_t ldx, int nx, float *out, int64_t ldo);
void qteaDotRows(const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
                 int64_t rows, int64_t n, const float *x, int64_t ldx, int nx, float *out,
                 int64_t ldo);
void hbqDotRows(const HbqSpec &s, const uint8_t *row, int64_t n, const float *x, int64_t ldx,
                int nx, float *out, int64_t ldo);

/// Whether t is one of the families above (AAAC, QTEA, HBQ).
bool isFamilyType(DType t);
/// Dispatch to the family's dot (aux ignored for HBQ).
void familyDotRows(DType t, const uint8_t *row, const uint8_t *aux, int64_t r, int64_t rows,
                   int64_t n, const float *x, int64_t ldx, int nx, float *out, int64_t ldo);

} // namespace llmc::kernels

namespace llmc::detail {
/// Block geometry of a family type (nullopt for other types).
struct FamilyGeometry {
  int64_t block_size, block_bytes;
};
std::optional<FamilyGeometry> familyGeometry(DType t);
/// Interned info of a family type, or nullptr for other types.
const DTypeInfo *familyInfo(DType t);
/// Parses "aaac4_g64", "qtea_g64_s5", "hbq4_b64" (lower case).
std::optional<DType> parseFamilyName(std::string_view lower);
} // namespace llmc::detail
