//===- JsonFields.h - Checked access to manifest JSON fields ----*- C++ -*-===//
// Small helpers shared by the artifact and program (de)serializers: read a
// typed field with a clear error naming the context and the key, and store
// byte strings that may not be valid UTF-8 (JSON text must be UTF-8).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/signing.h"
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <optional>
#include <string>
#include <string_view>

namespace llmc::jsonf {

using nlohmann::json;

[[noreturn]] inline void fail(const std::string &ctx, const std::string &msg) {
  throw std::runtime_error(ctx + ": " + msg);
}

inline const json *find(const json &obj, const char *key) {
  if (!obj.is_object())
    return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null())
    return nullptr;
  return &*it;
}

inline const json &require(const json &obj, const char *key, const std::string &ctx) {
  if (!obj.is_object())
    fail(ctx, "expected a JSON object");
  const json *v = find(obj, key);
  if (!v)
    fail(ctx, std::string("missing field '") + key + "'");
  return *v;
}

inline int64_t asInt(const json &v, const char *key, const std::string &ctx) {
  if (v.is_number_integer())
    return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == double(int64_t(d)))
      return int64_t(d);
  }
  fail(ctx, std::string("field '") + key + "' must be an integer");
}

inline int64_t getInt(const json &obj, const char *key, const std::string &ctx) {
  return asInt(require(obj, key, ctx), key, ctx);
}
inline int64_t getInt(const json &obj, const char *key, const std::string &ctx, int64_t def) {
  const json *v = find(obj, key);
  return v ? asInt(*v, key, ctx) : def;
}

inline double asDouble(const json &v, const char *key, const std::string &ctx) {
  if (!v.is_number())
    fail(ctx, std::string("field '") + key + "' must be a number");
  return v.get<double>();
}
inline double getDouble(const json &obj, const char *key, const std::string &ctx) {
  return asDouble(require(obj, key, ctx), key, ctx);
}
inline double getDouble(const json &obj, const char *key, const std::string &ctx, double def) {
  const json *v = find(obj, key);
  return v ? asDouble(*v, key, ctx) : def;
}

inline bool getBool(const json &obj, const char *key, const std::string &ctx, bool def) {
  const json *v = find(obj, key);
  if (!v)
    return def;
  if (!v->is_boolean())
    fail(ctx, std::string("field '") + key + "' must be true or false");
  return v->get<bool>();
}

inline std::string getString(const json &obj, const char *key, const std::string &ctx) {
  const json &v = require(obj, key, ctx);
  if (!v.is_string())
    fail(ctx, std::string("field '") + key + "' must be a string");
  return v.get<std::string>();
}
inline std::string getString(const json &obj, const char *key, const std::string &ctx,
                             const std::string &def) {
  const json *v = find(obj, key);
  if (!v)
    return def;
  if (!v->is_string())
    fail(ctx, std::string("field '") + key + "' must be a string");
  return v->get<std::string>();
}

/// True when s is well-formed UTF-8 (no overlongs, no surrogates).
inline bool isValidUtf8(const std::string &s) {
  const unsigned char *p = reinterpret_cast<const unsigned char *>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n)
      return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

/// A byte string as JSON: a plain string when it is valid UTF-8, otherwise
/// {"hex": "..."} so arbitrary bytes (raw vocabulary pieces) survive.
inline json bytesToJson(const std::string &s) {
  if (isValidUtf8(s))
    return s;
  static const char *digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(s.size() * 2);
  for (unsigned char c : s) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  return json{{"hex", hex}};
}

inline std::string bytesFromJson(const json &v, const std::string &ctx) {
  if (v.is_string())
    return v.get<std::string>();
  const json *h = find(v, "hex");
  if (!h || !h->is_string())
    fail(ctx, "expected a string or {\"hex\": ...}");
  const std::string &hex = h->get_ref<const std::string &>();
  if (hex.size() % 2)
    fail(ctx, "odd-length hex string");
  std::string out(hex.size() / 2, '\0');
  if (!signing::fromHex(hex, reinterpret_cast<uint8_t *>(out.data()), out.size()))
    fail(ctx, "bad hex digit");
  return out;
}

/// Field `key` naming a member of one of the closed sets of llmc/ir_enums.h
/// (`parse`: its generated parser, `spellings`: "a, b or c"); `def` when the
/// field is absent (nullopt: required).
template <class E, class Parse>
E getEnum(const json &obj, const char *key, const std::string &ctx, std::optional<E> def,
          Parse parse, std::string_view spellings) {
  const json *v = find(obj, key);
  if (!v && def)
    return *def;
  if (!v)
    fail(ctx, std::string("missing field '") + key + "'");
  if (!v->is_string())
    fail(ctx, std::string("field '") + key + "' must be a string");
  const std::string s = v->get<std::string>();
  if (std::optional<E> e = parse(s))
    return *e;
  fail(ctx, std::string("unknown ") + key + " '" + s + "' (expected " + std::string(spellings) + ")");
}

} // namespace llmc::jsonf
