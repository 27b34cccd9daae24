//===- kv_q8_row.h - Q8 KV rows: int8 codes, one f16 scale per 32 -*- C++ -*-===//
// A KV row of n floats (n a multiple of kKvQ8Group) in the q8_0 layout of
// llmc/kv_row_type.h: the n / 32 IEEE f16 scales first, then n int8 codes.
// Per group of 32: scale = f16(max |x| / 127) (0 for an all-zero group),
// code = round(x / scale) (to nearest, ties away from zero), clamped to
// [-127, 127]. Reading back gives float(code) * float(scale), which is
// exact in f32 (at most 7 + 11 significant bits), so every reader of a row
// sees the same floats.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc::kernels {

/// Encodes src[0, n) into dst (kvRowBytes(Q8, n) bytes). Non-finite
/// values in a group make its scale non-finite (the row reads back as NaN),
/// like an f16 row overflowing to infinity.
void q8Row(const float *src, int64_t n, unsigned char *dst);
/// Decodes a row of n elements written by q8Row.
void floatRowQ8(const unsigned char *src, int64_t n, float *dst);

} // namespace llmc::kernels
