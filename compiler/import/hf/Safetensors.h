//===- Safetensors.h - Minimal .safetensors parser -------------*- C++ -*-===//
// A safetensors file is: u64 (little endian) header size N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//  "__metadata__": {...}}, then the data section the offsets point into.
// The file is memory-mapped; entries point into the mapping. Offsets, sizes
// and dtypes are checked against each other; ImportError names the file.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/ReaderUtil.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmc::safetensors {

struct Entry {
  std::string name;
  std::string dtype_name;      // as written, e.g. "BF16"
  std::optional<DType> dtype;  // nullopt: a type llmc does not store (I64, F8_E4M3...)
  std::vector<int64_t> shape;  // outermost first
  const uint8_t *data = nullptr;
  int64_t nbytes = 0;
};

class File {
public:
  static File open(const std::string &path);
  const std::string &path() const { return path_; }
  const std::shared_ptr<MappedFile> &mapping() const { return map_; }
  const std::vector<Entry> &entries() const { return entries_; }
  const Entry *find(const std::string &name) const;

private:
  std::string path_;
  std::shared_ptr<MappedFile> map_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

} // namespace llmc::safetensors
