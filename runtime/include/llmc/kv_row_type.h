//===- llmc/kv_row_type.h - The element type of KV cache rows ---*- C++ -*-===//
#pragma once
#include <cstdint>

namespace llmc {

/// The element type of a paged KV pool's rows: f32, or IEEE f16 (half the
/// bytes per entry; each key and value rounded to nearest on append).
enum class KvRowType : uint8_t { F32, F16 };
inline int64_t kvRowTypeBytes(KvRowType t) { return t == KvRowType::F16 ? 2 : 4; }

} // namespace llmc
