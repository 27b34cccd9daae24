//===- ArtifactLayout.h - The 64-byte .llmc header, encoded/decoded -*- C++ -*-===//
// One place for the byte layout documented in llmc/artifact.h, used by both
// the loader and the writer, plus the tensor byte-size rule they share.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/signing.h"

#include <cstring>
#include <string>
#include <vector>

namespace llmc::layout {

inline constexpr size_t kHeaderSize = 64;

/// Header flag: a signature block follows the data section.
inline constexpr uint32_t kFlagSigned = 1;
/// The signature block (at data_offset + data_size, the end of the file):
///   0 char[8] "LLMCSIG\0"   8 u32 algorithm (1: Ed25519 over SHA-256
///   digests, see llmc/signing.h)   12 u32 flags (0)   16 u8[32] signer's
///   public key   48 u8[64] signature   112 u8[16] zero.
inline constexpr size_t kSignatureBlockSize = 128;
inline constexpr size_t kSignerKeyOffset = 16;
inline constexpr size_t kSignedBlockPrefix = 48; // magic .. signer key: signed
inline constexpr char kSignatureMagic[8] = {'L', 'L', 'M', 'C', 'S', 'I', 'G', '\0'};
inline constexpr uint32_t kSignatureAlgorithm = 1;

struct Header {
  uint32_t version = kArtifactVersion;
  uint32_t flags = 0;
  uint64_t manifest_offset = 0, manifest_size = 0;
  uint64_t data_offset = 0, data_size = 0;
  uint64_t manifest_checksum = 0;
  uint64_t header_checksum = 0;
};

template <class T> inline void put(uint8_t *p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    p[i] = uint8_t(uint64_t(v) >> (8 * i));
}
template <class T> inline T get(const uint8_t *p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= uint64_t(p[i]) << (8 * i);
  return T(v);
}

/// Encode h into 64 bytes, computing the header checksum.
inline void encode(const Header &h, uint8_t out[kHeaderSize]) {
  std::memset(out, 0, kHeaderSize);
  std::memcpy(out, kArtifactMagic, 8);
  put<uint32_t>(out + 8, h.version);
  put<uint32_t>(out + 12, h.flags);
  put<uint64_t>(out + 16, h.manifest_offset);
  put<uint64_t>(out + 24, h.manifest_size);
  put<uint64_t>(out + 32, h.data_offset);
  put<uint64_t>(out + 40, h.data_size);
  put<uint64_t>(out + 48, h.manifest_checksum);
  put<uint64_t>(out + 56, checksum64(out, 56));
}

/// Decode the fields (no validation).
inline Header decode(const uint8_t *in) {
  Header h;
  h.version = get<uint32_t>(in + 8);
  h.flags = get<uint32_t>(in + 12);
  h.manifest_offset = get<uint64_t>(in + 16);
  h.manifest_size = get<uint64_t>(in + 24);
  h.data_offset = get<uint64_t>(in + 32);
  h.data_size = get<uint64_t>(in + 40);
  h.manifest_checksum = get<uint64_t>(in + 48);
  h.header_checksum = get<uint64_t>(in + 56);
  return h;
}

/// The message an artifact's signature is over (llmc/signing.h).
inline std::string signedMessage(const uint8_t *header, const uint8_t *manifest,
                                 size_t manifestSize, const uint8_t *blockPrefix) {
  static const char kDomain[] = "llmc-artifact-signature-v1";
  std::string m(kDomain, sizeof kDomain); // with its NUL
  for (const signing::Digest &d :
       {signing::sha256(header, kHeaderSize), signing::sha256(manifest, manifestSize),
        signing::sha256(blockPrefix, kSignedBlockPrefix)})
    m.append(reinterpret_cast<const char *>(d.data()), d.size());
  return m;
}

inline uint64_t alignUp(uint64_t v) {
  return (v + uint64_t(kArtifactAlign) - 1) & ~uint64_t(kArtifactAlign - 1);
}

inline std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Bytes a tensor of this dtype and shape occupies, or an error message in
/// `why` (negative dims, row length not a multiple of the block size,
/// overflow). Returns -1 on error.
inline int64_t expectedBytes(DType t, const std::vector<int64_t> &shape, std::string &why) {
  const DTypeInfo &info = dtypeInfo(t);
  int64_t cols = shape.empty() ? 1 : shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      why = "negative dimension in shape " + shapeString(shape);
      return -1;
    }
    if (shape[i] > (int64_t(1) << 40)) {
      why = "dimension too large in shape " + shapeString(shape);
      return -1;
    }
  }
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    if (shape[i] != 0 && rows > (int64_t(1) << 50) / shape[i]) {
      why = "shape " + shapeString(shape) + " is too large";
      return -1;
    }
    rows *= shape[i];
  }
  if (cols % info.block_size != 0) {
    why = "row length " + std::to_string(cols) + " is not a multiple of the " +
          std::string(info.name) + " block size " + std::to_string(info.block_size);
    return -1;
  }
  int64_t row = cols / info.block_size * info.block_bytes;
  if (row != 0 && rows > (int64_t(1) << 50) / row) {
    why = "shape " + shapeString(shape) + " is too large";
    return -1;
  }
  return rows * row;
}

} // namespace llmc::layout
