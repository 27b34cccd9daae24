//===- Artifact.cpp - Open and validate a .llmc artifact -------------------===//
// Maps the file read-only (or adopts a memory buffer), checks the header
// (magic, version, checksum, section bounds), the manifest checksum and JSON,
// then builds TensorViews that point straight into the mapping after checking
// each tensor's dtype, shape, size, alignment, bounds and, optionally, its
// checksum. Every error names the file.
//===----------------------------------------------------------------------===//
#include "ArtifactLayout.h"
#include "JsonFields.h"
#include "llmc/artifact.h"
#include "llmc/threads.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <stdexcept>
#include <sys/mman.h>
#include <thread>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string &path, const std::string &msg) {
  throw std::runtime_error(path + ": " + msg);
}

} // namespace

std::unique_ptr<Artifact> Artifact::open(const std::string &path, bool verify_tensors) {
  std::unique_ptr<Artifact> a(new Artifact());
  a->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  a->size_ = uint64_t(st.st_size);
  if (a->size_ == 0) {
    ::close(fd);
    fail(path, "file is empty (not an llmc artifact)");
  }
  void *p = ::mmap(nullptr, a->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    fail(path, std::string("cannot map: ") + std::strerror(e));
  a->base_ = static_cast<const uint8_t *>(p);
  a->mapped_ = true;
  a->parse(verify_tensors);
  return a;
}

std::unique_ptr<Artifact> Artifact::fromBuffer(std::vector<uint8_t> bytes, const std::string &label,
                                               bool verify_tensors) {
  std::unique_ptr<Artifact> a(new Artifact());
  a->path_ = label;
  a->owned_ = std::move(bytes);
  a->base_ = a->owned_.data();
  a->size_ = a->owned_.size();
  a->parse(verify_tensors);
  return a;
}

void Artifact::releasePages(const void *p, uint64_t n) const {
  const auto *b = static_cast<const uint8_t *>(p);
  if (!mapped_ || b < base_ || b + n > base_ + size_)
    return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(b) + page - 1) / page * page, hi = uintptr_t(b + n) / page * page;
  if (hi > lo)
    ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
}

Artifact::~Artifact() {
  if (mapped_ && base_)
    ::munmap(const_cast<uint8_t *>(base_), size_);
}

const TensorView *Artifact::tensor(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

/// The header (from `copy`, the private copy the signature covers), checked
/// against the file's size: magic, version, checksum, flags, section bounds.
layout::Header checkHeader(const std::string &path, const uint8_t *base, uint64_t size,
                           std::vector<uint8_t> &copy) {
  if (size < 8 || std::memcmp(base, kArtifactMagic, 8) != 0)
    fail(path, "not an llmc artifact (bad magic)");
  if (size < layout::kHeaderSize)
    fail(path, "truncated artifact (" + std::to_string(size) + " bytes, the header alone needs 64)");
  copy.assign(base, base + layout::kHeaderSize); // decoded and signed: one read
  layout::Header h = layout::decode(copy.data());
  if (h.version != kArtifactVersion)
    fail(path, "unsupported artifact format version " + std::to_string(h.version) +
                   " (this runtime reads " + std::to_string(kArtifactVersion) + ")");
  if (checksum64(copy.data(), 56) != h.header_checksum)
    fail(path, "header checksum mismatch (the file is corrupted)");
  if ((h.flags & ~layout::kFlagSigned) != 0)
    fail(path, "unsupported header flags " + std::to_string(h.flags));
  if (h.manifest_offset < layout::kHeaderSize || h.manifest_offset > size ||
      h.manifest_size > size - h.manifest_offset)
    fail(path, "truncated artifact: the manifest [" + std::to_string(h.manifest_offset) + ", +" +
                   std::to_string(h.manifest_size) + ") lies beyond the end of the file (" +
                   std::to_string(size) + " bytes)");
  if (h.data_offset % uint64_t(kArtifactAlign) != 0)
    fail(path, "data section offset " + std::to_string(h.data_offset) + " is not 64-byte aligned");
  if (h.data_offset < h.manifest_offset + h.manifest_size)
    fail(path, "data section overlaps the manifest");
  if (h.data_offset > size || h.data_size > size - h.data_offset)
    fail(path, "truncated artifact: the data section needs " +
                   std::to_string(h.data_offset + h.data_size) + " bytes but the file has " +
                   std::to_string(size));
  return h;
}

/// One entry of the manifest's tensor table, as read (not yet checked
/// against the data section).
struct TensorEntry {
  TensorView view;
  uint64_t offset = 0, checksum = 0;
  bool hasChecksum = false;
  std::optional<signing::Digest> digest; // signed artifacts
};

TensorEntry readTensorEntry(const json &tj, size_t i, bool isSigned) {
  TensorEntry e;
  TensorView &tv = e.view;
  std::string ctx = "tensor #" + std::to_string(i);
  tv.name = jsonf::getString(tj, "name", ctx);
  ctx = "tensor '" + tv.name + "'";
  std::string dt = jsonf::getString(tj, "dtype", ctx);
  auto d = dtypeFromName(dt);
  if (!d)
    jsonf::fail(ctx, "unknown dtype '" + dt + "'");
  tv.dtype = *d;
  const json &shape = jsonf::require(tj, "shape", ctx);
  if (!shape.is_array())
    jsonf::fail(ctx, "field 'shape' must be an array");
  for (const json &s : shape)
    tv.shape.push_back(jsonf::asInt(s, "shape", ctx));
  int64_t off = jsonf::getInt(tj, "offset", ctx);
  tv.nbytes = jsonf::getInt(tj, "nbytes", ctx);
  if (off < 0 || tv.nbytes < 0)
    jsonf::fail(ctx, "negative offset or size");
  e.offset = uint64_t(off);
  if (const json *c = jsonf::find(tj, "checksum")) {
    if (!c->is_number_unsigned() && !c->is_number_integer())
      jsonf::fail(ctx, "field 'checksum' must be an unsigned integer");
    e.checksum = c->get<uint64_t>();
    e.hasChecksum = true;
  }
  if (isSigned) {
    signing::Digest dg{};
    const json *sha = jsonf::find(tj, "sha256");
    if (!sha || !sha->is_string() || !signing::fromHex(sha->get<std::string>(), dg.data(), dg.size()))
      jsonf::fail(ctx, "a signed artifact needs the tensor's 'sha256' (64 hex digits)");
    e.digest = dg;
  }
  return e;
}

/// The tensor's size against its type and shape.
void checkTensorSize(const std::string &path, const TensorView &tv) {
  std::string why;
  int64_t want = layout::expectedBytes(tv.dtype, tv.shape, why);
  if (want < 0)
    fail(path, "tensor '" + tv.name + "': " + why);
  if (want != tv.nbytes)
    fail(path, "tensor '" + tv.name + "': size " + std::to_string(tv.nbytes) + " bytes does not match " +
                   std::string(dtypeName(tv.dtype)) + " " + layout::shapeString(tv.shape) +
                   " (expected " + std::to_string(want) + ")");
}

/// The tensor's size against its type and shape, its alignment and its
/// bounds inside the data section (dataSize bytes).
void checkTensorPlacement(const std::string &path, const TensorEntry &e, uint64_t dataSize) {
  const TensorView &tv = e.view;
  checkTensorSize(path, tv);
  if (e.offset % uint64_t(kArtifactAlign) != 0)
    fail(path, "tensor '" + tv.name + "': offset " + std::to_string(e.offset) + " is not 64-byte aligned");
  if (e.offset > dataSize || uint64_t(tv.nbytes) > dataSize - e.offset)
    fail(path, "tensor '" + tv.name + "' extends beyond the data section (truncated or corrupted)");
}

} // namespace

std::unique_ptr<Artifact> Artifact::fromViews(json manifest, std::vector<TensorView> tensors,
                                              const std::string &label) {
  std::unique_ptr<Artifact> a(new Artifact());
  a->path_ = label;
  if (!manifest.is_object())
    fail(label, "manifest is not a JSON object");
  a->manifest_ = std::move(manifest);
  if (!a->manifest_.contains("format_version")) // as ArtifactWriter fills it
    a->manifest_["format_version"] = kArtifactVersion;
  a->readManifestFields();
  for (TensorView &v : tensors) {
    checkTensorSize(label, v);
    if (!v.data)
      fail(label, "tensor '" + v.name + "' has no data");
    if (!a->index_.emplace(v.name, a->tensors_.size()).second)
      fail(label, "duplicate tensor '" + v.name + "'");
    a->tensors_.push_back(std::move(v));
  }
  return a;
}

void Artifact::parse(bool verify_tensors) {
  const layout::Header h = checkHeader(path_, base_, size_, headerCopy_);
  if (h.flags & layout::kFlagSigned)
    parseSignatureBlock(h.data_offset + h.data_size);
  parseManifest(base_ + h.manifest_offset, h.manifest_size, h.manifest_checksum);
  parseTensors(base_ + h.data_offset, h.data_size, verify_tensors);
}

void Artifact::parseManifest(const uint8_t *mbytes, uint64_t n, uint64_t checksum) {
  const std::string &path = path_;
  // A signed manifest is parsed from a private copy, the same bytes
  // checkSignature() hashes, whatever happens to the file meanwhile.
  if (signed_) {
    manifestCopy_.assign(mbytes, mbytes + n);
    mbytes = manifestCopy_.data();
  }
  if (checksum64(mbytes, n) != checksum)
    fail(path, "manifest checksum mismatch (the file is corrupted)");
  try {
    manifest_ = json::parse(mbytes, mbytes + n);
  } catch (const json::exception &ex) {
    fail(path, std::string("manifest is not valid JSON: ") + ex.what());
  }
  if (!manifest_.is_object())
    fail(path, "manifest is not a JSON object");
  readManifestFields();
}

void Artifact::readManifestFields() {
  try {
    int64_t fv = jsonf::getInt(manifest_, "format_version", "manifest", kArtifactVersion);
    if (fv != kArtifactVersion)
      fail("manifest", "format_version " + std::to_string(fv) + " does not match the header (" +
                           std::to_string(kArtifactVersion) + ")");
    config_ = configFromJson(jsonf::require(manifest_, "config", "manifest"));
    if (const json *p = jsonf::find(manifest_, "program"))
      program_ = Program::fromJson(*p);
    if (const json *t = jsonf::find(manifest_, "tokenizer"))
      tokenizer_ = tokenizerFromJson(*t);
  } catch (const std::runtime_error &ex) {
    fail(path_, ex.what());
  }
}

void Artifact::parseTensors(const uint8_t *data, uint64_t dataSize, bool verify_tensors) {
  const json *tensors = jsonf::find(manifest_, "tensors");
  if (!tensors)
    return;
  if (!tensors->is_array())
    fail(path_, "manifest field 'tensors' must be an array");
  tensors_.reserve(tensors->size());
  std::vector<std::pair<size_t, uint64_t>> toVerify; // tensor index, stored checksum
  for (size_t i = 0; i < tensors->size(); ++i) {
    TensorEntry e;
    try {
      e = readTensorEntry((*tensors)[i], i, signed_);
    } catch (const std::runtime_error &ex) {
      fail(path_, ex.what());
    }
    if (e.digest)
      digests_[e.view.name] = *e.digest;
    if (index_.count(e.view.name))
      fail(path_, "duplicate tensor '" + e.view.name + "'");
    checkTensorPlacement(path_, e, dataSize);
    e.view.data = data + e.offset;
    if (verify_tensors && e.hasChecksum)
      toVerify.push_back({tensors_.size(), e.checksum});
    index_.emplace(e.view.name, tensors_.size());
    tensors_.push_back(std::move(e.view));
  }
  verifyChecksums(path_, toVerify);
}

void Artifact::parseSignatureBlock(uint64_t dataEnd) {
  if (dataEnd > size_ || size_ - dataEnd != layout::kSignatureBlockSize)
    fail(path_, "signed artifact without a " + std::to_string(layout::kSignatureBlockSize) +
                    "-byte signature block after its data section (truncated or extended)");
  const uint8_t *b = base_ + dataEnd;
  if (std::memcmp(b, layout::kSignatureMagic, 8) != 0 ||
      layout::get<uint32_t>(b + 8) != layout::kSignatureAlgorithm)
    fail(path_, "signature block: bad magic or unknown algorithm");
  signed_ = true;
  signatureBlock_.assign(b, b + layout::kSignatureBlockSize);
}

std::string SignatureCheck::describe() const {
  switch (status) {
  case SignatureStatus::Unsigned:
    return "unsigned";
  case SignatureStatus::Trusted:
    return "signed by " + signer + " (trusted)";
  case SignatureStatus::UntrustedSigner:
    return "signed by " + signer + ", a key not trusted here";
  case SignatureStatus::Invalid:
    return "bad signature (claims " + signer + "; the header, manifest or signature was altered)";
  }
  return "?";
}

SignatureCheck Artifact::checkSignature(const std::vector<signing::PublicKey> &trusted) const {
  SignatureCheck c;
  if (!signed_)
    return c;
  signing::PublicKey signer;
  std::memcpy(signer.bytes.data(), signatureBlock_.data() + layout::kSignerKeyOffset, signer.bytes.size());
  signing::Signature sig;
  std::memcpy(sig.data(), signatureBlock_.data() + layout::kSignedBlockPrefix, sig.size());
  c.signer = signer.fingerprint();
  const std::string msg = layout::signedMessage(headerCopy_.data(), manifestCopy_.data(),
                                                manifestCopy_.size(), signatureBlock_.data());
  if (!signing::verify(signer, msg, sig)) {
    c.status = SignatureStatus::Invalid;
    return c;
  }
  c.status = SignatureStatus::UntrustedSigner;
  for (const signing::PublicKey &k : trusted)
    if (k == signer)
      c.status = SignatureStatus::Trusted;
  return c;
}

const signing::Digest *Artifact::tensorDigest(const std::string &name) const {
  auto it = digests_.find(name);
  return it == digests_.end() ? nullptr : &it->second;
}

void Artifact::verifyChecksums(const std::string &path,
                               const std::vector<std::pair<size_t, uint64_t>> &list) const {
  // Tensors are hashed on up to 8 threads (the data is read once, from the
  // page cache or the disk); the first corrupted tensor in file order is
  // reported, as a serial pass would.
  std::vector<char> bad(list.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next.fetch_add(1); k < list.size(); k = next.fetch_add(1)) {
      const TensorView &tv = tensors_[list[k].first];
      bad[k] = checksum64(tv.data, size_t(tv.nbytes)) != list[k].second;
    }
  };
  uint64_t bytes = 0;
  for (const auto &e : list)
    bytes += uint64_t(tensors_[e.first].nbytes);
  // Small artifacts: not worth a thread.
  const size_t threads = bytes < (uint64_t(16) << 20)
                             ? 1
                             : std::min<size_t>({8, list.size(),
                                                 size_t(defaultThreadCount())});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
  for (size_t k = 0; k < list.size(); ++k)
    if (bad[k])
      fail(path, "tensor '" + tensors_[list[k].first].name +
                     "' checksum mismatch (the data is corrupted)");
}

} // namespace llmc
