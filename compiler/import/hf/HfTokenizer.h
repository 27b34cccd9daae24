//===- HfTokenizer.h - TokenizerData from tokenizer.json -------*- C++ -*-===//
#pragma once
#include "llmc/tokenizer.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace llmc::hf {

/// Reads <dir>/tokenizer.json (BPE models) and <dir>/tokenizer_config.json.
/// Returns an empty TokenizerData when there is no tokenizer.json or its
/// model is not a supported BPE (a note is appended). `config` is the
/// parsed config.json (fallback for bos/eos ids). ImportError on invalid files.
TokenizerData readHfTokenizer(const std::string &dir, const nlohmann::json &config,
                              std::vector<std::pair<std::string, std::string>> &notes);

} // namespace llmc::hf
