//===- HfJsonReader.cpp - Checked access to Hugging Face JSON files --------===//
// See HfJson.h.
//===----------------------------------------------------------------------===//
#include "compiler/import/hf/HfJson.h"

namespace llmc::hf {

nlohmann::json parseJsonFile(const std::string &path) {
  std::string text = readTextFile(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    importFail(path, std::string("invalid JSON: ") + e.what());
  }
}

namespace {
const nlohmann::json *field(const nlohmann::json &j, const char *key) {
  if (!j.is_object())
    return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return nullptr;
  return &*it;
}
// A JSON value for an error message, cut short if long.
std::string brief(const nlohmann::json &v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}
} // namespace

std::optional<int64_t> optInt(const nlohmann::json &j, const char *key, const std::string &file) {
  const nlohmann::json *v = field(j, key);
  if (!v)
    return std::nullopt;
  if (v->is_number_integer())
    return v->get<int64_t>();
  if (v->is_number_unsigned() && v->get<uint64_t>() <= uint64_t(INT64_MAX))
    return int64_t(v->get<uint64_t>());
  importFail(file, std::string("\"") + key + "\" should be an integer, found " + brief(*v));
}

std::optional<double> optNumber(const nlohmann::json &j, const char *key, const std::string &file) {
  const nlohmann::json *v = field(j, key);
  if (!v)
    return std::nullopt;
  if (v->is_number())
    return v->get<double>();
  importFail(file, std::string("\"") + key + "\" should be a number, found " + brief(*v));
}

std::optional<bool> optBool(const nlohmann::json &j, const char *key, const std::string &file) {
  const nlohmann::json *v = field(j, key);
  if (!v)
    return std::nullopt;
  if (v->is_boolean())
    return v->get<bool>();
  importFail(file, std::string("\"") + key + "\" should be true or false, found " + brief(*v));
}

std::optional<std::string> optString(const nlohmann::json &j, const char *key,
                                     const std::string &file) {
  const nlohmann::json *v = field(j, key);
  if (!v)
    return std::nullopt;
  if (v->is_string())
    return v->get<std::string>();
  importFail(file, std::string("\"") + key + "\" should be a string, found " + brief(*v));
}

int64_t requireInt(const nlohmann::json &j, const char *key, const std::string &file) {
  auto v = optInt(j, key, file);
  if (!v)
    importFail(file, std::string("missing \"") + key + "\"");
  return *v;
}

} // namespace llmc::hf
