//===- aaac.cpp - AAAC rows: side data, dequantization, fused dots --------===//
// Reading llmc/format/aaac.h rows: per group, |s| * book[sign(s)][q]. The
// fused dot sums book[q] * x over a group and multiplies by |s| once; the
// codebook lookup of 8 codes at a time is a register permute (two permutes
// and a blend for 16 entries), since both codebooks fit in four registers
// (converted from fp16 once per call with F16C). Kernels are templated on
// the code width and the number of activation rows; AVX2+FMA+F16C when the
// build targets them, portable C++ otherwise.
//===----------------------------------------------------------------------===//
#include "aaac_rows.h"
#include "family_rows.h"
#include "grouped_int_rows.h"
#include "quant_rows.h"

#include <stdexcept>
#include <string>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LLMC_AAAC_AVX2 1
#endif

namespace llmc {
namespace {

template <class F> decltype(auto) withAaacBits(int bits, F &&f) {
  switch (bits) {
  case 2: return f(std::integral_constant<int, 2>{});
  case 3: return f(std::integral_constant<int, 3>{});
  default: return f(std::integral_constant<int, 4>{});
  }
}

#if LLMC_AAAC_AVX2

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The 8 codes stored in the B bytes at qs, as int32 lanes: 8 codes of at
// most 4 bits fit in one 32-bit word, so each lane shifts that word to its
// own code.
template <int B> inline __m256i codes8(const uint8_t *qs) {
  const uint32_t w = uint32_t(detail::loadCodes8<B>(qs));
  const __m256i shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w)), shifts),
                          _mm256_set1_epi32((1 << B) - 1));
}

// One codebook in registers: entries 0..7 in lo, 8..15 in hi (4 bits only).
struct Book {
  __m256 lo, hi;
};

// K fp16 entries at p as floats (lanes past K are 0); reads 2K bytes.
template <int K> inline __m256 halves(const uint8_t *p) {
  if constexpr (K >= 8)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  else
    return _mm256_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}

// Both codebooks of the side data (A then B, 2^B fp16 values each).
template <int B> inline void loadBooks(const uint8_t *aux, Book books[2]) {
  constexpr int K = 1 << B;
  for (int b = 0; b < 2; ++b) {
    const uint8_t *p = aux + 2 * b * K;
    books[b].lo = halves<K>(p);
    books[b].hi = K > 8 ? halves<K>(p + 16) : _mm256_setzero_ps();
  }
}

// book[q] for 8 codes: permutes read the low 3 index bits; at 4 bits a blend
// on index bit 3 (moved into the sign bit) picks the upper half.
template <int B> inline __m256 lookup(const Book &b, __m256i q) {
  const __m256 lo = _mm256_permutevar8x32_ps(b.lo, q);
  if constexpr (B < 4) {
    return lo;
  } else {
    const __m256 hi = _mm256_permutevar8x32_ps(b.hi, q);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
  }
}

// The scale magnitude of a group's scale field.
inline float scaleOf(uint16_t f) { return _cvtsh_ss(uint16_t(f & 0x7FFFu)); }

#endif // LLMC_AAAC_AVX2

template <int B>
void dequantRow(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, float *dst,
                int64_t groups) {
  const int64_t bb = aaacGroupBytes(B, s.group);
#if LLMC_AAAC_AVX2
  Book books[2];
  loadBooks<B>(aux, books);
  for (int64_t g = 0; g < groups; ++g, row += bb, dst += s.group) {
    const uint16_t f = detail::loadU16(row);
    const Book &book = books[(f & kAaacBookBBit) ? 1 : 0];
    const __m256 d = _mm256_set1_ps(scaleOf(f));
    const uint8_t *qs = row + 2;
    for (int64_t j = 0; j < s.group; j += 8, qs += B)
      _mm256_storeu_ps(dst + j, _mm256_mul_ps(d, lookup<B>(book, codes8<B>(qs))));
  }
#else
  const detail::AaacTable t = detail::aaacTable(s, aux);
  for (int64_t g = 0; g < groups; ++g, row += bb, dst += s.group) {
    const uint16_t f = detail::loadU16(row);
    const float d = aaacScaleOf(f);
    const float *book = t.book[(f & kAaacBookBBit) ? 1 : 0];
    const uint8_t *qs = row + 2;
    for (int64_t j = 0; j < s.group; j += 8, qs += B) {
      const uint64_t v = detail::loadCodes8<B>(qs);
      for (int i = 0; i < 8; ++i)
        dst[j + i] = d * book[detail::codeAt<B>(v, i)];
    }
  }
#endif
}

} // namespace

namespace detail {

int64_t aaacAuxBytes(const AaacSpec &s, int64_t, int64_t) { return aaacCodebookBytes(s.bits); }

void aaacDequantRow(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, float *dst,
                    int64_t n) {
  const int64_t groups = aaacGroups(s, n, "aaac dequantize");
  if (!aux)
    throw std::runtime_error(aaacName(s) + ": the matrix's codebooks (side data) are missing");
  withAaacBits(s.bits, [&](auto B) { dequantRow<B>(s, row, aux, dst, groups); });
}

} // namespace detail

namespace kernels {
namespace {

struct Args {
  const AaacSpec &s;
  const uint8_t *row, *aux;
  int64_t groups;
  const float *x;
  int64_t ldx;
  float *out;
  int64_t ldo;
};

template <int B, int NX> void dotScalar(const Args &a) {
  const int64_t G = a.s.group, bb = aaacGroupBytes(B, G);
  const detail::AaacTable t = detail::aaacTable(a.s, a.aux);
  float tot[NX] = {};
  for (int64_t g = 0; g < a.groups; ++g) {
    const uint8_t *blk = a.row + g * bb;
    const uint16_t f = detail::loadU16(blk);
    const float *book = t.book[(f & kAaacBookBBit) ? 1 : 0];
    const uint8_t *qs = blk + 2;
    float acc[NX] = {};
    for (int64_t j = 0; j < G; j += 8, qs += B) {
      const uint64_t v = detail::loadCodes8<B>(qs);
      for (int i = 0; i < 8; ++i) {
        const float c = book[detail::codeAt<B>(v, i)];
        for (int k = 0; k < NX; ++k)
          acc[k] += c * a.x[k * a.ldx + g * G + j + i];
      }
    }
    const float d = aaacScaleOf(f);
    for (int k = 0; k < NX; ++k)
      tot[k] += d * acc[k];
  }
  for (int k = 0; k < NX; ++k)
    a.out[k * a.ldo] = tot[k];
}

#if LLMC_AAAC_AVX2

template <int B, int NX> void dotAvx2(const Args &a) {
  const int64_t G = a.s.group, bb = aaacGroupBytes(B, G);
  Book books[2];
  loadBooks<B>(a.aux, books);
  __m256 tot[NX];
  for (int k = 0; k < NX; ++k)
    tot[k] = _mm256_setzero_ps();
  for (int64_t g = 0; g < a.groups; ++g) {
    const uint8_t *blk = a.row + g * bb;
    const uint16_t f = detail::loadU16(blk);
    const Book &book = books[(f & kAaacBookBBit) ? 1 : 0];
    const uint8_t *qs = blk + 2;
    const float *xg = a.x + g * G;
    // Two accumulator chains per activation row hide the FMA latency.
    __m256 ca[NX], cb[NX];
    for (int k = 0; k < NX; ++k)
      ca[k] = cb[k] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= G; j += 16, qs += 2 * B) {
      const __m256 c0 = lookup<B>(book, codes8<B>(qs));
      const __m256 c1 = lookup<B>(book, codes8<B>(qs + B));
      for (int k = 0; k < NX; ++k) {
        ca[k] = _mm256_fmadd_ps(c0, _mm256_loadu_ps(xg + k * a.ldx + j), ca[k]);
        cb[k] = _mm256_fmadd_ps(c1, _mm256_loadu_ps(xg + k * a.ldx + j + 8), cb[k]);
      }
    }
    if (j < G) { // G is a multiple of 8: at most one step of 8 left
      const __m256 c0 = lookup<B>(book, codes8<B>(qs));
      for (int k = 0; k < NX; ++k)
        ca[k] = _mm256_fmadd_ps(c0, _mm256_loadu_ps(xg + k * a.ldx + j), ca[k]);
    }
    const __m256 d = _mm256_set1_ps(scaleOf(f));
    for (int k = 0; k < NX; ++k)
      tot[k] = _mm256_fmadd_ps(_mm256_add_ps(ca[k], cb[k]), d, tot[k]);
  }
  for (int k = 0; k < NX; ++k)
    a.out[k * a.ldo] = hsum8(tot[k]);
}

#endif // LLMC_AAAC_AVX2

using Kernel = void (*)(const Args &);

template <int B> Kernel pickRows(int nx, bool simd) {
#if LLMC_AAAC_AVX2
  if (simd) {
    switch (nx) {
    case 1: return dotAvx2<B, 1>;
    case 2: return dotAvx2<B, 2>;
    case 3: return dotAvx2<B, 3>;
    default: return dotAvx2<B, 4>;
    }
  }
#endif
  (void)simd;
  switch (nx) {
  case 1: return dotScalar<B, 1>;
  case 2: return dotScalar<B, 2>;
  case 3: return dotScalar<B, 3>;
  default: return dotScalar<B, 4>;
  }
}

void run(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, int64_t n, const float *x,
         int64_t ldx, int nx, float *out, int64_t ldo, bool simd, const char *what) {
  if (nx < 1 || nx > kMaxFamilyDotRows)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(nx) +
                             " activation rows (1.." + std::to_string(kMaxFamilyDotRows) +
                             " supported)");
  if (s.bits < kAaacMinBits || s.bits > kAaacMaxBits)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(s.bits) +
                             "-bit aaac codes (2..4 supported)");
  const Args a{s, row, aux, detail::aaacGroups(s, n, what), x, ldx, out, ldo};
  if (!aux)
    throw std::runtime_error(std::string(what) + ": " + detail::aaacName(s) +
                             ": the matrix's codebooks (side data) are missing");
  withAaacBits(s.bits, [&](auto B) { pickRows<B>(nx, simd)(a); });
}

} // namespace

void aaacDotRows(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, int64_t n,
                 const float *x, int64_t ldx, int nx, float *out, int64_t ldo) {
  run(s, row, aux, n, x, ldx, nx, out, ldo, true, "aaacDotRows");
}

void aaacDotRowsScalar(const AaacSpec &s, const uint8_t *row, const uint8_t *aux, int64_t n,
                       const float *x, int64_t ldx, int nx, float *out, int64_t ldo) {
  run(s, row, aux, n, x, ldx, nx, out, ldo, false, "aaacDotRowsScalar");
}

bool haveSimdAaacDot() {
#if LLMC_AAAC_AVX2
  return true;
#else
  return false;
#endif
}

} // namespace kernels
} // namespace llmc
