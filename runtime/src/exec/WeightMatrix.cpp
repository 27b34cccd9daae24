//===- WeightMatrix.cpp - Row access to stored weights ---------------------===//
#include "WeightMatrix.h"

#include "../kernels/dot_quant.h"
#include "../kernels/rows8.h"
#include <cstring>
#include <vector>
#include <stdexcept>
#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace llmc {

float halfBitsToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400));
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {
/// Side data of one [rows, cols] matrix of t (matrix `index` of `count`).
const uint8_t *auxOf(const TensorView &t, const TensorView *aux, int64_t rows, int64_t cols,
                     int64_t index, int64_t count) {
  if (!needsAux(t.dtype))
    return nullptr;
  const int64_t per = auxBytes(t.dtype, rows, cols);
  if (!aux)
    throw std::runtime_error("weight '" + t.name + "' (" + std::string(dtypeName(t.dtype)) +
                             ") has no side data tensor '" + t.name + kAuxSuffix + "'");
  if (aux->nbytes != per * count)
    throw std::runtime_error("weight '" + t.name + "': side data '" + aux->name + "' has " +
                             std::to_string(aux->nbytes) + " bytes, expected " +
                             std::to_string(per * count));
  return static_cast<const uint8_t *>(aux->data) + index * per;
}
} // namespace

WeightMatrix WeightMatrix::of(const TensorView &t, const TensorView *aux) {
  WeightMatrix w;
  w.data = static_cast<const uint8_t *>(t.data);
  w.dtype = t.dtype;
  w.rows = t.rows();
  w.cols = t.cols();
  w.rowStride = rowBytes(t.dtype, w.cols);
  if (t.shape.size() == 3) // whole expert tensor: only valid without side data
    w.aux = needsAux(t.dtype) ? throw std::runtime_error("weight '" + t.name +
                                                         "': read it slab by slab")
                              : nullptr;
  else
    w.aux = auxOf(t, aux, w.rows, w.cols, 0, 1);
  return w;
}

WeightMatrix WeightMatrix::slab(const TensorView &t, int64_t index, const TensorView *aux) {
  if (t.shape.size() != 3 || index < 0 || index >= t.shape[0])
    throw std::runtime_error("weight '" + t.name + "': no slab " + std::to_string(index));
  WeightMatrix w;
  w.dtype = t.dtype;
  w.rows = t.shape[1];
  w.cols = t.shape[2];
  w.rowStride = rowBytes(t.dtype, w.cols);
  // A tensor stored packed only has no row-major data (the caller attaches
  // the slab's packed layout).
  w.data = t.data ? static_cast<const uint8_t *>(t.data) + index * w.rows * w.rowStride : nullptr;
  w.aux = auxOf(t, aux, w.rows, w.cols, index, t.shape[0]);
  return w;
}

void loadRow(const WeightMatrix &w, int64_t r, float *dst) {
  if (!w.data) { // stored packed only (kernels/rows8.h): unpack the row, then decode
    if (!w.rows8)
      throw std::runtime_error("weight matrix without data");
    thread_local std::vector<uint8_t> bytes;
    bytes.resize(size_t(rowBytes(w.rows8Type, w.cols)));
    const int64_t group = (r / kernels::kRows8) * kernels::rows8GroupBytes(w.rows8Type, w.cols);
    kernels::unpackRows8Row(w.rows8Type, w.rows8 + group, int(r % kernels::kRows8), w.cols,
                            bytes.data());
    kernels::dequantRowFast(w.rows8Type, bytes.data(), dst, w.cols); // exact, SIMD where it can
    return;
  }
  const uint8_t *src = w.row(r);
  const int64_t n = w.cols;
  switch (w.dtype) {
  case DType::F32:
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  case DType::F16: {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(src);
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
#endif
    for (; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, h + i, 2);
      dst[i] = halfBitsToFloat(v);
    }
    return;
  }
  case DType::BF16: {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      uint32_t u = uint32_t(v) << 16;
      std::memcpy(dst + i, &u, 4);
    }
    return;
  }
  default:
    if (w.aux)
      dequantizeRowAux(w.dtype, src, w.aux, r, w.rows, dst, n);
    else
      dequantizeRow(w.dtype, src, dst, n);
    return;
  }
}

} // namespace llmc
