//===- CpuKernelSource.cpp - C++ source of the model's CPU kernels --------===//
// Assembles the translation unit of a model's generated kernels: the common
// prelude (CpuKernelPrelude.cpp), per (format, width) the f32-activation
// kernel (CpuFloatKernels.cpp) and the int8-activation eight-row kernel
// (CpuRows8Kernels.cpp), then the op kernels (CpuOpKernels.cpp). Also the
// row decoders of embedding lookups.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuKernelSource.h"
#include "codegen/cpu/CpuKernelParts.h"
#include "codegen/cpu/CpuOpKernels.h"

#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace llmc::codegen {

using detail::Layout;
using detail::layoutOf;

namespace {

/// A grouped-integer row (llmc/format/grouped_int.h): per group an f16
/// scale (and f16 minimum when asymmetric), then 8 codes per `bits` bytes,
/// code i at bit i * bits.
std::string groupedRowDecoder(const GroupedIntSpec &g, int64_t cols, const std::string &name) {
  std::ostringstream o;
  const int hdr = g.sym ? 2 : 4;
  o << "\n// one " << (g.sym ? "symmetric" : "asymmetric") << " " << g.bits
    << "-bit grouped-integer row of " << cols << " (groups of " << g.group << ") to floats\n";
  o << "extern \"C\" void " << name << "(const unsigned char *row, float *out) {\n";
  o << "  constexpr int B = " << g.bits << ", G = " << g.group << ", NG = " << cols / g.group
    << ", HDR = " << hdr << ", GBYTES = HDR + G * B / 8;\n";
  o << "  constexpr uint64_t MASK = (uint64_t(1) << B) - 1;\n";
  o << "  for (int k = 0; k < NG; ++k) {\n";
  o << "    const unsigned char *blk = row + k * GBYTES;\n";
  o << "    const float d = h2f(blk);\n";
  if (!g.sym)
    o << "    const float m = h2f(blk + 2);\n";
  o << "    for (int j = 0; j < G; j += 8) {\n";
  o << "      uint64_t v = 0;\n";
  o << "      std::memcpy(&v, blk + HDR + j / 8 * B, B);\n";
  o << "      for (int i = 0; i < 8; ++i)\n";
  if (g.sym)
    o << "        out[k * G + j + i] = d * float(int((v >> (i * B)) & MASK) - " << (1 << (g.bits - 1))
      << ");\n";
  else
    o << "        out[k * G + j + i] = d * float(int((v >> (i * B)) & MASK)) + m;\n";
  o << "    }\n  }\n}\n";
  return o.str();
}

} // namespace

std::string rowDecoderSource(DType dtype, int64_t cols, const std::string &name) {
  if (std::optional<GroupedIntSpec> g = groupedIntSpec(dtype); g && cols % g->group == 0)
    return groupedRowDecoder(*g, cols, name);
  if (!canGenerate(dtype, cols))
    throw std::invalid_argument("no generated row decoder for " + std::string(dtypeName(dtype)) +
                                " rows of " + std::to_string(cols));
  std::ostringstream o;
  o << "\n// one " << dtypeName(dtype) << " row of " << cols << " to floats\n";
  o << "extern \"C\" void " << name << "(const unsigned char *row, float *out) {\n";
  if (dtype == DType::F32) {
    o << "  std::memcpy(out, row, sizeof(float) * " << cols << ");\n}\n";
    return o.str();
  }
  if (dtype == DType::F16 || dtype == DType::BF16) {
    o << "  for (int j = 0; j < " << cols << "; ++j)\n"
      << "    out[j] = " << (dtype == DType::F16 ? "h2f" : "bf2f") << "(row + 2 * j);\n}\n";
    return o.str();
  }
  Layout l;
  layoutOf(dtype, l);
  o << "  constexpr int NB = " << cols / l.block << ", BYTES = " << l.bytes << ";\n";
  o << "  for (int b = 0; b < NB; ++b) {\n";
  o << "    const unsigned char *blk = row + b * BYTES;\n";
  o << "    {\n";
  o << detail::decodeBlock(dtype);
  o << "        float *ob = out + b * 32;\n";
  o << "        const v8f dv = v8f{d, d, d, d, d, d, d, d};\n";
  const bool minTerm = dtype == DType::Q4_1 || dtype == DType::Q5_1;
  if (minTerm)
    o << "        const v8f mv = v8f{m, m, m, m, m, m, m, m};\n";
  const std::string add = minTerm ? " + mv" : "";
  for (int k = 0; k < 4; ++k)
    o << "        { const v8f r = w" << k << " * dv" << add << "; std::memcpy(ob + " << 8 * k
      << ", &r, sizeof r); }\n";
  o << "    }\n  }\n}\n";
  return o.str();
}

std::string MatvecSpec::symbol() const {
  return "llmc_mv_" + std::string(dtypeName(dtype)) + "_" + std::to_string(cols);
}

std::string MatvecSpec::rows8Symbol() const {
  return "llmc_r8_" + std::string(dtypeName(dtype)) + "_" + std::to_string(cols);
}

bool hasRows8Kernel(DType dtype) {
  return dtype == DType::Q4_0 || dtype == DType::Q4_1 || dtype == DType::Q8_0 ||
         dtype == DType::Q5_0 || dtype == DType::Q5_1 || dtype == DType::Q4_K;
}

bool canGenerateRows8(DType dtype, int64_t cols) {
  return hasRows8Kernel(dtype) && cols > 0 && cols % (dtype == DType::Q4_K ? 256 : 32) == 0;
}

bool canGenerate(DType dtype, int64_t cols) {
  Layout l;
  return layoutOf(dtype, l) && cols > 0 && cols % l.block == 0;
}

std::string kernelSource(const std::vector<MatvecSpec> &specs,
                         const std::vector<OpKernelSpec> &ops) {
  std::string out = detail::kernelPrelude();
  std::set<std::pair<int, int64_t>> seen;
  for (const MatvecSpec &s : specs) {
    const bool f32 = canGenerate(s.dtype, s.cols), int8 = canGenerateRows8(s.dtype, s.cols);
    if (!f32 && !int8)
      throw std::invalid_argument("no generated kernel for " + std::string(dtypeName(s.dtype)) +
                                  " rows of " + std::to_string(s.cols));
    if (seen.insert({int(s.dtype), s.cols}).second) {
      if (f32)
        out += detail::f32ActivationKernel(s); // Q4_K: the int8 kernel only
      if (int8)
        out += detail::rows8Kernel(s);
    }
  }
  return out + opKernelSource(ops);
}

} // namespace llmc::codegen
