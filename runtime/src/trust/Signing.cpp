//===- Signing.cpp - Ed25519 keys and SHA-256 over OpenSSL's libcrypto ----===//
#include "llmc/signing.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc::signing {

namespace {

constexpr const char *kSecretHeader = "llmc-ed25519-secret-key v1";
constexpr const char *kPublicTag = "llmc-ed25519";

struct PkeyDeleter {
  void operator()(EVP_PKEY *p) const { EVP_PKEY_free(p); }
};
struct MdCtxDeleter {
  void operator()(EVP_MD_CTX *p) const { EVP_MD_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

Pkey privateKey(const SecretKey &k) {
  Pkey p(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, k.seed.data(), k.seed.size()));
  if (!p)
    throw std::runtime_error("OpenSSL: cannot load an Ed25519 private key");
  return p;
}

std::array<uint8_t, 32> publicOf(const std::array<uint8_t, 32> &seed) {
  SecretKey k;
  k.seed = seed;
  Pkey p = privateKey(k);
  std::array<uint8_t, 32> out{};
  size_t n = out.size();
  if (EVP_PKEY_get_raw_public_key(p.get(), out.data(), &n) != 1 || n != out.size())
    throw std::runtime_error("OpenSSL: cannot derive the Ed25519 public key");
  return out;
}

std::string readSmallFile(const std::string &path, const char *what) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error(path + ": cannot read the " + std::string(what) + ": " +
                             std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > 4096)
    throw std::runtime_error(path + ": not an llmc " + std::string(what) + " (too large)");
  return s;
}

std::string trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

PublicKey parsePublicKey(const std::string &text, const std::string &origin) {
  std::istringstream in(trim(text));
  std::string tag, hex;
  in >> tag >> hex;
  PublicKey k;
  if (tag != kPublicTag || !fromHex(hex, k.bytes.data(), k.bytes.size()))
    throw std::runtime_error(origin + ": not an llmc public key (expected \"" +
                             std::string(kPublicTag) + " <64 hex digits> [comment]\")");
  std::getline(in, k.comment);
  k.comment = trim(k.comment);
  k.origin = origin;
  return k;
}

void writeFileExclusive(const std::string &path, const std::string &text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    throw std::runtime_error(path + ": cannot create: " + std::strerror(errno) +
                             (errno == EEXIST ? " (refusing to overwrite a key)" : ""));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const bool ok = n == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    throw std::runtime_error(path + ": cannot write the key");
  }
}

} // namespace

std::string PublicKey::fingerprint() const {
  return "ed25519:" + toHex(sha256(bytes.data(), bytes.size())).substr(0, 16);
}

Digest sha256(const void *data, size_t n) {
  Digest d{};
  unsigned len = 0;
  if (EVP_Digest(data, n, d.data(), &len, EVP_sha256(), nullptr) != 1 || len != d.size())
    throw std::runtime_error("OpenSSL: SHA-256 failed");
  return d;
}

std::string toHex(const uint8_t *p, size_t n) {
  static const char *digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

bool fromHex(const std::string &s, uint8_t *out, size_t n) {
  if (s.size() != 2 * n)
    return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

SecretKey generateKey(const std::string &comment) {
  SecretKey k;
  if (RAND_priv_bytes(k.seed.data(), int(k.seed.size())) != 1)
    throw std::runtime_error("OpenSSL: no random bytes for a new key");
  k.pub.bytes = publicOf(k.seed);
  k.pub.comment = comment;
  return k;
}

Signature sign(const SecretKey &key, const std::string &message) {
  Pkey p = privateKey(key);
  MdCtx ctx(EVP_MD_CTX_new());
  Signature sig{};
  size_t n = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, p.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &n,
                     reinterpret_cast<const unsigned char *>(message.data()), message.size()) != 1 ||
      n != sig.size())
    throw std::runtime_error("OpenSSL: Ed25519 signing failed");
  return sig;
}

bool verify(const PublicKey &key, const std::string &message, const Signature &sig) {
  Pkey p(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.bytes.data(), key.bytes.size()));
  MdCtx ctx(EVP_MD_CTX_new());
  if (!p || !ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, p.get()) != 1)
    return false;
  return EVP_DigestVerify(ctx.get(), sig.data(), sig.size(),
                          reinterpret_cast<const unsigned char *>(message.data()),
                          message.size()) == 1;
}

SecretKey readSecretKey(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error(path + ": cannot read the signing key: " + std::strerror(errno));
  if (st.st_mode & 077) {
    char mode[8];
    snprintf(mode, sizeof mode, "%03o", unsigned(st.st_mode & 0777));
    throw std::runtime_error(path + ": the signing key is accessible by others (mode " + mode +
                             "); run chmod 600 on it");
  }
  std::istringstream in(readSmallFile(path, "signing key"));
  std::string header, hex;
  std::getline(in, header);
  in >> hex;
  SecretKey k;
  if (trim(header) != kSecretHeader || !fromHex(hex, k.seed.data(), k.seed.size()))
    throw std::runtime_error(path + ": not an llmc signing key (expected \"" +
                             std::string(kSecretHeader) + "\" and 64 hex digits)");
  k.pub.bytes = publicOf(k.seed);
  k.pub.origin = path;
  return k;
}

PublicKey readPublicKey(const std::string &path) {
  return parsePublicKey(readSmallFile(path, "public key"), path);
}

std::string publicKeyText(const PublicKey &key) {
  return std::string(kPublicTag) + " " + toHex(key.bytes.data(), key.bytes.size()) +
         (key.comment.empty() ? "" : " " + key.comment) + "\n";
}

void writeKeyPair(const SecretKey &key, const std::string &path) {
  const std::string pub = path + ".pub";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 || ::stat(pub.c_str(), &st) == 0)
    throw std::runtime_error(path + ": a key already exists there (refusing to overwrite it)");
  writeFileExclusive(path,
                     std::string(kSecretHeader) + "\n" + toHex(key.seed.data(), key.seed.size()) +
                         "\n",
                     0600);
  try {
    writeFileExclusive(pub, publicKeyText(key.pub), 0644);
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
}

std::string configDir() {
  if (const char *x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    return std::string(x) + "/llmc";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.config/llmc";
  return "";
}

std::string defaultSecretKeyPath() {
  const std::string d = configDir();
  return d.empty() ? "" : d + "/signing.key";
}

std::string defaultTrustDir() {
  const std::string d = configDir();
  return d.empty() ? "" : d + "/trusted-keys";
}

std::vector<PublicKey> readTrustDir(const std::string &dir) {
  std::vector<PublicKey> keys;
  if (dir.empty())
    return keys;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return keys;
  std::vector<std::string> names;
  while (dirent *e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".pub") == 0)
      names.push_back(n);
  }
  ::closedir(d);
  for (const std::string &n : names)
    keys.push_back(readPublicKey(dir + "/" + n));
  return keys;
}

CodeTrust loadCodeTrust(const std::vector<std::string> &keyFiles, bool requireSigned) {
  CodeTrust t;
  t.keys = readTrustDir(defaultTrustDir());
  for (const std::string &f : keyFiles)
    t.keys.push_back(readPublicKey(f));
  t.require_signed = requireSigned;
  return t;
}

} // namespace llmc::signing
