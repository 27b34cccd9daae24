//===- ReaderUtil.h - Helpers shared by the model readers ------*- C++ -*-===//
// Memory-mapped files and owned buffers that keep tensor bytes alive, error
// helpers that name the file, checked arithmetic for sizes read from
// untrusted headers, and the final consistency check every reader runs on
// the SourceModel it produced (tensor names, shapes and byte sizes against
// the config), so a reader bug or a lying file fails here, clearly.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/SourceModel.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc {

/// Throws ImportError("<file>: <problem>").
[[noreturn]] void importFail(const std::string &file, const std::string &problem);

/// A read-only mmap of a whole file. An empty file maps to size 0.
class MappedFile : public SourceBuffer {
public:
  static std::shared_ptr<MappedFile> open(const std::string &path);
  ~MappedFile() override;
  const uint8_t *data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string &path() const { return path_; }

private:
  MappedFile() = default;
  std::string path_;
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
  void *map_ = nullptr;
};

/// Bytes the reader made itself (stacked experts, a converted tensor).
struct OwnedBuffer : SourceBuffer {
  std::vector<uint8_t> bytes;
};

/// Adds tensor `name`: n float32 ones in a buffer of its own (the scale of
/// a norm a checkpoint stores without one, e.g. OLMo's LayerNorms).
void addUnitScale(SourceModel &m, const std::string &name, int64_t n);

/// Whole file as a string; throws ImportError if it cannot be read.
std::string readTextFile(const std::string &path);
bool fileExists(const std::string &path);
bool isDirectory(const std::string &path);
std::string joinPath(const std::string &dir, const std::string &name);
std::string parentDir(const std::string &path);

/// a*b, or false if it overflows int64 or either is negative.
bool checkedMul(int64_t a, int64_t b, int64_t &out);
/// Product of a shape's dims with overflow and sign checks.
bool checkedNumElements(const std::vector<int64_t> &shape, int64_t &out);
/// Bytes of a tensor of this shape and type; ImportError (naming file and
/// tensor) if the innermost dim is not whole blocks or the size overflows.
int64_t tensorBytes(const std::string &file, const std::string &tensor, DType t,
                    const std::vector<int64_t> &shape);

std::string shapeString(const std::vector<int64_t> &shape);

/// Checks the config is usable and that every tensor the architecture needs
/// is present with the right shape and byte size. Throws ImportError naming
/// `m.path` and the first problem.
void validateSourceModel(const SourceModel &m);

} // namespace llmc
