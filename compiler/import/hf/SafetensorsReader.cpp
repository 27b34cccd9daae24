//===- SafetensorsReader.cpp - Minimal .safetensors parser -----------------===//
// See Safetensors.h.
//===----------------------------------------------------------------------===//
#include "compiler/import/hf/Safetensors.h"

#include <cstring>
#include <nlohmann/json.hpp>

namespace llmc::safetensors {

namespace {

struct TypeEntry {
  const char *name;
  int64_t bytes;
  std::optional<DType> dtype;
};
const TypeEntry kTypes[] = {
    {"F32", 4, DType::F32}, {"F16", 2, DType::F16},      {"BF16", 2, DType::BF16},
    {"F64", 8, std::nullopt}, {"I64", 8, std::nullopt},  {"U64", 8, std::nullopt},
    {"I32", 4, std::nullopt}, {"U32", 4, std::nullopt},  {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt}, {"I8", 1, std::nullopt},   {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const TypeEntry *lookupType(const std::string &name) {
  for (const TypeEntry &t : kTypes)
    if (name == t.name)
      return &t;
  return nullptr;
}

constexpr uint64_t kMaxHeader = uint64_t(100) << 20; // 100 MB, as the reference library

} // namespace

File File::open(const std::string &path) {
  File f;
  f.path_ = path;
  f.map_ = MappedFile::open(path);
  const uint8_t *p = f.map_->data();
  const uint64_t size = f.map_->size();
  if (size < 8)
    importFail(path, "not a safetensors file: too small (" + std::to_string(size) + " bytes)");
  uint64_t header_len;
  std::memcpy(&header_len, p, 8);
  if (header_len > kMaxHeader || header_len > size - 8)
    importFail(path, "safetensors header size " + std::to_string(header_len) +
                         " exceeds the file (" + std::to_string(size) + " bytes; truncated?)");
  const uint8_t *data = p + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(p + 8, p + 8 + header_len);
  } catch (const nlohmann::json::exception &e) {
    importFail(path, std::string("invalid safetensors header JSON: ") + e.what());
  }
  if (!header.is_object())
    importFail(path, "safetensors header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__")
      continue;
    const std::string &name = it.key();
    const nlohmann::json &j = it.value();
    auto bad = [&](const std::string &what) {
      importFail(path, "tensor " + name + " in the safetensors header: " + what);
    };
    if (!j.is_object() || !j.contains("dtype") || !j["dtype"].is_string() || !j.contains("shape") ||
        !j["shape"].is_array() || !j.contains("data_offsets") || !j["data_offsets"].is_array() ||
        j["data_offsets"].size() != 2)
      bad("needs dtype (string), shape (array) and data_offsets ([begin, end])");
    Entry e;
    e.name = name;
    e.dtype_name = j["dtype"].get<std::string>();
    const TypeEntry *type = lookupType(e.dtype_name);
    if (!type)
      bad("unknown dtype " + e.dtype_name);
    e.dtype = type->dtype;
    for (const auto &d : j["shape"]) {
      if (!d.is_number_unsigned())
        bad("shape entries must be non-negative integers");
      uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t(1) << 40))
        bad("dimension " + std::to_string(v) + " is too large");
      e.shape.push_back(int64_t(v));
    }
    const auto &offs = j["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      bad("data_offsets must be non-negative integers");
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size)
      bad("data [" + std::to_string(begin) + ", " + std::to_string(end) +
          ") is out of bounds of the data section (" + std::to_string(data_size) +
          " bytes; truncated file?)");
    int64_t n, want;
    if (!checkedNumElements(e.shape, n) || !checkedMul(n, type->bytes, want))
      bad("shape " + shapeString(e.shape) + " is too large");
    if (uint64_t(want) != end - begin)
      bad("holds " + std::to_string(end - begin) + " bytes but shape " + shapeString(e.shape) +
          " of " + e.dtype_name + " needs " + std::to_string(want));
    e.data = data + begin;
    e.nbytes = want;
    f.index_.emplace(e.name, f.entries_.size());
    f.entries_.push_back(std::move(e));
  }
  return f;
}

const Entry *File::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

} // namespace llmc::safetensors
