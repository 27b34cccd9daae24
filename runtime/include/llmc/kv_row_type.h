//===- llmc/kv_row_type.h - The element type of KV cache rows ---*- C++ -*-===//
#pragma once
#include <cstdint>

namespace llmc {

/// The element type of a paged KV pool's rows: f32; IEEE f16 (half the
/// bytes per entry; each key and value rounded to nearest on append); or
/// Q8 (the q8_0 layout per row: one IEEE f16 scale per 32 elements, the
/// row's scales first, then one int8 code per element, code = round(x /
/// scale), scale = max|x| / 127 over the 32; about a quarter of f32's
/// bytes; head_dim must be a multiple of 32).
enum class KvRowType : uint8_t { F32, F16, Q8 };

/// Elements per Q8 scale.
constexpr int64_t kKvQ8Group = 32;

/// Bytes of one key or value row of `head_dim` elements (head_dim a
/// multiple of kKvQ8Group for Q8).
inline int64_t kvRowBytes(KvRowType t, int64_t head_dim) {
  switch (t) {
  case KvRowType::F16:
    return 2 * head_dim;
  case KvRowType::Q8:
    return head_dim + 2 * (head_dim / kKvQ8Group);
  case KvRowType::F32:
    break;
  }
  return 4 * head_dim;
}

/// The --kv-type spelling: "f32", "f16", "q8_0".
inline const char *kvRowTypeName(KvRowType t) {
  return t == KvRowType::F16 ? "f16" : t == KvRowType::Q8 ? "q8_0" : "f32";
}

} // namespace llmc
