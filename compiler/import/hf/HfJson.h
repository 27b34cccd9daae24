//===- HfJson.h - Checked access to Hugging Face JSON files ----*- C++ -*-===//
// Parsing config.json / tokenizer.json / tokenizer_config.json with errors
// that name the file and the key instead of nlohmann's type_error.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/ReaderUtil.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace llmc::hf {

/// Parses a JSON file; ImportError naming it if unreadable or invalid.
nlohmann::json parseJsonFile(const std::string &path);

/// Typed optional fields of a JSON object: nullopt when absent or null,
/// ImportError (naming file and key) when of the wrong type.
std::optional<int64_t> optInt(const nlohmann::json &j, const char *key, const std::string &file);
std::optional<double> optNumber(const nlohmann::json &j, const char *key, const std::string &file);
std::optional<bool> optBool(const nlohmann::json &j, const char *key, const std::string &file);
std::optional<std::string> optString(const nlohmann::json &j, const char *key,
                                     const std::string &file);
int64_t requireInt(const nlohmann::json &j, const char *key, const std::string &file);

} // namespace llmc::hf
