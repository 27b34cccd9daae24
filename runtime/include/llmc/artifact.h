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
#include "llmc/signing.h"
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

/// What an artifact's signature says, against a set of trusted keys.
enum class SignatureStatus {
  Unsigned,        // no signature block
  Trusted,         // valid, by a trusted key
  UntrustedSigner, // valid, by a key not trusted here
  Invalid,         // the signature does not verify (tampered header, manifest or block)
};
struct SignatureCheck {
  SignatureStatus status = SignatureStatus::Unsigned;
  std::string signer; // the signer key's fingerprint ("" when unsigned)
  /// One line for messages: "unsigned", "signed by ed25519:... (trusted)", ...
  std::string describe() const;
};

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
  /// An artifact over tensors that live elsewhere, for a process that made
  /// them (a compiler's probes): `manifest` as an artifact's (its config,
  /// program and tokenizer; "tensors" is not read), and `tensors` viewed in
  /// place: no copy, no checksum, so they must outlive the artifact. Throws
  /// std::runtime_error as fromBuffer does on a bad manifest or a duplicate
  /// tensor name.
  static std::unique_ptr<Artifact> fromViews(nlohmann::json manifest,
                                             std::vector<TensorView> tensors,
                                             const std::string &label);
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

  /// Verifies the signature over header, manifest and signature block, then
  /// looks the signer up among `trusted`.
  SignatureCheck checkSignature(const std::vector<signing::PublicKey> &trusted) const;
  /// The manifest's SHA-256 of a tensor (signed artifacts), else nullptr.
  const signing::Digest *tensorDigest(const std::string &name) const;
  /// Compiled by this process (in memory): its native code is as trusted as
  /// the compiler that made it.
  void markBuiltInThisProcess() { builtHere_ = true; }
  bool builtInThisProcess() const { return builtHere_; }

private:
  Artifact() = default;
  void parse(bool verify_tensors);
  void parseManifest(const uint8_t *bytes, uint64_t size, uint64_t checksum);
  /// config_, program_ and tokenizer_ from manifest_.
  void readManifestFields();
  void parseTensors(const uint8_t *data, uint64_t dataSize, bool verify_tensors);
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
  bool signed_ = false, builtHere_ = false;
  // Signed artifacts: private copies of what the signature is over.
  std::vector<uint8_t> headerCopy_, manifestCopy_, signatureBlock_;
  std::unordered_map<std::string, signing::Digest> digests_;
  void parseSignatureBlock(uint64_t dataEnd);
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
  /// Sign what is written with `key` (see llmc/signing.h): every tensor's
  /// SHA-256 in the manifest, the header's signed flag, a signature block
  /// after the data section.
  void signWith(const signing::SecretKey &key);
  /// Serialize to memory.
  std::vector<uint8_t> toBuffer() const;
  /// Write atomically: to PATH.tmp.XXXXXX in the same folder, fsync, rename.
  /// On any failure the temporary file is removed and PATH is untouched.
  /// Throws std::runtime_error.
  void writeFile(const std::string &path) const;

private:
  nlohmann::json manifest_;
  std::vector<Tensor> tensors_;
  std::shared_ptr<const signing::SecretKey> key_;
};

} // namespace llmc
