//===- CpuFloatKernels.cpp - F32-activation matrix-vector kernels ---------===//
// Each kernel computes T (1..4, a template parameter picked by a switch)
// dot products per weight row. Block formats are written with generic
// vectors (8 floats; the host compiler lowers them to SSE pairs at x86-64,
// AVX2 at v3, ...): each 32-weight block becomes four weight vectors, each
// converted from 8 loaded bytes (a 32-byte load and shuffles measured 10-15%
// slower with clang 14), multiplied by the activations and accumulated per token, the block scale
// applied to the block's partial vector; one horizontal sum per row and
// token. Float rows are one `omp simd` dot (built with -fopenmp-simd).
// Widths are constants, so the loops have fixed trip counts.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuKernelParts.h"

#include <sstream>
#include <stdexcept>

namespace llmc::codegen::detail {

bool layoutOf(DType t, Layout &l) {
  switch (t) {
  case DType::F32:
  case DType::F16:
  case DType::BF16:
    l = {1, int(dtypeInfo(t).block_bytes)}; // rows of any width, one dot per row
    return true;
  case DType::Q8_0:
    l = {32, 34};
    return true;
  case DType::Q4_0:
    l = {32, 18};
    return true;
  case DType::Q4_1:
    l = {32, 20};
    return true;
  case DType::Q5_0:
    l = {32, 22};
    return true;
  case DType::Q5_1:
    l = {32, 24};
    return true;
  default:
    return false;
  }
}

/// Statements that turn block `blk` into four 8-float weight vectors
/// w0..w3 (elements 0-7, 8-15, 16-23, 24-31, unscaled) and its scale `d`
/// (and minimum `m` for q4_1).
std::string decodeBlock(DType t) {
  switch (t) {
  case DType::Q8_0:
    return "        const float d = h2f(blk);\n"
           "        const v8f w0 = __builtin_convertvector(load8i8(blk + 2), v8f);\n"
           "        const v8f w1 = __builtin_convertvector(load8i8(blk + 10), v8f);\n"
           "        const v8f w2 = __builtin_convertvector(load8i8(blk + 18), v8f);\n"
           "        const v8f w3 = __builtin_convertvector(load8i8(blk + 26), v8f);\n";
  case DType::Q4_0:
  case DType::Q4_1: {
    const int off = t == DType::Q4_0 ? 2 : 4;
    std::string bias = t == DType::Q4_0 ? " - 8.0f" : "";
    std::string head = t == DType::Q4_0 ? "        const float d = h2f(blk);\n"
                                        : "        const float d = h2f(blk), m = h2f(blk + 2);\n";
    const std::string a = std::to_string(off), b = std::to_string(off + 8);
    return head + "        const v8u8 qa = load8u8(blk + " + a + "), qb = load8u8(blk + " + b + ");\n"
                  "        const v8f w0 = __builtin_convertvector(qa & 15, v8f)" + bias + ";\n"
                  "        const v8f w1 = __builtin_convertvector(qb & 15, v8f)" + bias + ";\n"
                  "        const v8f w2 = __builtin_convertvector(qa >> 4, v8f)" + bias + ";\n"
                  "        const v8f w3 = __builtin_convertvector(qb >> 4, v8f)" + bias + ";\n";
  }
  case DType::Q5_0:
  case DType::Q5_1: {
    // d [, m], 32 fifth bits (bit j: weight j), then Q4-style nibbles.
    const bool q50 = t == DType::Q5_0;
    const std::string head = q50 ? "        const float d = h2f(blk);\n"
                                 : "        const float d = h2f(blk), m = h2f(blk + 2);\n";
    const int hq = q50 ? 2 : 4, qs = hq + 4;
    const std::string bias = q50 ? " - 16.0f" : "";
    std::ostringstream o;
    o << head << "        uint32_t qh;\n        std::memcpy(&qh, blk + " << hq << ", 4);\n"
      << "        const v8u8 qa = load8u8(blk + " << qs << "), qb = load8u8(blk + " << qs + 8
      << ");\n"
      << "        const v8u8 bit = {0, 1, 2, 3, 4, 5, 6, 7};\n";
    const char *nib[4] = {"(qa & 15)", "(qb & 15)", "(qa >> 4)", "(qb >> 4)"};
    for (int k = 0; k < 4; ++k)
      o << "        const v8f w" << k << " = __builtin_convertvector(" << nib[k]
        << " | ((((v8u8{} + (unsigned char)(qh >> " << 8 * k << ")) >> bit) & 1) << 4), v8f)"
        << bias << ";\n";
    return o.str();
  }
  default:
    throw std::logic_error("no generated decoder for this format");
  }
}

namespace {

std::string wrapper(const std::string &name) {
  std::ostringstream o;
  o << "extern \"C\" void " << name << "(const unsigned char *w, int64_t stride, const float *x, "
    << "int64_t ldx, int32_t T, float *y, int64_t ldy, int64_t r0, int64_t r1) {\n";
  o << "  switch (T) {\n";
  for (int t = 1; t <= 4; ++t)
    o << "  case " << t << ": " << name << "_t<" << t << ">(w, stride, x, ldx, y, ldy, r0, r1); "
      << "break;\n";
  o << "  default: break;\n  }\n}\n";
  return o.str();
}

/// Float rows, for any number of tokens T (prefill included). Widths that
/// are a multiple of 8: blocks of 16 rows (f16 / bf16 decoded once into a
/// thread-local block), tokens in passes of 3 over every 4 rows of the
/// block: twelve vector accumulators (each weight vector shared by the
/// tokens, each token vector by the four rows), one horizontal sum per row
/// and token. Other widths (and the last rows): one `omp simd` dot per row
/// and token.
std::string floatKernel(const MatvecSpec &s) {
  const std::string name = s.symbol();
  const char *decode = s.dtype == DType::F16 ? "h2f" : "bf2f";
  std::ostringstream o;
  o << "\n// " << dtypeName(s.dtype) << " rows of " << s.cols << ", any number of tokens\n";
  if (s.cols % 8 == 0) {
    // Four rows against NT (1..3) tokens: 4 * NT vector accumulators.
    o << "template <int NT>\nstatic inline void " << name << "_pass(const float *const *wr, "
      << "const float *x, int64_t ldx, float *y, int64_t ldy) {\n";
    o << "  constexpr int COLS = " << s.cols << ";\n";
    o << "  v8f acc[NT][4] = {};\n";
    // The NT token vectors first, then one weight vector at a time: 12
    // accumulators + 3 + 1 registers fit AVX2's 16 (all four weight vectors
    // live at once spill, measured 0.6x in prefill).
    o << "  for (int j = 0; j < COLS; j += 8) {\n";
    o << "    v8f xv[NT];\n";
    o << "    for (int t = 0; t < NT; ++t)\n";
    o << "      xv[t] = load8(x + t * ldx + j);\n";
    o << "    for (int i = 0; i < 4; ++i) {\n";
    o << "      const v8f wv = load8(wr[i] + j);\n";
    o << "      for (int t = 0; t < NT; ++t)\n";
    o << "        acc[t][i] += wv * xv[t];\n";
    o << "    }\n  }\n";
    o << "  for (int t = 0; t < NT; ++t)\n";
    o << "    for (int i = 0; i < 4; ++i)\n";
    o << "      y[t * ldy + i] = hsum8(acc[t][i]);\n";
    o << "}\n\n";
  }
  o << "extern \"C\" void " << name << "(const unsigned char *w, int64_t stride, const float *x, "
    << "int64_t ldx, int32_t T, float *y, int64_t ldy, int64_t r0, int64_t r1) {\n";
  o << "  constexpr int COLS = " << s.cols << ";\n";
  o << "  int64_t r = r0;\n";
  if (s.cols % 8 == 0) {
    // Blocks of up to 16 rows (a multiple of 4): tokens in passes of 3 over
    // every 4 rows of the block, so a pass's activations stay in L1 and the
    // block's rows in L1/L2 across passes (X is read once per block).
    o << "  for (; r + 4 <= r1;) {\n";
    o << "    const int nr = r1 - r >= 16 ? 16 : int((r1 - r) / 4 * 4);\n";
    o << "    const float *wr[16];\n";
    if (s.dtype == DType::F32) {
      o << "    for (int i = 0; i < nr; ++i)\n";
      o << "      wr[i] = reinterpret_cast<const float *>(w + (r + i) * stride);\n";
    } else {
      o << "    static thread_local float wbuf[16][COLS];\n";
      o << "    for (int i = 0; i < nr; ++i) {\n";
      o << "      const unsigned char *row = w + (r + i) * stride;\n";
      o << "      for (int j = 0; j < COLS; ++j) wbuf[i][j] = " << decode << "(row + 2 * j);\n";
      o << "      wr[i] = wbuf[i];\n    }\n";
    }
    o << "    int t = 0;\n";
    o << "    for (; t + 3 <= T; t += 3)\n";
    o << "      for (int i = 0; i < nr; i += 4)\n";
    o << "        " << name << "_pass<3>(wr + i, x + t * ldx, ldx, y + t * ldy + r + i, ldy);\n";
    o << "    for (int i = 0; i < nr; i += 4) {\n";
    o << "      if (T - t == 2)\n";
    o << "        " << name << "_pass<2>(wr + i, x + t * ldx, ldx, y + t * ldy + r + i, ldy);\n";
    o << "      else if (T - t == 1)\n";
    o << "        " << name << "_pass<1>(wr + i, x + t * ldx, ldx, y + t * ldy + r + i, ldy);\n";
    o << "    }\n";
    o << "    r += nr;\n";
    o << "  }\n";
  }
  o << "  for (; r < r1; ++r) {\n";
  o << "    const unsigned char *row = w + r * stride;\n";
  if (s.dtype == DType::F32) {
    o << "    const float *wf = reinterpret_cast<const float *>(row);\n";
  } else {
    o << "    float wf[COLS];\n";
    o << "    for (int j = 0; j < COLS; ++j) wf[j] = " << decode << "(row + 2 * j);\n";
  }
  o << "    for (int t = 0; t < T; ++t) {\n";
  o << "      const float *xt = x + t * ldx;\n";
  o << "      float dot = 0.0f;\n";
  o << "#pragma omp simd reduction(+ : dot)\n";
  o << "      for (int j = 0; j < COLS; ++j)\n";
  o << "        dot += wf[j] * xt[j];\n";
  o << "      y[t * ldy + r] = dot;\n";
  o << "    }\n  }\n}\n";
  return o.str();
}

/// Block formats: per row, 8-float vector accumulators per token across all
/// blocks (block scale applied to the block's vector partial sum), one
/// horizontal sum per row and token at the end. (Measured: two rows per
/// iteration, and q4_1 activation sums hoisted out of the row loop, were
/// slower with clang 14 at x86-64-v3.)
std::string blockKernel(const MatvecSpec &s) {
  Layout l;
  layoutOf(s.dtype, l);
  const std::string name = s.symbol();
  const bool minTerm = s.dtype == DType::Q4_1 || s.dtype == DType::Q5_1;
  std::ostringstream o;
  o << "\n// " << dtypeName(s.dtype) << " rows of " << s.cols << " (" << s.cols / l.block
    << " blocks of " << l.block << ", " << l.bytes << " bytes)\n";
  o << "template <int T>\nstatic void " << name << "_t(const unsigned char *w, int64_t stride, "
    << "const float *x, int64_t ldx, float *y, int64_t ldy, int64_t r0, int64_t r1) {\n";
  o << "  constexpr int NB = " << s.cols / l.block << ", BYTES = " << l.bytes << ";\n";
  o << "  for (int64_t r = r0; r < r1; ++r) {\n";
  o << "    const unsigned char *row = w + r * stride;\n";
  // Two accumulator sets (even and odd blocks) and two product chains per
  // block keep independent FMA chains in flight.
  o << "    v8f accA[T], accB[T];\n";
  o << "    for (int t = 0; t < T; ++t) accA[t] = accB[t] = v8f{};\n";
  o << "    auto block = [&](int b, v8f *acc) __attribute__((always_inline)) {\n";
  o << "      const unsigned char *blk = row + b * BYTES;\n";
  o << "      {\n";
  o << decodeBlock(s.dtype);
  o << "        for (int t = 0; t < T; ++t) {\n";
  o << "          const float *xb = x + t * ldx + b * 32;\n";
  o << "          const v8f x0 = load8(xb), x1 = load8(xb + 8), x2 = load8(xb + 16), x3 = load8(xb + 24);\n";
  o << "          const v8f p = (w0 * x0 + w1 * x1) + (w2 * x2 + w3 * x3);\n";
  if (minTerm)
    o << "          acc[t] += p * d + ((x0 + x1) + (x2 + x3)) * m;\n";
  else
    o << "          acc[t] += p * d;\n";
  o << "        }\n";
  o << "      }\n";
  o << "    };\n";
  o << "    int b = 0;\n";
  o << "    for (; b + 2 <= NB; b += 2) {\n";
  o << "      block(b, accA);\n";
  o << "      block(b + 1, accB);\n";
  o << "    }\n";
  o << "    if (b < NB)\n";
  o << "      block(b, accA);\n";
  o << "    v8f acc[T];\n";
  o << "    for (int t = 0; t < T; ++t) acc[t] = accA[t] + accB[t];\n";
  o << "    for (int t = 0; t < T; ++t)\n";
  o << "      y[t * ldy + r] = hsum8(acc[t]);\n";
  o << "  }\n}\n\n";
  o << wrapper(name);
  return o.str();
}


} // namespace

std::string f32ActivationKernel(const MatvecSpec &s) {
  if (s.dtype == DType::F32 || s.dtype == DType::F16 || s.dtype == DType::BF16)
    return floatKernel(s);
  return blockKernel(s);
}

} // namespace llmc::codegen::detail
