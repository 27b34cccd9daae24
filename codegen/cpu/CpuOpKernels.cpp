//===- CpuOpKernels.cpp - Generated kernels for the plan's other ops -----===//
// Written with the prelude's generic 8-float vectors (SSE pairs at x86-64,
// AVX2 at v3, ...) and `omp simd` loops over compile-time widths. The
// vector exp (softmax, SiLU) is range-reduced to r in [-ln2/2, ln2/2] with
// a degree-6 polynomial (relative error about 2e-7) and 2^n built in the
// exponent bits; inputs are clamped to [-87, 88], where n stays a normal
// exponent.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuOpKernels.h"
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
/// The first m (< 8) floats of p as a vector, `fill` in the other lanes.
inline v8f loadPart(const float *p, int m, float fill) {
  v8f v = splat(fill);
  for (int i = 0; i < m; ++i)
    v[i] = p[i];
  return v;
}
} // namespace
)";

std::string num(double v) {
  char b[40];
  snprintf(b, sizeof b, "%.17g", v);
  return b;
}

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

/// Softmax of the n scores at `w` in place, the text every attention kernel
/// shares (so per-head and grouped kernels round alike); leaves `inv`
/// (1 / the sum of the exponentials) in the variable named `invName`.
std::string softmaxText(const std::string &w, const std::string &invName, const char *indent) {
  std::ostringstream o;
  const std::string I = indent;
  o << I << "float mx = " << w << "[0];\n"
    << I << "for (int64_t i = 1; i < n; ++i)\n"
    << I << "  mx = " << w << "[i] > mx ? " << w << "[i] : mx;\n"
    << I << "v8f sum = {};\n"
    << I << "int64_t i = 0;\n"
    << I << "for (; i + 8 <= n; i += 8) {\n"
    << I << "  const v8f e = vexp(load8(" << w << " + i) - splat(mx));\n"
    << I << "  store8(" << w << " + i, e);\n"
    << I << "  sum += e;\n"
    << I << "}\n"
    << I << "float total = hsum8(sum);\n"
    << I << "if (i < n) {\n"
    << I << "  const int m = int(n - i);\n"
    << I << "  const v8f e = vexp(loadPart(" << w << " + i, m, mx) - splat(mx));\n"
    << I << "  for (int r = 0; r < m; ++r) {\n"
    << I << "    " << w << "[i + r] = e[r];\n"
    << I << "    total += e[r];\n"
    << I << "  }\n"
    << I << "}\n"
    << I << invName << " = 1.0f / total;\n";
  return o.str();
}

bool isGroupedAttend(Kind k) {
  return k == Kind::AttendF32Group || k == Kind::AttendF32RowsGroup || k == Kind::AttendF16RowsGroup;
}
bool isRowsAttend(Kind k) {
  return k == Kind::AttendF32Rows || k == Kind::AttendF32RowsGroup || k == Kind::AttendF16RowsGroup;
}

/// Scores four keys per pass when head_dim is a multiple of 8 (one vector
/// accumulator per key, one horizontal sum each), softmax with the vector
/// exp, values summed into head_dim accumulators. The rows variant reads row
/// j through krows[j] / vrows[j] and is otherwise the same text, so both
/// compute the same values.
std::string attendKernel(const OpKernelSpec &s) {
  if (s.headDim <= 0)
    throw std::invalid_argument("bad attention head_dim");
  const bool rows = isRowsAttend(s.kind);
  // Key row j (+ i rows) and value row r, in either layout.
  auto key = [rows](const char *j, int i) {
    const std::string idx = i ? std::string(j) + " + " + std::to_string(i) : std::string(j);
    return rows ? "krows[" + idx + "]" : "(k + (" + idx + ") * HD)";
  };
  const std::string valueRow = rows ? "vrows[r]" : "v + r * HD";
  std::ostringstream o;
  o << "\n// attention of one query head over n f32 KV rows of " << s.headDim
    << (rows ? ", rows by pointer" : "") << "\n"
    << "extern \"C\" void " << s.symbol()
    << (rows ? "(const float *q, const float *const *krows, const float *const *vrows, "
               "int64_t n, float *w, float *out) {\n"
             : "(const float *q, const float *k, const float *v, int64_t n, float *w, "
               "float *out) {\n")
    << "  constexpr int HD = " << s.headDim << ";\n"
    << "  constexpr float SCALE = " << num(1.0 / std::sqrt(double(s.headDim))) << "f;\n"
    << "  int64_t j = 0;\n";
  if (s.headDim % 8 == 0)
    o << "  for (; j + 4 <= n; j += 4) {\n"
      << "    const float *k0 = " << key("j", 0) << ", *k1 = " << key("j", 1)
      << ", *k2 = " << key("j", 2) << ", *k3 = " << key("j", 3) << ";\n"
      << "    v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};\n"
      << "    for (int d = 0; d < HD; d += 8) {\n"
      << "      const v8f qv = load8(q + d);\n"
      << "      a0 += qv * load8(k0 + d);\n"
      << "      a1 += qv * load8(k1 + d);\n"
      << "      a2 += qv * load8(k2 + d);\n"
      << "      a3 += qv * load8(k3 + d);\n"
      << "    }\n"
      << "    w[j] = hsum8(a0) * SCALE;\n"
      << "    w[j + 1] = hsum8(a1) * SCALE;\n"
      << "    w[j + 2] = hsum8(a2) * SCALE;\n"
      << "    w[j + 3] = hsum8(a3) * SCALE;\n"
      << "  }\n";
  o << "  for (; j < n; ++j) {\n"
    << "    const float *kj = " << key("j", 0) << ";\n"
    << "    float d0 = 0;\n"
    << "#pragma omp simd reduction(+ : d0)\n"
    << "    for (int d = 0; d < HD; ++d)\n"
    << "      d0 += q[d] * kj[d];\n"
    << "    w[j] = d0 * SCALE;\n"
    << "  }\n"
    << "  float inv;\n"
    << "  {\n"
    << softmaxText("w", "inv", "    ")
    << "  }\n"
    << "  float o[HD] = {};\n"
    << "  for (int64_t r = 0; r < n; ++r) {\n"
    << "    const float p = w[r] *= inv;\n"
    << "    const float *vr = " << valueRow << ";\n"
    << "#pragma omp simd\n"
    << "    for (int d = 0; d < HD; ++d)\n"
    << "      o[d] += p * vr[d];\n"
    << "  }\n"
    << "  std::memcpy(out, o, sizeof o);\n"
    << "}\n";
  return o.str();
}

/// The largest divisor of n that is at most cap.
int divisorAtMost(int64_t n, int64_t cap) {
  for (int64_t d = std::min(n, cap); d > 1; --d)
    if (n % d == 0)
      return int(d);
  return 1;
}

/// G query heads that share one KV head (GQA), in one pass over its rows:
/// each key row is loaded once for every head of the group, four keys at a
/// time, and each value row once per chunk of head_dim, summed into GS x CH
/// vector accumulators (at most 12, so the sums stay in registers and are
/// independent chains). Per (head, key) and (head, element) the arithmetic
/// is the per-head kernel's in the same order (one 8-lane accumulator over
/// d, the same horizontal sum, the same tail loop and softmax text, one
/// fused multiply-add per value row from zero), so the results are the
/// per-head kernel's bit for bit. Needs head_dim % 8 == 0. The f16 kind
/// reads IEEE f16 rows by pointer and widens each load (exactly), the tail
/// rows into a float array first, so its results are the f32 rows kernel's
/// on the widened rows bit for bit.
std::string groupAttendKernel(const OpKernelSpec &s) {
  if (s.headDim <= 0 || s.headDim % 8 != 0 || s.heads < 2)
    throw std::invalid_argument("grouped attention needs head_dim % 8 == 0 and a group of 2 or more");
  const bool rows = isRowsAttend(s.kind), half = s.kind == Kind::AttendF16RowsGroup;
  const std::string elem = half ? "uint16_t" : "float", load = half ? "load8h" : "load8";
  const int lineElems = half ? 32 : 16; // elements per 64-byte line
  const int64_t chunks = s.headDim / 8;
  const int gs = divisorAtMost(s.heads, 3);                  // heads per score pass
  const int ch = divisorAtMost(chunks, std::max<int64_t>(1, 12 / gs)); // 8-float chunks per value pass
  const std::string keyRow = rows ? "krows[j + i]" : "(k + (j + i) * HD)";
  const std::string keyAhead = rows ? "krows[j + 16 + i]" : "(k + (j + 16 + i) * HD)";
  const std::string valueFar = rows ? "vrows[j + 16 + i]" : "(v + (j + 16 + i) * HD)";
  const std::string valueAhead = rows ? "vrows[r + 8]" : "(v + (r + 8) * HD)";
  const std::string keyTail = rows ? "krows[j]" : "(k + j * HD)";
  const std::string valueRow = rows ? "vrows[r]" : "(v + r * HD)";
  std::ostringstream o;
  o << "\n// attention of " << s.heads << " query heads sharing one KV head over n "
    << (half ? "f16" : "f32") << " KV rows of " << s.headDim << (rows ? ", rows by pointer" : "")
    << "\n"
    << "extern \"C\" void " << s.symbol()
    << (rows ? "(const float *q, const " + elem + " *const *krows, const " + elem +
                   " *const *vrows, int64_t n, float *w, int64_t ldw, float *out) {\n"
             : std::string("(const float *q, const float *k, const float *v, int64_t n, float *w, "
                           "int64_t ldw, float *out) {\n"))
    << "  constexpr int HD = " << s.headDim << ", G = " << s.heads << ", GS = " << gs
    << ", CH = " << ch << ";\n"
    << "  constexpr float SCALE = " << num(1.0 / std::sqrt(double(s.headDim))) << "f;\n"
    << "  int64_t j = 0;\n"
    << "  for (; j + 4 <= n; j += 4)\n"
    << "    for (int g0 = 0; g0 < G; g0 += GS) {\n"
    << "      // Rows four passes ahead: keys into L1, values into L2 for the value\n"
    << "      // pass (pool blocks defeat the hardware's stream detection, and a\n"
    << "      // batch's caches do not stay in the last-level cache between steps).\n"
    << "      if (g0 == 0 && j + 20 <= n)\n"
    << "        for (int i = 0; i < 4; ++i)\n"
    << "          for (int d = 0; d < HD; d += " << lineElems << ") {\n"
    << "            __builtin_prefetch(" << keyAhead << " + d);\n"
    << "            __builtin_prefetch(" << valueFar << " + d, 0, 2);\n"
    << "          }\n"
    << "      v8f a[GS][4] = {};\n"
    << "      for (int d = 0; d < HD; d += 8) {\n"
    << "        v8f kv[4];\n"
    << "        for (int i = 0; i < 4; ++i)\n"
    << "          kv[i] = " << load << "(" << keyRow << " + d);\n"
    << "        for (int g = 0; g < GS; ++g) {\n"
    << "          const v8f qv = load8(q + (g0 + g) * HD + d);\n"
    << "          for (int i = 0; i < 4; ++i)\n"
    << "            a[g][i] += qv * kv[i];\n"
    << "        }\n"
    << "      }\n"
    << "      for (int g = 0; g < GS; ++g)\n"
    << "        for (int i = 0; i < 4; ++i)\n"
    << "          w[(g0 + g) * ldw + j + i] = hsum8(a[g][i]) * SCALE;\n"
    << "    }\n"
    << "  for (; j < n; ++j) {\n";
  if (half)
    o << "    float kj[HD];\n"
      << "    for (int d = 0; d < HD; ++d)\n"
      << "      kj[d] = h2f(reinterpret_cast<const unsigned char *>(" << keyTail << " + d));\n";
  else
    o << "    const float *kj = " << keyTail << ";\n";
  o << "    for (int g = 0; g < G; ++g) {\n"
    << "      const float *qg = q + g * HD;\n"
    << "      float d0 = 0;\n"
    << "#pragma omp simd reduction(+ : d0)\n"
    << "      for (int d = 0; d < HD; ++d)\n"
    << "        d0 += qg[d] * kj[d];\n"
    << "      w[g * ldw + j] = d0 * SCALE;\n"
    << "    }\n"
    << "  }\n"
    << "  for (int g = 0; g < G; ++g) {\n"
    << "    float *wg = w + g * ldw;\n"
    << "    float inv;\n"
    << "    {\n"
    << softmaxText("wg", "inv", "      ")
    << "    }\n"
    << "    for (int64_t r = 0; r < n; ++r)\n"
    << "      wg[r] *= inv;\n"
    << "  }\n"
    << "  for (int g0 = 0; g0 < G; g0 += GS)\n"
    << "    for (int c = 0; c < HD; c += 8 * CH) {\n"
    << "      v8f acc[GS][CH] = {};\n"
    << "      for (int64_t r = 0; r < n; ++r) {\n"
    << "        if (r + 8 < n)\n"
    << "          for (int x = 0; x < CH; x += 2)\n"
    << "            __builtin_prefetch(" << valueAhead << " + c + 8 * x);\n"
    << "        const " << elem << " *vr = " << valueRow << " + c;\n"
    << "        v8f vv[CH];\n"
    << "        for (int x = 0; x < CH; ++x)\n"
    << "          vv[x] = " << load << "(vr + 8 * x);\n"
    << "        for (int g = 0; g < GS; ++g) {\n"
    << "          const v8f p = splat(w[(g0 + g) * ldw + r]);\n"
    << "          for (int x = 0; x < CH; ++x)\n"
    << "            acc[g][x] += p * vv[x];\n"
    << "        }\n"
    << "      }\n"
    << "      for (int g = 0; g < GS; ++g)\n"
    << "        for (int x = 0; x < CH; ++x)\n"
    << "          store8(out + (g0 + g) * HD + c + 8 * x, acc[g][x]);\n"
    << "    }\n"
    << "}\n";
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
    j["kind"] = kind == Kind::AttendF32Group      ? "attend_f32_group"
                : kind == Kind::AttendF32RowsGroup ? "attend_f32_rows_group"
                                                   : "attend_f16_rows_group";
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
