//===- dot_quant.cpp - Fused-dot dispatch and portable fallbacks -----------===//
// dotKernel picks the AVX2 kernel when dot_avx2.cpp provides one and falls
// back to a portable kernel: dequantize one block into a stack buffer with
// llmc::dequantizeRow, then dot it with each activation row.
//===----------------------------------------------------------------------===//
#include "dot_quant.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace llmc::kernels {

namespace {

template <int NX>
void scalarDot(DType t, const uint8_t *row, int64_t n, const float *x, int64_t ldx, float *out,
               int64_t ldo) {
  const DTypeInfo &info = dtypeInfo(t);
  // Float types convert in chunks; block types one block at a time.
  const int64_t step = info.block_size == 1 ? 64 : info.block_size;
  float buf[256];
  float acc[NX] = {};
  for (int64_t k = 0; k < n; k += step) {
    const int64_t len = k + step <= n ? step : n - k;
    dequantizeRow(t, row + (k / info.block_size) * info.block_bytes, buf, len);
    for (int j = 0; j < NX; ++j) {
      const float *xj = x + j * ldx + k;
      float s = 0;
      for (int64_t i = 0; i < len; ++i)
        s += buf[i] * xj[i];
      acc[j] += s;
    }
  }
  for (int j = 0; j < NX; ++j)
    out[j * ldo] = acc[j];
}

template <DType T, int NX>
void scalarDotFn(const uint8_t *row, int64_t n, const float *x, int64_t ldx, const float *, int64_t,
                 float *out, int64_t ldo) {
  scalarDot<NX>(T, row, n, x, ldx, out, ldo);
}

template <DType T> DotFn scalarFor(int nx) {
  switch (nx) {
  case 1:
    return scalarDotFn<T, 1>;
  case 2:
    return scalarDotFn<T, 2>;
  case 3:
    return scalarDotFn<T, 3>;
  case 4:
    return scalarDotFn<T, 4>;
  }
  return nullptr;
}

void checkRows(int nx) {
  if (nx < 1 || nx > kMaxDotRows)
    throw std::runtime_error("dot kernel: " + std::to_string(nx) + " activation rows (1.." +
                             std::to_string(kMaxDotRows) + " supported)");
}

} // namespace

bool dotNeedsSums(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K ||
         t == DType::Q5_K;
}

void groupSums(const float *x, int64_t n, float *sums) {
  for (int64_t g = 0; g * kSumGroup < n; ++g) {
    const float *p = x + g * kSumGroup;
    // Four partial sums: the compiler vectorizes this.
    float s[8] = {};
    for (int64_t i = 0; i < kSumGroup; i += 8)
      for (int l = 0; l < 8; ++l)
        s[l] += p[i + l];
    sums[g] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  }
}

bool hasFusedDot(DType t) {
  switch (t) {
  case DType::F32:
  case DType::F16:
  case DType::BF16:
  case DType::Q8_0:
  case DType::Q4_0:
  case DType::Q4_1:
  case DType::Q5_0:
  case DType::Q5_1:
  case DType::Q4_K:
  case DType::Q5_K:
  case DType::Q6_K:
    return true;
  default:
    return false;
  }
}

DotFn dotKernelScalar(DType t, int nx) {
  checkRows(nx);
  switch (t) {
  case DType::F32:
    return scalarFor<DType::F32>(nx);
  case DType::F16:
    return scalarFor<DType::F16>(nx);
  case DType::BF16:
    return scalarFor<DType::BF16>(nx);
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
  case DType::Q4_K:
    return scalarFor<DType::Q4_K>(nx);
  case DType::Q5_K:
    return scalarFor<DType::Q5_K>(nx);
  case DType::Q6_K:
    return scalarFor<DType::Q6_K>(nx);
  default:
    break;
  }
  throw std::runtime_error("dot kernel: no fused kernel for dtype id " +
                           std::to_string(uint32_t(t)));
}

DotFn dotKernel(DType t, int nx) {
  checkRows(nx);
  if (!hasFusedDot(t))
    return dotKernelScalar(t, nx); // throws the message
  if (DotFn f = detail::avx2DotKernel(t, nx))
    return f;
  return dotKernelScalar(t, nx);
}

bool haveSimdDot() { return detail::avx2DotKernel(DType::Q8_0, 1) != nullptr; }

void dequantRowFast(DType t, const uint8_t *src, float *dst, int64_t n) {
  if (!detail::avx2DequantRow(t, src, dst, n))
    dequantizeRow(t, src, dst, n);
}

} // namespace llmc::kernels
