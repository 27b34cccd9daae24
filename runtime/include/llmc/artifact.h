//===- artifact.h - The .llmc artifact: format, loader, writer -*- C++ -*-===//
// Layout (all integers little endian):
//   0   char[8]  magic "LLMCART\0"
//   8   u32      format version (kArtifactVersion)
//   12  u32      flags (0)
//   16  u64      manifest offset      24 u64 manifest size (bytes of JSON)
//   32  u64      data offset (64-byte aligned)   40 u64 data size
//   48  u64      manifest checksum (checksum64 of the JSON bytes)
//   56  u64      header checksum (checksum64 of bytes 0..55)
//   64  ...      manifest JSON, then padding, then the data section.
// Every tensor starts at a 64-byte aligned offset inside the data section.
// The manifest (JSON) holds: format_version, config, pipeline, source,
// tokenizer, program, ir (optional MLIR text), tensors[{name, dtype, shape,
// offset (relative to data offset), nbytes, checksum}].
// Loading maps the file with mmap; tensor data is never copied.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/model.h"
#include "llmc/program.h"
#include "llmc/tokenizer.h"
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmc {

inline constexpr char kArtifactMagic[8] = {'L', 'L', 'M', 'C', 'A', 'R', 'T', '\0'};
inline constexpr uint32_t kArtifactVersion = 1;
inline constexpr int64_t kArtifactAlign = 64;

/// 64-bit checksum (fast, non-cryptographic) used for the manifest and tensors.
uint64_t checksum64(const void *data, size_t n, uint64_t seed = 0);

nlohmann::json configToJson(const ModelConfig &c);
ModelConfig configFromJson(const nlohmann::json &j);
nlohmann::json tokenizerToJson(const TokenizerData &t);
TokenizerData tokenizerFromJson(const nlohmann::json &j);

/// A loaded model: manifest + tensors. Backed by an mmap'd file or an
/// owned memory buffer (in-memory compile).
class Artifact {
public:
  /// Open and validate a file. Throws std::runtime_error naming the file and
  /// the problem (bad magic, unknown version, truncated, checksum mismatch).
  /// verify_tensors: also check every tensor's checksum.
  static std::unique_ptr<Artifact> open(const std::string &path, bool verify_tensors = true);
  /// Same, over a buffer holding a whole artifact (takes ownership).
  static std::unique_ptr<Artifact> fromBuffer(std::vector<uint8_t> bytes, const std::string &label,
                                              bool verify_tensors = true);
  ~Artifact();

  const nlohmann::json &manifest() const { return manifest_; }
  const ModelConfig &config() const { return config_; }
  const Program &program() const { return program_; }
  const TokenizerData &tokenizer() const { return tokenizer_; }
  /// nullptr if absent.
  const TensorView *tensor(const std::string &name) const;
  const std::vector<TensorView> &tensors() const { return tensors_; }
  uint64_t fileSize() const { return size_; }
  const std::string &path() const { return path_; }
  /// Drops the resident pages wholly inside [p, p + n) when the artifact is
  /// a read-only file mapping (open()): they are read from the file again
  /// if touched. Does nothing for buffers (fromBuffer) or ranges outside.
  void releasePages(const void *p, uint64_t n) const;

private:
  Artifact() = default;
  void parse(bool verify_tensors);
  /// Checks the listed (tensor index, checksum) pairs; throws naming the
  /// first mismatch in file order.
  void verifyChecksums(const std::string &path,
                       const std::vector<std::pair<size_t, uint64_t>> &list) const;
  std::string path_;
  const uint8_t *base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  nlohmann::json manifest_;
  ModelConfig config_;
  Program program_;
  TokenizerData tokenizer_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

/// Builds an artifact. Tensor bytes are provided by callbacks so a writer can
/// stream weights straight from an mmap'd source file.
class ArtifactWriter {
public:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    int64_t nbytes;
    const void *data; // must stay valid until write() returns
  };
  /// manifest: everything except "tensors" and "format_version", which the writer fills.
  ArtifactWriter(nlohmann::json manifest, std::vector<Tensor> tensors);
  /// Serialize to memory.
  std::vector<uint8_t> toBuffer() const;
  /// Write atomically: to PATH.tmp.XXXXXX in the same folder, fsync, rename.
  /// On any failure the temporary file is removed and PATH is untouched.
  /// Throws std::runtime_error.
  void writeFile(const std::string &path) const;

private:
  nlohmann::json manifest_;
  std::vector<Tensor> tensors_;
};

} // namespace llmc
