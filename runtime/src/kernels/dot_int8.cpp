//===- dot_int8.cpp - Int8 activation quantizer, portable dots, dispatch --===//
// The portable kernels decode each weight block to its integers, take the
// integer dot with the activation block and apply the scales as the AVX2
// kernels do (dw * dx * dot, plus m * s for formats with a minimum).
//===----------------------------------------------------------------------===//
#include "dot_int8.h"
#include "llmc/format/q4_0.h"
#include "llmc/format/q4_1.h"
#include "llmc/format/q5_0.h"
#include "llmc/format/q5_1.h"
#include "llmc/format/q8_0.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace llmc::kernels {

namespace {

uint16_t u16At(const uint8_t *p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

/// The integers of one weight block, its scale and minimum (0 if none).
/// Returns the block's byte size.
int64_t blockInts(DType t, const uint8_t *p, int32_t v[32], float &d, float &m) {
  m = 0.0f;
  switch (t) {
  case DType::Q8_0: {
    d = halfToFloat(u16At(p + offsetof(BlockQ8_0, d)));
    const auto *qs = reinterpret_cast<const int8_t *>(p + offsetof(BlockQ8_0, qs));
    for (int j = 0; j < 32; ++j)
      v[j] = qs[j];
    return sizeof(BlockQ8_0);
  }
  case DType::Q4_0:
  case DType::Q4_1: {
    const bool min = t == DType::Q4_1;
    const int64_t qsOff = min ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
    d = halfToFloat(u16At(p)); // d is first in both
    if (min)
      m = halfToFloat(u16At(p + offsetof(BlockQ4_1, m)));
    const int off = min ? 0 : 8;
    for (int j = 0; j < 16; ++j) {
      v[j] = int(p[qsOff + j] & 0x0F) - off;
      v[j + 16] = int(p[qsOff + j] >> 4) - off;
    }
    return min ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0);
  }
  case DType::Q5_0:
  case DType::Q5_1: {
    const bool min = t == DType::Q5_1;
    const int64_t qhOff = min ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh);
    const int64_t qsOff = min ? offsetof(BlockQ5_1, qs) : offsetof(BlockQ5_0, qs);
    d = halfToFloat(u16At(p));
    if (min)
      m = halfToFloat(u16At(p + offsetof(BlockQ5_1, m)));
    uint32_t qh;
    std::memcpy(&qh, p + qhOff, 4);
    const int off = min ? 0 : 16;
    for (int j = 0; j < 16; ++j) {
      v[j] = (int(p[qsOff + j] & 0x0F) | int(((qh >> j) & 1u) << 4)) - off;
      v[j + 16] = (int(p[qsOff + j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4)) - off;
    }
    return min ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
  }
  default:
    throw std::runtime_error("int8 dot: unsupported dtype");
  }
}

template <DType T, int NX>
void scalarInt8Dot(const uint8_t *row, int64_t n, const int8_t *xq, const float *xd,
                   const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  float acc[NX] = {};
  int32_t v[32];
  for (int64_t b = 0; b < n / kInt8Block; ++b) {
    float d, m;
    row += blockInts(T, row, v, d, m);
    for (int j = 0; j < NX; ++j) {
      const int8_t *q = xq + j * ldq + b * kInt8Block;
      int32_t s = 0;
      for (int k = 0; k < 32; ++k)
        s += v[k] * int32_t(q[k]);
      acc[j] += d * xd[j * ldd + b] * float(s) + m * xs[j * ldd + b];
    }
  }
  for (int j = 0; j < NX; ++j)
    out[j * ldo] = acc[j];
}

template <DType T> Int8DotFn scalarFor(int nx) {
  switch (nx) {
  case 1:
    return scalarInt8Dot<T, 1>;
  case 2:
    return scalarInt8Dot<T, 2>;
  case 3:
    return scalarInt8Dot<T, 3>;
  case 4:
    return scalarInt8Dot<T, 4>;
  }
  return nullptr;
}

void checkRows(int nx) {
  if (nx < 1 || nx > kMaxInt8Rows)
    throw std::runtime_error("int8 dot kernel: " + std::to_string(nx) + " activation rows (1.." +
                             std::to_string(kMaxInt8Rows) + " supported)");
}

} // namespace

void quantizeRowInt8(const float *x, int64_t n, int8_t *q, float *d, float *s) {
  if (detail::avx2QuantizeRowInt8(x, n, q, d, s))
    return;
  // Same arithmetic as the AVX2 quantizer: d = amax / 127, q = rint(x * (1 / d)).
  for (int64_t b = 0; b < n / kInt8Block; ++b) {
    const float *xb = x + b * kInt8Block;
    float amax = 0.0f;
    for (int64_t k = 0; k < kInt8Block; ++k)
      amax = std::fmax(amax, std::fabs(xb[k]));
    const float db = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int64_t k = 0; k < kInt8Block; ++k) {
      const int32_t v = int32_t(std::nearbyint(xb[k] * id));
      q[b * kInt8Block + k] = int8_t(v);
      sum += v;
    }
    d[b] = db;
    s[b] = db * float(sum);
  }
}

bool hasInt8Dot(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
         t == DType::Q5_1;
}

Int8DotFn int8DotKernelScalar(DType t, int nx) {
  checkRows(nx);
  switch (t) {
  case DType::Q8_0:
    return scalarFor<DType::Q8_0>(nx);
  case DType::Q4_0:
    return scalarFor<DType::Q4_0>(nx);
  case DType::Q4_1:
    return scalarFor<DType::Q4_1>(nx);
  case DType::Q5_0:
    return scalarFor<DType::Q5_0>(nx);
  case DType::Q5_1:
    return scalarFor<DType::Q5_1>(nx);
  default:
    break;
  }
  throw std::runtime_error("int8 dot kernel: no kernel for dtype " +
                           std::string(dtypeInfo(t).name));
}

Int8DotFn int8DotKernel(DType t, int nx) {
  Int8DotFn scalar = int8DotKernelScalar(t, nx); // validates t and nx
  if (Int8DotFn f = detail::avx2Int8DotKernel(t, nx))
    return f;
  return scalar;
}

} // namespace llmc::kernels
