//===- signing.h - Ed25519 keys, SHA-256 digests, the trust store -*- C++ -*-===//
// Native code in an artifact (the generated kernel objects) runs only when
// the artifact is signed by a key the user trusts. What is signed:
//
//   Ed25519(secret, "llmc-artifact-signature-v1\0" || SHA-256(header, 64 bytes)
//                   || SHA-256(manifest JSON) || SHA-256(signature block's
//                   first 48 bytes: magic, algorithm, flags, signer key))
//
// The manifest of a signed artifact lists every tensor's SHA-256 (field
// "sha256"), so the signature covers every section through it: the loader
// checks the digest of each section it executes (the kernel objects) before
// running it, and `llmc verify` checks all of them.
//
// Key files are text. Secret: "llmc-ed25519-secret-key v1\n<64 hex>\n" (the
// 32-byte seed; the file must not be readable by group or others, as ssh
// requires of its keys). Public: "llmc-ed25519 <64 hex> [comment]\n". The
// trust store is a folder of public key files (*.pub):
// $XDG_CONFIG_HOME/llmc/trusted-keys (default ~/.config/llmc/trusted-keys).
// Cryptography is OpenSSL's (libcrypto).
//===----------------------------------------------------------------------===//
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::signing {

using Digest = std::array<uint8_t, 32>;
using Signature = std::array<uint8_t, 64>;

struct PublicKey {
  std::array<uint8_t, 32> bytes{};
  std::string comment; // free text after the key in its file
  std::string origin;  // where it was read from (for messages)
  /// "ed25519:" + the first 16 hex digits of SHA-256(key bytes).
  std::string fingerprint() const;
  bool operator==(const PublicKey &o) const { return bytes == o.bytes; }
};

struct SecretKey {
  std::array<uint8_t, 32> seed{};
  PublicKey pub;
};

Digest sha256(const void *data, size_t n);
std::string toHex(const uint8_t *p, size_t n);
inline std::string toHex(const Digest &d) { return toHex(d.data(), d.size()); }
/// Parses exactly 2*n hex digits into out; false otherwise.
bool fromHex(const std::string &s, uint8_t *out, size_t n);

/// A fresh key pair from the system's random generator.
SecretKey generateKey(const std::string &comment);
Signature sign(const SecretKey &key, const std::string &message);
bool verify(const PublicKey &key, const std::string &message, const Signature &sig);

/// Key files. Readers throw std::runtime_error naming the file and the
/// problem (missing, malformed, a secret key readable by others).
SecretKey readSecretKey(const std::string &path);
PublicKey readPublicKey(const std::string &path);
std::string publicKeyText(const PublicKey &key);
/// Writes PATH (mode 0600) and PATH.pub atomically; refuses to overwrite.
void writeKeyPair(const SecretKey &key, const std::string &path);

/// $XDG_CONFIG_HOME/llmc (default ~/.config/llmc); "" without a home.
std::string configDir();
/// configDir()/signing.key: the key `llmc compile` signs with by default.
std::string defaultSecretKeyPath();
/// configDir()/trusted-keys.
std::string defaultTrustDir();
/// Every *.pub in `dir` (none when the folder does not exist). A malformed
/// file is an error.
std::vector<PublicKey> readTrustDir(const std::string &dir);

/// What native code in an artifact may run under.
struct CodeTrust {
  std::vector<PublicKey> keys; // signers whose artifacts' code runs
  bool require_signed = false; // refuse (error) instead of falling back
};

/// The trust of a command line: the trust store plus --trusted-key files.
CodeTrust loadCodeTrust(const std::vector<std::string> &keyFiles, bool requireSigned);

} // namespace llmc::signing
