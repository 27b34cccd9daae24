//===- CpuOpKernels.cpp - Generated kernels for the plan's other ops -----===//
// Written with the prelude's generic 8-float vectors (SSE pairs at x86-64,
// AVX2 at v3, ...) and `omp simd` loops over compile-time widths. The
// vector exp (softmax, SiLU) is range-reduced to r in [-ln2/2, ln2/2] with
// a degree-6 polynomial (relative error about 2e-7) and 2^n built in the
// exponent bits; inputs are clamped to [-87, 88], where n stays a normal
// exponent.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuOpKernels.h"
#include "codegen/cpu/CpuAttendKernels.h"
#include "codegen/cpu/CpuKernelSource.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace llmc::codegen {

namespace {

using Kind = OpKernelSpec::Kind;
using detail::attendKernel;
using detail::groupAttendKernel;
using detail::num;

/// Helpers the op kernels share (emitted once, before the first op kernel).
const char *kOpPrelude = R"(
// ---- op kernels: shared helpers ----
namespace {
typedef int32_t v8i32 __attribute__((vector_size(32)));
inline v8f splat(float s) { return v8f{s, s, s, s, s, s, s, s}; }
inline void store8(float *p, v8f v) { std::memcpy(p, &v, sizeof v); }
inline v8f vselect(v8i32 m, v8f a, v8f b) {
  return (v8f)((m & (v8i32)a) | (~m & (v8i32)b));
}
/// exp(x) per lane, x clamped to [-87, 88].
inline v8f vexp(v8f x) {
  x = vselect(x < splat(-87.0f), splat(-87.0f), x);
  x = vselect(x > splat(88.0f), splat(88.0f), x);
  const v8f t = x * splat(1.44269504088896341f);
  const v8f n = (t + splat(12582912.0f)) - splat(12582912.0f); // round to nearest
  const v8f r = (x - n * splat(0.693145751953125f)) - n * splat(1.42860682030941723e-6f);
  v8f p = splat(1.0f / 720);
  p = p * r + splat(1.0f / 120);
  p = p * r + splat(1.0f / 24);
  p = p * r + splat(1.0f / 6);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const v8i32 e = (__builtin_convertvector(n, v8i32) + 127) << 23;
  return p * (v8f)e;
}
/// Eight IEEE f16 values (bits) widened to f32 (exact).
inline v8f load8h(const uint16_t *p) {
#ifdef __F16C__
  return (v8f)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
#else
  v8f v;
  for (int i = 0; i < 8; ++i)
    v[i] = h2f(reinterpret_cast<const unsigned char *>(p + i));
  return v;
#endif
}
/// Eight int8 codes of a q8_0 KV row times the f16 scale at `scale`
/// (exact: at most 7 + 11 significant bits).
inline v8f load8q(const uint8_t *codes, const uint8_t *scale) {
#ifdef __AVX2__
  const __m128i c8 = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(codes));
  const v8f c = (v8f)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c8));
#else
  v8f c;
  for (int i = 0; i < 8; ++i)
    c[i] = float(int8_t(codes[i]));
#endif
  return c * splat(h2f(scale));
}
typedef float v4f __attribute__((vector_size(16)));
/// hsum8 of four vectors at once, lane i = hsum8(ai) bit for bit: the same
/// additions in the same tree ((v0+v4) + (v1+v5)) + ((v2+v6) + (v3+v7)),
/// with the lanes gathered by shuffles instead of one vector at a time.
inline v4f hsum8x4(v8f a0, v8f a1, v8f a2, v8f a3) {
  const v8f p01 = __builtin_shufflevector(a0, a1, 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(a0, a1, 4, 5, 6, 7, 12, 13, 14, 15);
  const v8f p23 = __builtin_shufflevector(a2, a3, 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(a2, a3, 4, 5, 6, 7, 12, 13, 14, 15);
  const v8f c = __builtin_shufflevector(p01, p23, 0, 2, 8, 10, 4, 6, 12, 14) +
                __builtin_shufflevector(p01, p23, 1, 3, 9, 11, 5, 7, 13, 15);
  return __builtin_shufflevector(c, c, 0, 4, 2, 6) + __builtin_shufflevector(c, c, 1, 5, 3, 7);
}
#ifdef __AVX512F__
/// Sixteen elements of an f32 / f16 / q8_0 row as f32 (exactly).
inline __m512 load16(const float *p) { return _mm512_loadu_ps(p); }
inline __m512 load16h(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}
inline __m512 load16q(const uint8_t *codes, const uint8_t *scale) {
  const __m128i c8 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c8)), _mm512_set1_ps(h2f(scale)));
}
#endif
/// The first m (< 8) floats of p as a vector, `fill` in the other lanes.
inline v8f loadPart(const float *p, int m, float fill) {
  v8f v = splat(fill);
  for (int i = 0; i < m; ++i)
    v[i] = p[i];
  return v;
}
} // namespace
)";


/// A double as a symbol fragment: 100000 -> "100000", 1e+06 -> "1e06",
/// 0.5 -> "0p5".
std::string symbolNumber(double v) {
  std::string s;
  for (char c : num(v))
    s += c == '.' ? std::string("p") : c == '-' ? std::string("m") : c == '+' ? std::string() : std::string(1, c);
  return s;
}

std::string rmsNormKernel(const OpKernelSpec &s) {
  std::ostringstream o;
  o << "\n// RMSNorm over rows of " << s.cols << "\n"
    << "extern \"C\" void " << s.symbol()
    << "(const float *x, const float *w, float *y, int64_t rows, float eps) {\n"
    << "  constexpr int D = " << s.cols << ";\n"
    << "  for (int64_t r = 0; r < rows; ++r) {\n"
    << "    const float *xr = x + r * D;\n"
    << "    float *yr = y + r * D;\n"
    << "    double ss = 0;\n"
    << "#pragma omp simd reduction(+ : ss)\n"
    << "    for (int i = 0; i < D; ++i)\n"
    << "      ss += double(xr[i]) * xr[i];\n"
    << "    const float scale = float(1.0 / std::sqrt(ss / D + double(eps)));\n"
    << "#pragma omp simd\n"
    << "    for (int i = 0; i < D; ++i)\n"
    << "      yr[i] = xr[i] * scale * w[i];\n"
    << "  }\n}\n";
  return o.str();
}

std::string gateKernel(const OpKernelSpec &s) {
  std::ostringstream o;
  o << "\n// gated " << s.activation << ": g = act(g) * u\n"
    << "extern \"C\" void " << s.symbol() << "(float *g, const float *u, int64_t n) {\n";
  if (s.activation == "silu") {
    o << "  int64_t i = 0;\n"
      << "  for (; i + 8 <= n; i += 8) {\n"
      << "    const v8f gv = load8(g + i);\n"
      << "    store8(g + i, gv / (splat(1.0f) + vexp(splat(0.0f) - gv)) * load8(u + i));\n"
      << "  }\n"
      << "  if (i < n) {\n"
      << "    const int m = int(n - i);\n"
      << "    const v8f gv = loadPart(g + i, m, 0.0f);\n"
      << "    const v8f r = gv / (splat(1.0f) + vexp(splat(0.0f) - gv)) * loadPart(u + i, m, 0.0f);\n"
      << "    for (int k = 0; k < m; ++k)\n"
      << "      g[i + k] = r[k];\n"
      << "  }\n";
  } else if (s.activation == "gelu") {
    o << "  for (int64_t i = 0; i < n; ++i)\n"
      << "    g[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * 0.70710678118654752f)) * u[i];\n";
  } else {
    throw std::invalid_argument("no generated gate for activation '" + s.activation + "'");
  }
  o << "}\n";
  return o.str();
}

std::string ropeKernel(const OpKernelSpec &s) {
  if (s.heads <= 0 || s.kvHeads <= 0 || s.headDim <= 0 || s.headDim % 2 || !(s.theta > 0))
    throw std::invalid_argument("bad RoPE kernel shape");
  const int64_t half = s.headDim / 2;
  std::ostringstream o;
  o << "\n// RoPE (" << (s.interleaved ? "interleaved pairs" : "halves") << ", theta "
    << num(s.theta) << ") of " << s.heads << " query and " << s.kvHeads
    << " key heads of " << s.headDim << ", v copied\n";
  o << "static const double " << s.symbol() << "_freq[" << half << "] = {";
  for (int64_t i = 0; i < half; ++i)
    o << (i % 4 ? " " : "\n    ") << num(std::pow(s.theta, -2.0 * double(i) / double(s.headDim)))
      << ",";
  o << "};\n";
  o << "extern \"C\" void " << s.symbol()
    << "(const float *qkv, int64_t ld, float *q, float *kv, int64_t T, int64_t pos) {\n"
    << "  constexpr int H = " << s.heads << ", KV = " << s.kvHeads << ", HD = " << s.headDim
    << ", HALF = HD / 2;\n"
    << "  constexpr int QD = H * HD, KVD = KV * HD;\n"
    << "  for (int64_t t = 0; t < T; ++t) {\n"
    << "    float c[HALF], sn[HALF];\n"
    << "    for (int i = 0; i < HALF; ++i) {\n"
    << "      const double a = double(pos + t) * " << s.symbol() << "_freq[i];\n"
    << "      c[i] = float(std::cos(a));\n"
    << "      sn[i] = float(std::sin(a));\n"
    << "    }\n"
    << "    const float *src = qkv + t * ld;\n"
    << "    float *qt = q + t * QD, *kt = kv + t * 2 * KVD;\n"
    << "    auto rotate = [&](const float *in, float *out) {\n"
    << "#pragma omp simd\n"
    << "      for (int i = 0; i < HALF; ++i) {\n";
  if (s.interleaved)
    o << "        const float x0 = in[2 * i], x1 = in[2 * i + 1];\n"
      << "        out[2 * i] = x0 * c[i] - x1 * sn[i];\n"
      << "        out[2 * i + 1] = x0 * sn[i] + x1 * c[i];\n";
  else
    o << "        const float x0 = in[i], x1 = in[i + HALF];\n"
      << "        out[i] = x0 * c[i] - x1 * sn[i];\n"
      << "        out[i + HALF] = x0 * sn[i] + x1 * c[i];\n";
  o << "      }\n"
    << "    };\n"
    << "    for (int h = 0; h < H; ++h)\n"
    << "      rotate(src + h * HD, qt + h * HD);\n"
    << "    for (int h = 0; h < KV; ++h)\n"
    << "      rotate(src + QD + h * HD, kt + h * HD);\n"
    << "    std::memcpy(kt + KVD, src + QD + KVD, sizeof(float) * KVD);\n"
    << "  }\n}\n";
  return o.str();
}

std::string addKernel(const OpKernelSpec &s) {
  return "\n// residual add\nextern \"C\" void " + s.symbol() +
         "(const float *a, const float *b, float *y, int64_t n) {\n"
         "#pragma omp simd\n"
         "  for (int64_t i = 0; i < n; ++i)\n"
         "    y[i] = a[i] + b[i];\n"
         "}\n";
}

} // namespace

bool canGenerateEmbed(DType dtype, int64_t cols) {
  const std::optional<GroupedIntSpec> g = groupedIntSpec(dtype);
  return canGenerate(dtype, cols) || (g && cols > 0 && cols % g->group == 0);
}

std::string OpKernelSpec::symbol() const {
  switch (kind) {
  case Kind::RmsNorm:
    return "llmc_rms_norm_" + std::to_string(cols);
  case Kind::Gate:
    return "llmc_gate_" + activation;
  case Kind::Rope:
    return "llmc_rope_" + std::to_string(heads) + "_" + std::to_string(kvHeads) + "_" +
           std::to_string(headDim) + (interleaved ? "_pairs_" : "_halves_") + symbolNumber(theta);
  case Kind::AttendF32:
    return "llmc_attend_f32_" + std::to_string(headDim);
  case Kind::AttendF32Rows:
    return "llmc_attend_f32_rows_" + std::to_string(headDim);
  case Kind::AttendF32Group:
    return "llmc_attend_f32_g" + std::to_string(heads) + "_" + std::to_string(headDim);
  case Kind::AttendF32RowsGroup:
    return "llmc_attend_f32_rows_g" + std::to_string(heads) + "_" + std::to_string(headDim);
  case Kind::AttendF16RowsGroup:
    return "llmc_attend_f16_rows_g" + std::to_string(heads) + "_" + std::to_string(headDim);
  case Kind::AttendQ8RowsGroup:
    return "llmc_attend_q8_0_rows_g" + std::to_string(heads) + "_" + std::to_string(headDim);
  case Kind::Embed:
    return "llmc_embed_" + std::string(dtypeName(dtype)) + "_" + std::to_string(cols);
  case Kind::Add:
    return "llmc_add";
  }
  return "";
}

nlohmann::json OpKernelSpec::manifestEntry() const {
  nlohmann::json j = {{"symbol", symbol()}};
  switch (kind) {
  case Kind::RmsNorm:
    j["kind"] = "rms_norm";
    j["cols"] = cols;
    break;
  case Kind::Gate:
    j["kind"] = "gate";
    j["activation"] = activation;
    break;
  case Kind::Rope:
    j["kind"] = "rope";
    j["num_heads"] = heads;
    j["num_kv_heads"] = kvHeads;
    j["head_dim"] = headDim;
    j["rope_theta"] = theta;
    j["rope_style"] = interleaved ? "interleaved" : "half";
    break;
  case Kind::AttendF32:
  case Kind::AttendF32Rows:
    j["kind"] = kind == Kind::AttendF32 ? "attend_f32" : "attend_f32_rows";
    j["head_dim"] = headDim;
    break;
  case Kind::AttendF32Group:
  case Kind::AttendF32RowsGroup:
  case Kind::AttendF16RowsGroup:
  case Kind::AttendQ8RowsGroup:
    j["kind"] = kind == Kind::AttendF32Group       ? "attend_f32_group"
                : kind == Kind::AttendF32RowsGroup ? "attend_f32_rows_group"
                : kind == Kind::AttendF16RowsGroup ? "attend_f16_rows_group"
                                                   : "attend_q8_0_rows_group";
    j["head_dim"] = headDim;
    j["group"] = heads;
    break;
  case Kind::Embed:
    j["kind"] = "embed";
    j["dtype"] = std::string(dtypeName(dtype));
    j["cols"] = cols;
    break;
  case Kind::Add:
    j["kind"] = "add";
    break;
  }
  return j;
}

std::string opKernelSource(const std::vector<OpKernelSpec> &ops) {
  if (ops.empty())
    return "";
  std::string out = kOpPrelude;
  std::set<std::string> seen;
  for (const OpKernelSpec &s : ops) {
    if (!seen.insert(s.symbol()).second)
      continue;
    switch (s.kind) {
    case Kind::RmsNorm:
      if (s.cols <= 0)
        throw std::invalid_argument("bad RMSNorm width");
      out += rmsNormKernel(s);
      break;
    case Kind::Gate:
      out += gateKernel(s);
      break;
    case Kind::Rope:
      out += ropeKernel(s);
      break;
    case Kind::AttendF32:
    case Kind::AttendF32Rows:
      out += attendKernel(s);
      break;
    case Kind::AttendF32Group:
    case Kind::AttendF32RowsGroup:
    case Kind::AttendF16RowsGroup:
    case Kind::AttendQ8RowsGroup:
      out += groupAttendKernel(s);
      break;
    case Kind::Embed:
      if (!canGenerateEmbed(s.dtype, s.cols))
        throw std::invalid_argument("no generated embedding lookup for " +
                                    std::string(dtypeName(s.dtype)) + " rows of " +
                                    std::to_string(s.cols));
      out += rowDecoderSource(s.dtype, s.cols, s.symbol());
      break;
    case Kind::Add:
      out += addKernel(s);
      break;
    }
  }
  return out;
}

} // namespace llmc::codegen
