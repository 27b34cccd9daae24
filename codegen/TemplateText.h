//===- TemplateText.h - Filling the generated kernels' text templates -*- C++ -*-===//
// The CPU and CUDA backends write kernels as text templates with @FIELD@
// placeholders; this is their one substitution.
//===----------------------------------------------------------------------===//
#pragma once
#include <string>

namespace llmc::codegen {

/// s with every occurrence of `from` replaced by `to` (left to right; the
/// replacement text is not searched again).
inline std::string replaceAll(std::string s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

} // namespace llmc::codegen
