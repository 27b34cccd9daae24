//===- GgufTokenizer.h - TokenizerData from GGUF metadata ------*- C++ -*-===//
#pragma once
#include "compiler/import/gguf/GgufFile.h"
#include "llmc/tokenizer.h"

#include <string>
#include <utility>
#include <vector>

namespace llmc::gguf {

/// Tokenizer from tokenizer.ggml.*; empty if the file has none or an
/// unsupported model (a note is appended). ImportError on inconsistent data.
TokenizerData readGgufTokenizer(const File &f,
                                std::vector<std::pair<std::string, std::string>> &notes);

} // namespace llmc::gguf
