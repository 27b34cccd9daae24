//===- dtype.h - Element types of stored weights ---------------*- C++ -*-===//
// The one list of weight storage types llmc knows. Quantized types are
// block formats: `block_size` elements are packed into `block_bytes` bytes
// along a row (the innermost, input dimension), exactly as GGUF defines them.
// A row of n elements of type t takes row_bytes(t, n) bytes; n must be a
// multiple of the block size.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace llmc {

enum class DType : uint8_t {
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
};

struct DTypeInfo {
  std::string_view name; // lower case, as printed in IR and manifests: "q4_1"
  int64_t block_size;    // elements per block (1 for float types)
  int64_t block_bytes;   // bytes per block
};

const DTypeInfo &dtypeInfo(DType t);
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
/// t at dst. Supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1; throws
/// std::runtime_error for the K-quants. Meant for tests and tools, not speed.
void quantizeRowRef(DType t, const float *src, void *dst, int64_t n);

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
