//===- dtype.h - Element types of stored weights ---------------*- C++ -*-===//
// The one list of weight storage types llmc knows. Quantized types are
// block formats: `block_size` elements are packed into `block_bytes` bytes
// along a row (the innermost, input dimension), exactly as GGUF defines them.
// A row of n elements of type t takes row_bytes(t, n) bytes; n must be a
// multiple of the block size.
//
// Besides the closed list of GGUF formats (and U8, raw bytes) there are
// parametric families: AAAC codebook codes, QTEA ternary codes and HBQ
// hierarchical FP blocks (see the end of this file), and grouped integers ("gq<bits><s|a>_g<group>", e.g. gq4a_g64): `bits`-bit codes
// in groups of `group` weights sharing an fp16 scale (and, asymmetric, an
// fp16 minimum). Their DType values encode (bits, sym, group); see
// groupedIntDType() and llmc/format/grouped_int.h for the layout.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace llmc {

// The named enumerators are the GGUF formats; other values are grouped-integer
// types made by groupedIntDType() (switches on DType need a `default`).
enum class DType : uint32_t {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K,
  Q2_K,   // read from GGUF (llama.cpp's presets); no reference quantizer
  Q3_K,
  IQ4_NL, // 32-weight non-linear 4-bit (llama.cpp's fallback for 256-block i-quants)
  U8, // raw bytes: the side data ("<weight>.aux") of formats that need it
};

struct DTypeInfo {
  std::string_view name; // lower case, as printed in IR and manifests: "q4_1"
  int64_t block_size;    // elements per block (1 for float types)
  int64_t block_bytes;   // bytes per block
};

/// Name and block geometry of t. Throws std::runtime_error for a value that
/// is neither a named format nor a valid grouped-integer type. Thread-safe;
/// the returned reference (and its name) stays valid for the program's life.
const DTypeInfo &dtypeInfo(DType t);
/// Case-insensitive; also parses grouped-integer names ("gq4a_g64").
std::optional<DType> dtypeFromName(std::string_view name);
inline std::string_view dtypeName(DType t) { return dtypeInfo(t).name; }
/// Bytes of one row of n elements; n must be a multiple of the block size.
int64_t rowBytes(DType t, int64_t n);
/// Bits per weight, e.g. 5.0 for q4_1 (20 bytes per 32 weights).
double bitsPerWeight(DType t);

/// Dequantize n elements (n a multiple of the block size) starting at src.
void dequantizeRow(DType t, const void *src, float *dst, int64_t n);

/// Reference quantizer, the same rounding as ggml's reference code (and
/// gguf-py): n floats (n a multiple of the block size) -> n elements of type
/// t at dst. Supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
/// grouped-integer types (round to nearest, see llmc/format/grouped_int.h)
/// and HBQ (its mix table, llmc/format/hbq.h);
/// throws std::runtime_error for the K-quants. Meant for tests and tools.
void quantizeRowRef(DType t, const float *src, void *dst, int64_t n);

//===- Formats with side data ----------------------------------------------===//
// Some formats need data shared by a whole matrix besides its rows (AAAC's
// two codebooks, QTEA's per-column scales and salient-column residuals). It
// is stored as a companion U8 tensor named "<weight>.aux" holding
// auxBytes(t, rows, cols) bytes per matrix (a 3-D expert tensor [E, F, D]
// holds E of them back to back, expert e's at offset e * auxBytes(t, F, D)).

/// Whether matrices of type t carry side data.
bool needsAux(DType t);
/// Bytes of side data of one [rows, cols] matrix of type t (0 if none).
int64_t auxBytes(DType t, int64_t rows, int64_t cols);
/// Dequantize row r (of `rows`) of a matrix of type t: `row` is the row's
/// bytes, `aux` the matrix's side data (ignored when !needsAux(t)). Same as
/// dequantizeRow for types without side data.
void dequantizeRowAux(DType t, const void *row, const void *aux, int64_t r, int64_t rows,
                      float *dst, int64_t n);
/// Suffix of the companion tensor's name: ".aux".
inline constexpr const char *kAuxSuffix = ".aux";

//===- AAAC: 2^bits-entry codebooks, two per matrix (llmc/format/aaac.h) ---===//
struct AaacSpec {
  int bits;      // 2..4: codebooks of 2^bits entries
  int64_t group; // weights per fp16 scale: a multiple of 8 in [8, 4096]
  bool operator==(const AaacSpec &o) const { return bits == o.bits && group == o.group; }
};
/// "aaac<bits>_g<group>"; throws std::runtime_error on bad parameters.
DType aaacDType(int bits, int64_t group);
std::optional<AaacSpec> aaacSpec(DType t);

//===- QTEA: ternary codes + salient residuals (llmc/format/qtea.h) --------===//
struct QteaSpec {
  int64_t group;   // weights per (alpha, beta): a multiple of 8 in [8, 4096]
  int salientPct;  // salient columns: ceil(cols * salientPct / 100), 0..50
  bool operator==(const QteaSpec &o) const {
    return group == o.group && salientPct == o.salientPct;
  }
};
/// "qtea_g<group>_s<salientPct>"; throws std::runtime_error on bad parameters.
DType qteaDType(int64_t group, int salientPct);
std::optional<QteaSpec> qteaSpec(DType t);

//===- HBQ: hierarchical block FP (llmc/format/hbq.h) ----------------------===//
struct HbqSpec {
  int bits;      // element bits: 4 (E2M1), 3, 2
  int64_t block; // L1 block (one scale); L2 sub-blocks are block / 4
  bool operator==(const HbqSpec &o) const { return bits == o.bits && block == o.block; }
};
/// "hbq<bits>_b<block>"; block a multiple of 32 in [32, 4096]; throws
/// std::runtime_error on bad parameters.
DType hbqDType(int bits, int64_t block);
std::optional<HbqSpec> hbqSpec(DType t);

//===- Grouped integer weights (llmc/format/grouped_int.h) ----------------===//

struct GroupedIntSpec {
  int bits;      // 2..8 bits per code
  bool sym;      // symmetric: w = d*(q - 2^(bits-1)); asymmetric: w = d*q + m
  int64_t group; // weights per group: a multiple of 8 in [8, 4096]
  bool operator==(const GroupedIntSpec &o) const {
    return bits == o.bits && sym == o.sym && group == o.group;
  }
};

/// The grouped-integer DType for (bits, sym, group); throws
/// std::runtime_error naming the bad parameter when bits is outside 2..8 or
/// group is not a multiple of 8 in [8, 4096].
DType groupedIntDType(int bits, bool sym, int64_t group);
inline DType groupedIntDType(const GroupedIntSpec &s) {
  return groupedIntDType(s.bits, s.sym, s.group);
}
/// (bits, sym, group) of a grouped-integer type; nullopt for any other DType.
std::optional<GroupedIntSpec> groupedIntSpec(DType t);
inline bool isGroupedInt(DType t) { return groupedIntSpec(t).has_value(); }

/// Pack precomputed codes into a row of grouped-integer type t (for
/// quantizers that choose their own codes, like GPTQ). codes: n values, each
/// < 2^bits. scales / mins: one per group (n / group of them), stored rounded
/// to fp16 (see roundToHalf); mins is ignored for symmetric types and may be
/// null there. Throws std::runtime_error if t is not grouped, n is not a
/// multiple of the group, a code is out of range or mins is null when needed.
void packGroupedRow(DType t, const uint8_t *codes, const float *scales, const float *mins,
                    void *dst, int64_t n);
/// Inverse of packGroupedRow: codes (n), scales and mins (n / group each, as
/// stored, i.e. fp16 values). mins may be null (it is never written for
/// symmetric types).
void unpackGroupedRow(DType t, const void *src, uint8_t *codes, float *scales, float *mins,
                      int64_t n);

/// The float nearest to f that fp16 can hold (what a stored scale becomes).
float roundToHalf(float f);

/// IEEE half / bfloat16 conversion helpers (bit exact, round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
inline float bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t floatToBf16(float f);

} // namespace llmc
