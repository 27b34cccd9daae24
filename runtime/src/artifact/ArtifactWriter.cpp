//===- ArtifactWriter.cpp - Serialize a .llmc artifact ---------------------===//
// Plans the layout (tensor offsets, checksums, manifest JSON, header), then
// either copies everything into one buffer or streams it to a temporary file
// next to the destination which is fsync'd and renamed into place, so a
// reader never sees a half-written artifact. Inconsistent tensors (size not
// matching dtype and shape, duplicate names) are rejected before any file is
// created; any later failure removes the temporary file.
//===----------------------------------------------------------------------===//
#include "ArtifactLayout.h"
#include "llmc/artifact.h"

#include <cerrno>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc {

using nlohmann::json;

namespace {

struct Plan {
  uint8_t header[layout::kHeaderSize];
  std::string manifest;
  uint64_t dataOffset = 0, dataSize = 0, fileSize = 0;
  std::vector<uint64_t> offsets; // relative to dataOffset
  std::vector<uint8_t> signature; // the signature block (signed artifacts), else empty
};

/// The signature block over the planned header and manifest.
std::vector<uint8_t> signatureBlock(const Plan &plan, const signing::SecretKey &key) {
  std::vector<uint8_t> b(layout::kSignatureBlockSize, 0);
  std::memcpy(b.data(), layout::kSignatureMagic, 8);
  layout::put<uint32_t>(b.data() + 8, layout::kSignatureAlgorithm);
  std::memcpy(b.data() + layout::kSignerKeyOffset, key.pub.bytes.data(), key.pub.bytes.size());
  const signing::Signature sig = signing::sign(
      key, layout::signedMessage(plan.header,
                                 reinterpret_cast<const uint8_t *>(plan.manifest.data()),
                                 plan.manifest.size(), b.data()));
  std::memcpy(b.data() + layout::kSignedBlockPrefix, sig.data(), sig.size());
  return b;
}

Plan makePlan(const json &base, const std::vector<ArtifactWriter::Tensor> &tensors,
              const signing::SecretKey *key) {
  if (!base.is_object())
    throw std::runtime_error("artifact manifest must be a JSON object");
  Plan plan;
  json manifest = base;
  manifest["format_version"] = kArtifactVersion;
  json list = json::array();
  std::set<std::string> names;
  uint64_t cursor = 0;
  for (const ArtifactWriter::Tensor &t : tensors) {
    if (t.name.empty())
      throw std::runtime_error("artifact tensor with an empty name");
    if (!names.insert(t.name).second)
      throw std::runtime_error("duplicate artifact tensor '" + t.name + "'");
    std::string why;
    int64_t want = layout::expectedBytes(t.dtype, t.shape, why);
    if (want < 0)
      throw std::runtime_error("tensor '" + t.name + "': " + why);
    if (want != t.nbytes)
      throw std::runtime_error("tensor '" + t.name + "': " + std::to_string(t.nbytes) +
                               " bytes given but " + std::string(dtypeName(t.dtype)) + " " +
                               layout::shapeString(t.shape) + " needs " + std::to_string(want));
    if (t.nbytes > 0 && !t.data)
      throw std::runtime_error("tensor '" + t.name + "' has no data");
    cursor = layout::alignUp(cursor);
    plan.offsets.push_back(cursor);
    list.push_back(json{{"name", t.name},
                        {"dtype", std::string(dtypeName(t.dtype))},
                        {"shape", t.shape},
                        {"offset", cursor},
                        {"nbytes", t.nbytes},
                        {"checksum", checksum64(t.data, size_t(t.nbytes))}});
    if (key) // a signed artifact binds every section through the manifest
      list.back()["sha256"] = signing::toHex(signing::sha256(t.data, size_t(t.nbytes)));
    cursor += uint64_t(t.nbytes);
  }
  manifest["tensors"] = std::move(list);
  try {
    plan.manifest = manifest.dump();
  } catch (const json::exception &ex) {
    throw std::runtime_error(std::string("cannot serialize the artifact manifest: ") + ex.what());
  }
  plan.dataOffset = layout::alignUp(layout::kHeaderSize + plan.manifest.size());
  plan.dataSize = cursor;
  plan.fileSize = plan.dataOffset + plan.dataSize;

  layout::Header h;
  h.manifest_offset = layout::kHeaderSize;
  h.manifest_size = plan.manifest.size();
  h.data_offset = plan.dataOffset;
  h.data_size = plan.dataSize;
  h.manifest_checksum = checksum64(plan.manifest.data(), plan.manifest.size());
  h.flags = key ? layout::kFlagSigned : 0;
  layout::encode(h, plan.header);
  if (key) {
    plan.signature = signatureBlock(plan, *key);
    plan.fileSize += plan.signature.size();
  }
  return plan;
}

/// Streams bytes to a file descriptor through a buffer, tracking the offset.
class FileSink {
public:
  FileSink(int fd, const std::string &path) : fd_(fd), path_(path) { buf_.reserve(kBuf); }
  void write(const void *p, size_t n) {
    const uint8_t *b = static_cast<const uint8_t *>(p);
    pos_ += n;
    if (buf_.size() + n <= kBuf) {
      buf_.insert(buf_.end(), b, b + n);
      return;
    }
    flush();
    if (n >= kBuf) {
      raw(b, n);
      return;
    }
    buf_.insert(buf_.end(), b, b + n);
  }
  void padTo(uint64_t offset) {
    static const uint8_t zeros[kArtifactAlign] = {};
    while (pos_ < offset)
      write(zeros, size_t(std::min<uint64_t>(offset - pos_, sizeof zeros)));
  }
  void flush() {
    raw(buf_.data(), buf_.size());
    buf_.clear();
  }

private:
  static constexpr size_t kBuf = 1 << 20;
  void raw(const uint8_t *p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        throw std::runtime_error(path_ + ": write failed: " + std::strerror(w < 0 ? errno : EIO));
      p += w;
      n -= size_t(w);
    }
  }
  int fd_;
  std::string path_;
  std::vector<uint8_t> buf_;
  uint64_t pos_ = 0;
};

std::string folderOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

ArtifactWriter::ArtifactWriter(json manifest, std::vector<Tensor> tensors)
    : manifest_(std::move(manifest)), tensors_(std::move(tensors)) {}

void ArtifactWriter::signWith(const signing::SecretKey &key) {
  key_ = std::make_shared<signing::SecretKey>(key);
}

std::vector<uint8_t> ArtifactWriter::toBuffer() const {
  Plan plan = makePlan(manifest_, tensors_, key_.get());
  std::vector<uint8_t> out(plan.fileSize, 0);
  std::memcpy(out.data(), plan.header, layout::kHeaderSize);
  std::memcpy(out.data() + layout::kHeaderSize, plan.manifest.data(), plan.manifest.size());
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].nbytes > 0)
      std::memcpy(out.data() + plan.dataOffset + plan.offsets[i], tensors_[i].data,
                  size_t(tensors_[i].nbytes));
  if (!plan.signature.empty())
    std::memcpy(out.data() + plan.dataOffset + plan.dataSize, plan.signature.data(),
                plan.signature.size());
  return out;
}

namespace {
// While a temporary file is being written, SIGINT/SIGTERM/SIGHUP remove it
// before the process dies, so an interrupted compile leaves nothing behind.
char gPendingTemp[4096];
volatile sig_atomic_t gHavePendingTemp = 0;

extern "C" void removePendingTempAndDie(int sig) {
  if (gHavePendingTemp)
    ::unlink(gPendingTemp);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

class TempFileGuard {
public:
  explicit TempFileGuard(const std::string &tmp) {
    if (tmp.size() >= sizeof gPendingTemp)
      return;
    std::memcpy(gPendingTemp, tmp.c_str(), tmp.size() + 1);
    gHavePendingTemp = 1;
    struct sigaction sa {};
    sa.sa_handler = removePendingTempAndDie;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i)
      ::sigaction(kSignals[i], &sa, &old[i]);
    armed = true;
  }
  ~TempFileGuard() {
    if (!armed)
      return;
    for (int i = 0; i < 3; ++i)
      ::sigaction(kSignals[i], &old[i], nullptr);
    gHavePendingTemp = 0;
  }

private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old[3];
  bool armed = false;
};
} // namespace

void ArtifactWriter::writeFile(const std::string &path) const {
  if (path.empty())
    throw std::runtime_error("artifact output path is empty");
  Plan plan;
  try {
    plan = makePlan(manifest_, tensors_, key_.get());
  } catch (const std::runtime_error &ex) {
    throw std::runtime_error(path + ": " + ex.what());
  }

  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    throw std::runtime_error(path + ": cannot create a temporary file in '" + folderOf(path) +
                             "': " + std::strerror(errno));
  std::string tmp(name.data());
  TempFileGuard guard(tmp);
  try {
    FileSink sink(fd, path);
    sink.write(plan.header, layout::kHeaderSize);
    sink.write(plan.manifest.data(), plan.manifest.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      sink.padTo(plan.dataOffset + plan.offsets[i]);
      if (tensors_[i].nbytes > 0)
        sink.write(tensors_[i].data, size_t(tensors_[i].nbytes));
    }
    sink.padTo(plan.dataOffset + plan.dataSize);
    if (!plan.signature.empty())
      sink.write(plan.signature.data(), plan.signature.size());
    sink.flush();
    if (::fchmod(fd, 0644) != 0)
      throw std::runtime_error(path + ": cannot set permissions: " + std::strerror(errno));
    if (::fsync(fd) != 0)
      throw std::runtime_error(path + ": fsync failed: " + std::strerror(errno));
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0)
      throw std::runtime_error(path + ": close failed: " + std::strerror(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw std::runtime_error(path + ": cannot rename the temporary file into place: " +
                               std::strerror(errno));
  } catch (...) {
    if (fd >= 0)
      ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename durable; failure here does not undo a complete write.
  int dfd = ::open(folderOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

} // namespace llmc
