//===- GgufFile.h - Low-level GGUF v2/v3 container parser ------*- C++ -*-===//
// Parses a memory-mapped GGUF file: header, metadata key/values (all value
// types, nested arrays) and tensor infos. Nothing is copied: strings and
// arrays point into the mapping. Every size read from the file is bounds
// checked; problems throw ImportError naming the file.
//
// Layout (little endian): "GGUF", u32 version, u64 tensor_count,
// u64 kv_count, kv_count x (string key, u32 type, value), tensor_count x
// (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml_type,
// u64 offset), padding to general.alignment (default 32), tensor data.
// A string is u64 length + bytes; an array is u32 type, u64 count, values.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/ReaderUtil.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmc::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char *valueTypeName(ValueType t);

/// One metadata value. Scalars are decoded; arrays keep a pointer to their
/// (already bounds-checked) elements.
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;        // unsigned integers and bool
  int64_t i = 0;         // signed integers
  double f = 0.0;        // floats
  std::string_view s;    // strings
  ValueType elem_type = ValueType::U8; // arrays
  uint64_t count = 0;
  const uint8_t *elems = nullptr;

  bool isInteger() const;
  bool isFloat() const { return type == ValueType::F32 || type == ValueType::F64; }
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne; // innermost first, as stored
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  uint64_t offset = 0; // relative to the data section
  int64_t nbytes = 0;
};

class File {
public:
  /// Maps and parses `path`; throws ImportError on any malformation.
  static File open(const std::string &path);

  const std::string &path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::shared_ptr<MappedFile> &mapping() const { return map_; }
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, Value>> &metadata() const { return kv_; }
  /// Start of a tensor's bytes in the mapping.
  const uint8_t *tensorData(const TensorInfo &t) const { return map_->data() + data_offset_ + t.offset; }

  const Value *find(const std::string &key) const;
  /// Typed getters: nullopt when absent; ImportError when present with an
  /// unsuitable type (naming the key).
  std::optional<int64_t> getInt(const std::string &key) const;
  std::optional<double> getFloat(const std::string &key) const;
  std::optional<bool> getBool(const std::string &key) const;
  std::optional<std::string> getString(const std::string &key) const;
  /// Arrays; empty optional when absent; ImportError on a wrong element type.
  std::optional<std::vector<std::string>> getStringArray(const std::string &key) const;
  std::optional<std::vector<float>> getFloatArray(const std::string &key) const;
  std::optional<std::vector<int32_t>> getIntArray(const std::string &key) const;

private:
  [[noreturn]] void fail(const std::string &problem) const { importFail(path_, problem); }
  const Value &expectArray(const std::string &key, const Value &v) const;

  std::string path_;
  std::shared_ptr<MappedFile> map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;

  friend class Parser;
};

/// ggml type id -> llmc DType (nullopt: not supported by llmc).
std::optional<DType> dtypeFromGgmlType(uint32_t ggml_type);
/// Printable name of a ggml type id ("q3_k", "iq2_xs", "type 77").
std::string ggmlTypeName(uint32_t ggml_type);

} // namespace llmc::gguf
