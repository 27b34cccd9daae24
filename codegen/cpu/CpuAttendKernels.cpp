//===- CpuAttendKernels.cpp - Generated attention kernels -----------------===//
// Attention of one query head, or of the query heads that share a KV head
// (GQA), over f32 rows (contiguous or by pointer) and over f16 and q8_0 rows
// by pointer (paged pools). Every kernel shares the same score order, the
// same softmax text and the same per-lane value sums, so each gives bit for
// bit what the f32 per-head kernel gives on the decoded rows; the faster
// forms (four horizontal sums at once, 512-bit value sums) keep that order.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuAttendKernels.h"
#include "llmc/kv_row_type.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace llmc::codegen::detail {

using Kind = OpKernelSpec::Kind;

std::string num(double v) {
  char b[40];
  snprintf(b, sizeof b, "%.17g", v);
  return b;
}

namespace {

/// Softmax of the n scores at `w` in place, the text every attention kernel
/// shares (so per-head and grouped kernels round alike); leaves `inv`
/// (1 / the sum of the exponentials) in the variable named `invName`.
std::string softmaxText(const std::string &w, const std::string &invName, const char *indent) {
  std::ostringstream o;
  const std::string I = indent;
  // The maximum is exact whatever the order (a NaN makes every output NaN
  // either way), so it runs in eight lanes, then over them and the tail.
  o << I << "float mx = " << w << "[0];\n"
    << I << "{\n"
    << I << "  int64_t i = 0;\n"
    << I << "  if (n >= 16) {\n"
    << I << "    v8f m = load8(" << w << ");\n"
    << I << "    for (i = 8; i + 8 <= n; i += 8) {\n"
    << I << "      const v8f x = load8(" << w << " + i);\n"
    << I << "      m = vselect(x > m, x, m);\n"
    << I << "    }\n"
    << I << "    for (int l = 0; l < 8; ++l)\n"
    << I << "      mx = m[l] > mx ? m[l] : mx;\n"
    << I << "  }\n"
    << I << "  for (; i < n; ++i)\n"
    << I << "    mx = " << w << "[i] > mx ? " << w << "[i] : mx;\n"
    << I << "}\n"
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

/// The largest divisor of n that is at most cap.
int divisorAtMost(int64_t n, int64_t cap) {
  for (int64_t d = std::min(n, cap); d > 1; --d)
    if (n % d == 0)
      return int(d);
  return 1;
}

} // namespace

bool isGroupedAttend(Kind k) {
  return k == Kind::AttendF32Group || k == Kind::AttendF32RowsGroup ||
         k == Kind::AttendF16RowsGroup || k == Kind::AttendQ8RowsGroup;
}
bool isRowsAttend(Kind k) {
  return k == Kind::AttendF32Rows || k == Kind::AttendF32RowsGroup ||
         k == Kind::AttendF16RowsGroup || k == Kind::AttendQ8RowsGroup;
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
      << "    const v4f s4 = hsum8x4(a0, a1, a2, a3) * SCALE;\n"
      << "    std::memcpy(w + j, &s4, sizeof s4);\n"
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

/// G query heads that share one KV head (GQA), in one pass over its rows:
/// each key row is loaded once for every head of the group, four keys at a
/// time, and each value row once per chunk of head_dim, summed into GS x CH
/// vector accumulators (at most 12, so the sums stay in registers and are
/// independent chains). Per (head, key) and (head, element) the arithmetic
/// is the per-head kernel's in the same order (one 8-lane accumulator over
/// d, the same horizontal sum, the same tail loop and softmax text, one
/// fused multiply-add per value row from zero), so the results are the
/// per-head kernel's bit for bit. Needs head_dim % 8 == 0. The f16 and q8_0
/// kinds read their rows by pointer and decode each load to f32 (exactly),
/// the tail rows into a float array first, so their results are the f32
/// rows kernel's on the decoded rows bit for bit.
std::string groupAttendKernel(const OpKernelSpec &s) {
  if (s.headDim <= 0 || s.headDim % 8 != 0 || s.heads < 2)
    throw std::invalid_argument("grouped attention needs head_dim % 8 == 0 and a group of 2 or more");
  const bool rows = isRowsAttend(s.kind), half = s.kind == Kind::AttendF16RowsGroup,
             q8 = s.kind == Kind::AttendQ8RowsGroup;
  const KvRowType rowType = half ? KvRowType::F16 : q8 ? KvRowType::Q8 : KvRowType::F32;
  if (q8 && s.headDim % kKvQ8Group != 0)
    throw std::invalid_argument("q8_0 KV rows need head_dim % " + std::to_string(kKvQ8Group) +
                                " == 0");
  const std::string elem = half ? "uint16_t" : q8 ? "uint8_t" : "float";
  const int64_t rowBytes = kvRowBytes(rowType, s.headDim);
  // `lanes` (8 or 16) elements of row `row` from element `at`, as f32
  // (load8 / load16 and their f16 "h" and q8_0 "q" forms).
  auto load = [&](int lanes, const std::string &row, const std::string &at) {
    const std::string fn = "load" + std::to_string(lanes);
    if (q8) // SC: the row's scale bytes, before its codes
      return fn + "q(" + row + " + SC + " + at + ", " + row + " + 2 * ((" + at + ") / " +
             std::to_string(kKvQ8Group) + "))";
    return fn + (half ? "h(" : "(") + row + " + " + at + ")";
  };
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
    << (half ? "f16" : q8 ? "q8_0" : "f32") << " KV rows of " << s.headDim
    << (rows ? ", rows by pointer" : "") << "\n"
    << "extern \"C\" void " << s.symbol()
    << (rows ? "(const float *q, const " + elem + " *const *krows, const " + elem +
                   " *const *vrows, int64_t n, float *w, int64_t ldw, float *out) {\n"
             : std::string("(const float *q, const float *k, const float *v, int64_t n, float *w, "
                           "int64_t ldw, float *out) {\n"))
    << "  constexpr int HD = " << s.headDim << ", G = " << s.heads << ", GS = " << gs
    << ", CH = " << ch << ", RB = " << rowBytes << ";\n";
  if (q8)
    o << "  constexpr int SC = 2 * (HD / " << kKvQ8Group << ");\n";
  o << "  constexpr float SCALE = " << num(1.0 / std::sqrt(double(s.headDim))) << "f;\n"
    << "  int64_t j = 0;\n"
    << "  for (; j + 4 <= n; j += 4)\n"
    << "    for (int g0 = 0; g0 < G; g0 += GS) {\n"
    << "      // Rows four passes ahead: keys into L1, values into L2 for the value\n"
    << "      // pass (pool blocks defeat the hardware's stream detection, and a\n"
    << "      // batch's caches do not stay in the last-level cache between steps).\n"
    << "      if (g0 == 0 && j + 20 <= n)\n"
    << "        for (int i = 0; i < 4; ++i)\n"
    << "          for (int b = 0; b < RB; b += 64) {\n"
    << "            __builtin_prefetch(reinterpret_cast<const char *>(" << keyAhead << ") + b);\n"
    << "            __builtin_prefetch(reinterpret_cast<const char *>(" << valueFar
    << ") + b, 0, 2);\n"
    << "          }\n"
    << "      v8f a[GS][4] = {};\n"
    << "      for (int d = 0; d < HD; d += 8) {\n"
    << "        v8f kv[4];\n"
    << "        for (int i = 0; i < 4; ++i)\n"
    << "          kv[i] = " << load(8, keyRow, "d") << ";\n"
    << "        for (int g = 0; g < GS; ++g) {\n"
    << "          const v8f qv = load8(q + (g0 + g) * HD + d);\n"
    << "          for (int i = 0; i < 4; ++i)\n"
    << "            a[g][i] += qv * kv[i];\n"
    << "        }\n"
    << "      }\n"
    << "      for (int g = 0; g < GS; ++g) {\n"
    << "        const v4f s4 = hsum8x4(a[g][0], a[g][1], a[g][2], a[g][3]) * SCALE;\n"
    << "        std::memcpy(w + (g0 + g) * ldw + j, &s4, sizeof s4);\n"
    << "      }\n"
    << "    }\n"
    << "  for (; j < n; ++j) {\n";
  if (half)
    o << "    float kj[HD];\n"
      << "    for (int d = 0; d < HD; ++d)\n"
      << "      kj[d] = h2f(reinterpret_cast<const unsigned char *>(" << keyTail << " + d));\n";
  else if (q8)
    o << "    float kj[HD];\n"
      << "    for (int d = 0; d < HD; ++d)\n"
      << "      kj[d] = float(int8_t(" << keyTail << "[SC + d])) * h2f(" << keyTail
      << " + 2 * (d / " << kKvQ8Group << "));\n";
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
    << "  }\n";
  // The weighted sum of value rows, in 8-lane vectors, or at AVX-512 in
  // 16-lane registers: the same per-lane fused multiply-adds, half the
  // instructions. `prefetch`: the statement that fetches rows ahead.
  auto valueSums = [&](int lanes, const std::string &vec, const std::string &splatFn,
                       const std::string &fma, const std::string &storeFn,
                       const std::string &prefetch) {
    const int perPass = divisorAtMost(s.headDim / lanes, std::max(1, 12 / gs)); // chunks
    const std::string L = std::to_string(lanes), C = std::to_string(perPass);
    o << "  for (int g0 = 0; g0 < G; g0 += GS)\n"
      << "    for (int c = 0; c < HD; c += " << L << " * " << C << ") {\n"
      << "      " << vec << " acc[GS][" << C << "] = {};\n"
      << "      for (int64_t r = 0; r < n; ++r) {\n"
      << prefetch << "        const " << elem << " *vr = " << valueRow << ";\n"
      << "        " << vec << " vv[" << C << "];\n"
      << "        for (int x = 0; x < " << C << "; ++x)\n"
      << "          vv[x] = " << load(lanes, "vr", "c + " + L + " * x") << ";\n"
      << "        for (int g = 0; g < GS; ++g) {\n"
      << "          const " << vec << " p = " << splatFn << "(w[(g0 + g) * ldw + r]);\n"
      << "          for (int x = 0; x < " << C << "; ++x)\n"
      << "            " << fma << ";\n"
      << "        }\n"
      << "      }\n"
      << "      for (int g = 0; g < GS; ++g)\n"
      << "        for (int x = 0; x < " << C << "; ++x)\n"
      << "          " << storeFn << "(out + (g0 + g) * HD + c + " << L << " * x, acc[g][x]);\n"
      << "    }\n";
  };
  if (s.headDim % 16 == 0) {
    o << "#ifdef __AVX512F__\n";
    valueSums(16, "__m512", "_mm512_set1_ps", "acc[g][x] = _mm512_fmadd_ps(p, vv[x], acc[g][x])",
              "_mm512_storeu_ps",
              "        if (r + 8 < n && c == 0)\n"
              "          for (int b = 0; b < RB; b += 64)\n"
              "            __builtin_prefetch(reinterpret_cast<const char *>(" + valueAhead +
                  ") + b);\n");
    o << "#else\n";
  }
  valueSums(8, "v8f", "splat", "acc[g][x] += p * vv[x]", "store8",
            "        if (r + 8 < n)\n"
            "          for (int x = 0; x < CH; x += 2)\n"
            "            __builtin_prefetch(" + valueAhead + (q8 ? " + SC" : "") +
                " + c + 8 * x);\n");
  if (s.headDim % 16 == 0)
    o << "#endif\n";
  o << "}\n";
  return o.str();
}

} // namespace llmc::codegen::detail
