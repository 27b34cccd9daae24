//===- KeyCommands.cpp - llmc keygen, llmc verify -------------------------===//
// keygen writes an Ed25519 key pair (by default the key `llmc compile`
// signs with, its public half added to this user's trust store); verify
// checks an artifact's signature and every section's SHA-256.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc::tool {
namespace {

void makePrivateDir(const std::string &dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/')
      if (::mkdir(dir.substr(0, i).c_str(), 0700) != 0 && errno != EEXIST)
        throw std::runtime_error(dir.substr(0, i) + ": cannot create: " + std::strerror(errno));
}

std::string folderOf(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// Copies `key` into the trust store as <fingerprint>.pub.
std::string trustKey(const signing::PublicKey &key) {
  const std::string dir = signing::defaultTrustDir();
  if (dir.empty())
    throw std::runtime_error("no trust store: neither XDG_CONFIG_HOME nor HOME is set");
  makePrivateDir(dir);
  std::string name = key.fingerprint();
  name.replace(name.find(':'), 1, "-");
  const std::string path = dir + "/" + name + ".pub";
  FILE *f = fopen(path.c_str(), "w");
  if (!f)
    throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
  const std::string text = signing::publicKeyText(key);
  const bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  if (fclose(f) != 0 || !ok)
    throw std::runtime_error(path + ": cannot write");
  return path;
}

} // namespace

std::function<int()> addKeygenCommand(CLI::App &app) {
  struct Args {
    std::string out, comment;
    bool trust = false, noTrust = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App *cmd = app.add_subcommand(
      "keygen", "Create an Ed25519 key pair for signing artifacts (writes KEY, mode 0600, and "
                "KEY.pub)");
  cmd->add_option("-o,--output", a->out,
                  "secret key file (default: " + signing::defaultSecretKeyPath() +
                      ", which llmc compile signs with; its public key is then trusted here)");
  cmd->add_option("--comment", a->comment, "text stored after the public key");
  CLI::Option *trust = cmd->add_flag(
      "--trust", a->trust, "add the public key to this user's trust store " +
                               signing::defaultTrustDir() + " (the default for the default key)");
  cmd->add_flag("--no-trust", a->noTrust, "do not add it to the trust store")->excludes(trust);
  return [a]() {
    const bool isDefault = a->out.empty();
    const std::string path = isDefault ? signing::defaultSecretKeyPath() : a->out;
    if (path.empty())
      throw std::runtime_error("no default key location: give -o FILE");
    if (isDefault)
      makePrivateDir(folderOf(path));
    const signing::SecretKey key = signing::generateKey(a->comment);
    signing::writeKeyPair(key, path);
    printf("wrote %s and %s.pub (%s)\n", path.c_str(), path.c_str(),
           key.pub.fingerprint().c_str());
    if ((isDefault && !a->noTrust) || a->trust)
      printf("trusted: %s\n", trustKey(key.pub).c_str());
    return int(kOk);
  };
}

std::function<int()> addVerifyCommand(CLI::App &app) {
  struct Args {
    std::string input;
    std::vector<std::string> keys;
  };
  auto a = std::make_shared<Args>();
  CLI::App *cmd = app.add_subcommand(
      "verify", "Check an artifact's signature against the trusted keys and every section's "
                "SHA-256 against its signed manifest (exit 0: signed by a trusted key, intact)");
  cmd->add_option("artifact", a->input, ".llmc file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--trusted-key", a->keys,
                  "public key file trusted beside the trust store " +
                      signing::defaultTrustDir() + " (repeatable)")
      ->check(CLI::ExistingFile);
  return [a]() {
    auto art = Artifact::open(a->input, /*verify_tensors=*/true);
    const signing::CodeTrust trust = signing::loadCodeTrust(a->keys, false);
    const SignatureCheck c = art->checkSignature(trust.keys);
    printf("signature: %s\n", c.describe().c_str());
    if (c.status == SignatureStatus::Unsigned || c.status == SignatureStatus::Invalid)
      return int(kError);
    size_t good = 0;
    for (const TensorView &t : art->tensors()) {
      const signing::Digest *d = art->tensorDigest(t.name);
      if (d && signing::sha256(t.data, size_t(t.nbytes)) == *d) {
        ++good;
        continue;
      }
      printf("section '%s': SHA-256 does not match the signed manifest\n", t.name.c_str());
    }
    printf("sections: %zu of %zu match their signed SHA-256\n", good, art->tensors().size());
    return good == art->tensors().size() && c.status == SignatureStatus::Trusted ? int(kOk)
                                                                                   : int(kError);
  };
}

} // namespace llmc::tool
