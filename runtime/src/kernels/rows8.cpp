//===- rows8.cpp - Eight-row interleaving, portable kernels, dispatch -----===//
// The portable kernels follow the AVX2 ones operation for operation (exact
// integer dots, then the same float multiply-adds in the same order), so
// both give the same bits.
//===----------------------------------------------------------------------===//
#include "rows8.h"
#include "llmc/format/grouped_int.h"
#include "llmc/format/k_scales.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc::kernels {

namespace {

struct Geometry {
  int64_t srcBlock;  // source bytes per 32 weights
  int64_t scales;    // fp16 values per row and block in the source (1 or 2)
  int64_t quant;     // quant bytes per row and block
  int64_t high = 0;  // bytes of fifth bits per row and block (Q5_0/Q5_1: 4)
};

Geometry geometry(DType t) {
  switch (t) {
  case DType::Q4_0:
    return {18, 1, 16};
  case DType::Q4_1:
    return {20, 2, 16};
  case DType::Q8_0:
    return {34, 1, 32};
  case DType::Q5_0:
    return {22, 1, 16, 4};
  case DType::Q5_1:
    return {24, 2, 16, 4};
  default:
    throw std::runtime_error("rows8: no eight-row layout for dtype " +
                             std::string(dtypeInfo(t).name));
  }
}

float half(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return halfToFloat(h);
}

template <DType T, int NX>
void scalarRows8(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd,
                 const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  const Geometry g = geometry(T);
  const int64_t highAt = 16 * g.scales, quantAt = highAt + 8 * g.high,
                blockBytes = kRows8 * g.srcBlock;
  float acc[NX][8] = {}, side[NX][8] = {};
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t *p = group + b * blockBytes;
    for (int r = 0; r < 8; ++r) {
      int32_t w[32];
      uint32_t qh = 0; // Q5_0/Q5_1: bit j is weight j's fifth bit
      if (g.high)
        std::memcpy(&qh, p + highAt + 4 * r, 4);
      for (int64_t s = 0; s < g.quant / 4; ++s)
        for (int k = 0; k < 4; ++k) {
          const uint8_t byte = p[quantAt + s * 32 + r * 4 + k];
          if (T == DType::Q8_0) {
            w[4 * s + k] = int8_t(byte);
          } else {
            const int j = int(4 * s + k);
            w[j] = (byte & 0x0F) | int32_t((qh >> j) & 1) << 4;
            w[16 + j] = (byte >> 4) | int32_t((qh >> (16 + j)) & 1) << 4;
          }
        }
      const float d = half(p + 2 * r);
      for (int j = 0; j < NX; ++j) {
        const int8_t *q = xq + j * ldq + b * 32;
        int32_t isum = 0;
        for (int k = 0; k < 32; ++k)
          isum += w[k] * int32_t(q[k]);
        acc[j][r] = std::fma(float(isum), d * xd[j * ldd + b], acc[j][r]);
        if (T == DType::Q4_0 || T == DType::Q5_0)
          side[j][r] = std::fma(d, xs[j * ldd + b], side[j][r]);
        else if (T == DType::Q4_1 || T == DType::Q5_1)
          side[j][r] = std::fma(half(p + 16 + 2 * r), xs[j * ldd + b], side[j][r]);
      }
    }
  }
  for (int j = 0; j < NX; ++j)
    for (int r = 0; r < 8; ++r)
      out[j * ldo + r] = T == DType::Q4_0   ? std::fma(-8.0f, side[j][r], acc[j][r])
                         : T == DType::Q5_0 ? std::fma(-16.0f, side[j][r], acc[j][r])
                         : T == DType::Q4_1 || T == DType::Q5_1 ? acc[j][r] + side[j][r]
                                                                : acc[j][r];
}

/// Q4_K: per 8-row group and 256-weight super-block (kQ4KGroupBytes):
///   d[8] (fp16) | dmin[8] (fp16) | sc[j][r] (u8, 8 sub-blocks x 8 rows) |
///   m[j][r] (u8) | for chunk c in 0..3, s in 0..7, r in 0..7: qs_r[32c+4s..+3]
/// Sub-block j = 2c + h is the low (h 0) or high (h 1) nibbles of chunk c.
constexpr int64_t kQ4KGroupBytes = 16 + 16 + 64 + 64 + 1024;

template <int NX>
void scalarRows8Q4K(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd,
                    const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  float acc[NX][8] = {}, side[NX][8] = {};
  for (int64_t sb = 0; sb < cols / 256; ++sb) {
    const uint8_t *p = group + sb * kQ4KGroupBytes;
    for (int r = 0; r < 8; ++r) {
      const float d = half(p + 2 * r), dmin = half(p + 16 + 2 * r);
      for (int c = 0; c < 4; ++c)
        for (int j = 0; j < NX; ++j)
          for (int h = 0; h < 2; ++h) {
            const int sub = 2 * c + h;
            const int64_t b = sb * 8 + sub; // activation block
            const int8_t *q = xq + j * ldq + b * 32;
            int32_t isum = 0;
            for (int s = 0; s < 8; ++s)
              for (int k = 0; k < 4; ++k) {
                const uint8_t byte = p[160 + c * 256 + s * 32 + r * 4 + k];
                isum += int32_t(h ? byte >> 4 : byte & 0x0F) * int32_t(q[4 * s + k]);
              }
            const int32_t sc = p[32 + 8 * sub + r], mn = p[96 + 8 * sub + r];
            acc[j][r] = std::fma(float(isum * sc), d * xd[j * ldd + b], acc[j][r]);
            side[j][r] = std::fma(dmin * float(mn), xs[j * ldd + b], side[j][r]);
          }
    }
  }
  for (int j = 0; j < NX; ++j)
    for (int r = 0; r < 8; ++r)
      out[j * ldo + r] = acc[j][r] - side[j][r];
}

void packQ4K(const uint8_t *src, int64_t rowStride, int64_t rows, int64_t nsb, uint8_t *dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += kRows8)
    for (int64_t sb = 0; sb < nsb; ++sb, dst += kQ4KGroupBytes)
      for (int r = 0; r < kRows8; ++r) {
        const uint8_t *blk = src + (r0 + r) * rowStride + sb * 144;
        std::memcpy(dst + 2 * r, blk, 2);          // d
        std::memcpy(dst + 16 + 2 * r, blk + 2, 2); // dmin
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          unpackKScaleMin(blk + 4, j, sc, mn);
          dst[32 + 8 * j + r] = sc;
          dst[96 + 8 * j + r] = mn;
        }
        const uint8_t *qs = blk + 16;
        for (int c = 0; c < 4; ++c)
          for (int s = 0; s < 8; ++s)
            std::memcpy(dst + 160 + c * 256 + s * 32 + r * 4, qs + 32 * c + 4 * s, 4);
      }
}

template <int NX> Rows8DotFn q4kFor() { return scalarRows8Q4K<NX>; }

template <DType T> Rows8DotFn scalarFor(int nx) {
  switch (nx) {
  case 1:
    return scalarRows8<T, 1>;
  case 2:
    return scalarRows8<T, 2>;
  case 3:
    return scalarRows8<T, 3>;
  case 4:
    return scalarRows8<T, 4>;
  }
  throw std::runtime_error("rows8 kernel: " + std::to_string(nx) +
                           " activation rows (1..4 supported)");
}

} // namespace

std::optional<DType> rows8Layout(DType t) {
  if (t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0 || t == DType::Q5_0 ||
      t == DType::Q5_1 || t == DType::Q4_K)
    return t;
  const std::optional<GroupedIntSpec> g = groupedIntSpec(t);
  if (!g || g->group % 32 != 0)
    return std::nullopt;
  if (g->bits == 4)
    return g->sym ? DType::Q4_0 : DType::Q4_1;
  if (g->bits == 8 && g->sym)
    return DType::Q8_0;
  return std::nullopt;
}

int64_t rows8GroupBytes(DType t, int64_t cols) {
  if (t == DType::Q4_K)
    return (cols / 256) * kQ4KGroupBytes;
  return kRows8 * (cols / 32) * geometry(t).srcBlock;
}

namespace {
/// The interleave with the block geometry as constants (the copies become
/// plain 2- and 4-byte moves).
template <int kSrcBlock, int kScales, int kQuant, int kHigh = 0>
void packAs(const uint8_t *src, int64_t rowStride, int64_t rows, int64_t nb, uint8_t *dst) {
  constexpr int kHighAt = 16 * kScales, kQuantAt = kHighAt + 8 * kHigh;
  for (int64_t r0 = 0; r0 < rows; r0 += kRows8)
    for (int64_t b = 0; b < nb; ++b, dst += kRows8 * kSrcBlock)
      for (int r = 0; r < kRows8; ++r) {
        const uint8_t *blk = src + (r0 + r) * rowStride + b * kSrcBlock;
        for (int h = 0; h < kScales; ++h) // d then m, fp16 each, first in the block
          std::memcpy(dst + 16 * h + 2 * r, blk + 2 * h, 2);
        if (kHigh) // Q5_0/Q5_1: the 32 fifth bits follow the scales
          std::memcpy(dst + kHighAt + kHigh * r, blk + 2 * kScales, kHigh);
        const uint8_t *qs = blk + 2 * kScales + kHigh;
        for (int s = 0; s < kQuant / 4; ++s)
          std::memcpy(dst + kQuantAt + s * 32 + r * 4, qs + 4 * s, 4);
      }
}

/// Grouped integers: each 32-weight block of a row rewritten as the layout's
/// source block (fp16 d [, m], then Q4_0/Q4_1 nibbles or Q8_0 bytes), then
/// interleaved like those.
void packGrouped(const GroupedIntSpec &g, DType layout, const uint8_t *src, int64_t rowStride,
                 int64_t rows, int64_t cols, uint8_t *dst) {
  const Geometry geo = geometry(layout);
  const int64_t nb = cols / 32, blockBytes = groupedIntBlockBytes(g.bits, g.sym, g.group);
  const int codesAt = g.sym ? 2 : 4;
  std::vector<uint8_t> rowBlocks(size_t(kRows8 * nb * geo.srcBlock));
  for (int64_t r0 = 0; r0 < rows; r0 += kRows8) {
    for (int r = 0; r < kRows8; ++r) {
      const uint8_t *row = src + (r0 + r) * rowStride;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *grp = row + (b * 32 / g.group) * blockBytes;
        const int64_t first = (b * 32) % g.group; // this block's first code in its group
        uint8_t *out = rowBlocks.data() + (r * nb + b) * geo.srcBlock;
        std::memcpy(out, grp, size_t(2 * geo.scales)); // d (and m) as stored
        uint8_t *qs = out + 2 * geo.scales;
        for (int k = 0; k < 32; ++k) {
          const int64_t j = first + k;
          const uint8_t code = g.bits == 8 ? grp[codesAt + j]
                                           : uint8_t((grp[codesAt + j / 2] >> (4 * (j & 1))) & 15);
          if (layout == DType::Q8_0)
            qs[k] = uint8_t(int(code) - 128);
          else if (k < 16)
            qs[k] = code; // low nibble: weight k
          else
            qs[k - 16] = uint8_t(qs[k - 16] | (code << 4)); // high nibble: weight k
        }
      }
    }
    // The 8 rewritten rows in the layout's own packing.
    packRows8(layout, rowBlocks.data(), nb * geo.srcBlock, kRows8, cols,
              dst + (r0 / kRows8) * kRows8 * nb * geo.srcBlock);
  }
}

} // namespace

void packRows8(DType t, const uint8_t *src, int64_t rowStride, int64_t rows, int64_t cols,
               uint8_t *dst) {
  const std::optional<DType> layout = rows8Layout(t);
  if (!layout)
    geometry(t); // throws the message
  if (rows % kRows8 != 0 || cols % 32 != 0)
    throw std::runtime_error("rows8: rows must be a multiple of 8 and columns of 32");
  if (t == DType::Q4_K) {
    if (cols % 256 != 0)
      throw std::runtime_error("rows8: q4_K columns must be a multiple of 256");
    packQ4K(src, rowStride, rows, cols / 256, dst);
    return;
  }
  if (*layout != t) {
    packGrouped(*groupedIntSpec(t), *layout, src, rowStride, rows, cols, dst);
    return;
  }
  const int64_t nb = cols / 32;
  if (t == DType::Q4_0)
    packAs<18, 1, 16>(src, rowStride, rows, nb, dst);
  else if (t == DType::Q4_1)
    packAs<20, 2, 16>(src, rowStride, rows, nb, dst);
  else if (t == DType::Q5_0)
    packAs<22, 1, 16, 4>(src, rowStride, rows, nb, dst);
  else if (t == DType::Q5_1)
    packAs<24, 2, 16, 4>(src, rowStride, rows, nb, dst);
  else
    packAs<34, 1, 32>(src, rowStride, rows, nb, dst);
}

Rows8DotFn rows8DotKernelScalar(DType t, int nx) {
  switch (t) {
  case DType::Q4_0:
    return scalarFor<DType::Q4_0>(nx);
  case DType::Q4_1:
    return scalarFor<DType::Q4_1>(nx);
  case DType::Q8_0:
    return scalarFor<DType::Q8_0>(nx);
  case DType::Q5_0:
    return scalarFor<DType::Q5_0>(nx);
  case DType::Q5_1:
    return scalarFor<DType::Q5_1>(nx);
  case DType::Q4_K:
    switch (nx) {
    case 1:
      return q4kFor<1>();
    case 2:
      return q4kFor<2>();
    case 3:
      return q4kFor<3>();
    case 4:
      return q4kFor<4>();
    }
    throw std::runtime_error("rows8 kernel: " + std::to_string(nx) +
                             " activation rows (1..4 supported)");
  default:
    geometry(t); // throws the message
    return nullptr;
  }
}

namespace {
/// Row r of a Q4_K eight-row group (packQ4K) back in Q4_K's own bytes: the
/// unpacked 6-bit scales and mins are packed into their 12 bytes again.
void unpackQ4KRow(const uint8_t *group, int r, int64_t cols, uint8_t *row) {
  for (int64_t sb = 0; sb < cols / 256; ++sb) {
    const uint8_t *g = group + sb * kQ4KGroupBytes;
    uint8_t *blk = row + sb * 144;
    std::memcpy(blk, g + 2 * r, 2);           // d
    std::memcpy(blk + 2, g + 16 + 2 * r, 2);  // dmin
    uint8_t *k = blk + 4;                     // 12 bytes of 6-bit scales and mins
    std::memset(k, 0, 12);
    for (int j = 0; j < 8; ++j) {
      const uint8_t sc = g[32 + 8 * j + r], mn = g[96 + 8 * j + r];
      if (j < 4) {
        k[j] |= uint8_t(sc & 63);
        k[4 + j] |= uint8_t(mn & 63);
      } else {
        k[8 + j - 4] = uint8_t((sc & 15) | ((mn & 15) << 4));
        k[j - 4] |= uint8_t((sc >> 4) << 6);
        k[j] |= uint8_t((mn >> 4) << 6);
      }
    }
    for (int c = 0; c < 4; ++c)
      for (int s = 0; s < 8; ++s)
        std::memcpy(blk + 16 + 32 * c + 4 * s, g + 160 + c * 256 + s * 32 + r * 4, 4);
  }
}
} // namespace

void unpackRows8Row(DType t, const uint8_t *group, int r, int64_t cols, uint8_t *row) {
  if (t == DType::Q4_K) {
    if (r < 0 || r >= kRows8 || cols % 256 != 0)
      throw std::runtime_error("rows8: bad row or width to unpack");
    unpackQ4KRow(group, r, cols, row);
    return;
  }
  int scales = 1, quant = 16, high = 0, srcBlock = 18;
  switch (t) {
  case DType::Q4_0:
    break;
  case DType::Q4_1:
    scales = 2, srcBlock = 20;
    break;
  case DType::Q5_0:
    high = 4, srcBlock = 22;
    break;
  case DType::Q5_1:
    scales = 2, high = 4, srcBlock = 24;
    break;
  case DType::Q8_0:
    quant = 32, srcBlock = 34;
    break;
  default:
    throw std::runtime_error("rows8: no row unpacking for " + std::string(dtypeName(t)));
  }
  if (r < 0 || r >= kRows8 || cols % 32 != 0)
    throw std::runtime_error("rows8: bad row or width to unpack");
  const int highAt = 16 * scales, quantAt = highAt + 8 * high;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t *g = group + b * kRows8 * srcBlock;
    uint8_t *blk = row + b * srcBlock;
    for (int h = 0; h < scales; ++h)
      std::memcpy(blk + 2 * h, g + 16 * h + 2 * r, 2);
    if (high)
      std::memcpy(blk + 2 * scales, g + highAt + high * r, size_t(high));
    uint8_t *qs = blk + 2 * scales + high;
    for (int s = 0; s < quant / 4; ++s)
      std::memcpy(qs + 4 * s, g + quantAt + s * 32 + r * 4, 4);
  }
}

bool hasFastRows8Kernel(DType t) { return detail::avx2Rows8DotKernel(t, 1) != nullptr; }

Rows8DotFn rows8DotKernel(DType t, int nx) {
  Rows8DotFn scalar = rows8DotKernelScalar(t, nx); // validates
  if (Rows8DotFn f = detail::avx2Rows8DotKernel(t, nx))
    return f;
  return scalar;
}

} // namespace llmc::kernels

namespace llmc::kernels {

void unpackRows8GroupedRow(DType t, const uint8_t *group, int r, int64_t cols, uint8_t *row) {
  const std::optional<GroupedIntSpec> g = groupedIntSpec(t);
  const std::optional<DType> layout = rows8Layout(t);
  if (!g || !layout || *layout == t)
    throw std::runtime_error("rows8: " + std::string(dtypeName(t)) +
                             " is not a grouped integer type with an eight-row layout");
  if (cols % g->group != 0)
    throw std::runtime_error("rows8: width is not a multiple of the group");
  std::vector<uint8_t> blocks(size_t(rowBytes(*layout, cols)));
  unpackRows8Row(*layout, group, r, cols, blocks.data());
  const int scales = *layout == DType::Q4_1 ? 2 : 1;
  const int64_t srcBlock = *layout == DType::Q8_0 ? 34 : 2 * scales + 16;
  const int64_t blockBytes = groupedIntBlockBytes(g->bits, g->sym, g->group);
  const int codesAt = g->sym ? 2 : 4;
  std::memset(row, 0, size_t(cols / g->group * blockBytes));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t *blk = blocks.data() + b * srcBlock;
    uint8_t *grp = row + (b * 32 / g->group) * blockBytes;
    const int64_t first = (b * 32) % g->group;
    if (first == 0) // the group's d (and m), repeated in each of its blocks
      std::memcpy(grp, blk, size_t(2 * scales));
    const uint8_t *qs = blk + 2 * scales;
    for (int k = 0; k < 32; ++k) {
      const int64_t j = first + k;
      if (g->bits == 8) {
        grp[codesAt + j] = uint8_t(int(int8_t(qs[k])) + 128);
      } else {
        const uint8_t code = k < 16 ? (qs[k] & 15) : (qs[k - 16] >> 4);
        grp[codesAt + j / 2] = uint8_t(grp[codesAt + j / 2] | (code << (4 * (j & 1))));
      }
    }
  }
}

} // namespace llmc::kernels
