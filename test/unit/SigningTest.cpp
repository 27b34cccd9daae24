//===- SigningTest.cpp - Signed artifacts: who may run native code -------===//
// Ed25519 keys and key files; then artifacts carrying a real kernel object
// (built with the host compiler): a trusted signature runs it; unsigned,
// untrusted, tampered objects, tampered signatures, swapped sections and
// objects planted where the old runtime cached them are each refused.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/codegen/GeneratedKernels.h"
#include "codegen/cpu/HostCompiler.h"
#include "llmc/artifact.h"
#include "llmc/signing.h"

#include "MissingInput.h"
#include "ReaderTestUtil.h"
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

using namespace llmc;
using llmc::readertest::readBytes;
using llmc::readertest::ScratchDir;
using llmc::readertest::writeBytes;
namespace cg = llmc::codegen;

namespace {

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

/// A kernel object of abi `abi` (the current one by default) whose
/// llmc_test_tag() returns `tag`; padded with zeros to `padTo` bytes (ELF
/// loaders ignore the tail).
std::string kernelObject(int tag, size_t padTo = 0, const std::string &extra = "",
                         int abi = cg::kAbi) {
  const std::string src = "extern \"C\" int llmc_codegen_abi() { return " +
                          std::to_string(abi) + "; }\nextern \"C\" int llmc_test_tag() { return " +
                          std::to_string(tag) + "; }\n" + extra;
  std::string bytes = cg::compileSharedObject(src, cg::IsaLevel::X86_64).bytes;
  if (bytes.size() < padTo)
    bytes.resize(padTo, '\0');
  return bytes;
}

nlohmann::json baseManifest(const nlohmann::json &kernels = nlohmann::json::array(),
                            int abi = cg::kAbi) {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 8;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.context_length = 16;
  nlohmann::json m;
  m["config"] = configToJson(c);
  m["codegen"] = {{"abi", abi},
                  {"kernels", kernels},
                  {"objects", {{"x86-64", "codegen.x86-64.so"}}}};
  return m;
}

/// An artifact at `path` holding `objects` (name -> bytes), signed with
/// `key` unless null.
void writeArtifact(const std::string &path, const std::vector<std::pair<std::string, std::string>> &objects,
                   const signing::SecretKey *key,
                   const nlohmann::json &kernels = nlohmann::json::array(), int abi = cg::kAbi) {
  std::vector<ArtifactWriter::Tensor> tensors;
  for (const auto &[name, bytes] : objects)
    tensors.push_back({name, DType::U8, {int64_t(bytes.size())}, int64_t(bytes.size()), bytes.data()});
  ArtifactWriter w(baseManifest(kernels, abi), tensors);
  if (key)
    w.signWith(*key);
  w.writeFile(path);
}

/// Where the named tensor's bytes start in the file: the header's data
/// offset (bytes 32..39) plus the manifest's offset of the tensor.
uint64_t sectionOffset(const std::string &path, const std::string &name) {
  auto a = Artifact::open(path, false);
  const std::vector<uint8_t> file = readBytes(path);
  uint64_t dataOffset = 0;
  for (int i = 0; i < 8; ++i)
    dataOffset |= uint64_t(file[32 + size_t(i)]) << (8 * i);
  for (const auto &tj : a->manifest()["tensors"])
    if (tj["name"] == name)
      return dataOffset + tj["offset"].get<uint64_t>();
  ADD_FAILURE() << "no section " << name;
  return 0;
}

class SignedArtifact : public ::testing::Test {
protected:
  void SetUp() override {
    scratch.emplace("signing");
    dir = scratch->path();
    key = signing::generateKey("test");
    other = signing::generateKey("someone else");
    object = kernelObject(7, 65536); // room for the planted object below
    trusted.keys = {key.pub};
  }
  /// load() of the artifact at `path` (opened with or without tensor checks).
  std::unique_ptr<cg::GeneratedKernels> load(const std::string &path, std::string &how,
                                             bool verifyTensors = true) {
    art = Artifact::open(path, verifyTensors);
    return cg::GeneratedKernels::load(*art, trusted, how);
  }
  std::optional<ScratchDir> scratch;
  std::string dir, object;
  signing::SecretKey key, other;
  signing::CodeTrust trusted;
  std::unique_ptr<Artifact> art;
};

} // namespace

TEST(Signing, SignaturesVerifyOnlyTheSignedMessageUnderTheSignersKey) {
  const signing::SecretKey a = signing::generateKey(""), b = signing::generateKey("");
  EXPECT_NE(a.pub.bytes, b.pub.bytes);
  const signing::Signature s = signing::sign(a, "message");
  EXPECT_TRUE(signing::verify(a.pub, "message", s));
  EXPECT_FALSE(signing::verify(a.pub, "messagf", s));
  EXPECT_FALSE(signing::verify(b.pub, "message", s));
  signing::Signature bad = s;
  bad[10] ^= 1;
  EXPECT_FALSE(signing::verify(a.pub, "message", bad));
  // SHA-256 of "abc" (FIPS 180-2 test vector).
  EXPECT_EQ(signing::toHex(signing::sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Signing, KeyFilesRoundTripAndSecretKeysMustBePrivate) {
  const ScratchDir scratch("signing");
  const std::string dir = scratch.path(), path = dir + "/k";
  const signing::SecretKey k = signing::generateKey("ci key");
  signing::writeKeyPair(k, path);
  EXPECT_EQ(signing::readSecretKey(path).pub.bytes, k.pub.bytes);
  const signing::PublicKey pub = signing::readPublicKey(path + ".pub");
  EXPECT_EQ(pub.bytes, k.pub.bytes);
  EXPECT_EQ(pub.comment, "ci key");
  EXPECT_THROW(signing::writeKeyPair(k, path), std::runtime_error); // never overwritten
  ::chmod(path.c_str(), 0644);
  try {
    signing::readSecretKey(path);
    ADD_FAILURE() << "a world-readable secret key was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  writeBytes(dir + "/bad.pub", std::vector<uint8_t>{'x', 'y'});
  EXPECT_THROW(signing::readPublicKey(dir + "/bad.pub"), std::runtime_error);
}

TEST_F(SignedArtifact, TrustedSignatureRunsTheObject) {
  const std::string path = dir + "/a.llmc";
  writeArtifact(path, {{"codegen.x86-64.so", object}}, &key);
  std::string how;
  auto g = load(path, how);
  ASSERT_NE(g, nullptr) << how;
  EXPECT_NE(how.find("stored x86-64 object"), std::string::npos) << how;
  EXPECT_EQ(art->checkSignature(trusted.keys).status, SignatureStatus::Trusted);
}

TEST_F(SignedArtifact, UnsignedAndUntrustedRunNoNativeCode) {
  const std::string unsignedPath = dir + "/u.llmc", otherPath = dir + "/o.llmc";
  writeArtifact(unsignedPath, {{"codegen.x86-64.so", object}}, nullptr);
  writeArtifact(otherPath, {{"codegen.x86-64.so", object}}, &other);
  std::string how;
  EXPECT_EQ(load(unsignedPath, how), nullptr);
  EXPECT_NE(how.find("unsigned"), std::string::npos) << how;
  EXPECT_EQ(load(otherPath, how), nullptr);
  EXPECT_NE(how.find("not trusted"), std::string::npos) << how;
  trusted.require_signed = true;
  EXPECT_THROW(load(unsignedPath, how), std::runtime_error);
  EXPECT_THROW(load(otherPath, how), std::runtime_error);
}

TEST_F(SignedArtifact, TamperedObjectIsRefused) {
  const std::string path = dir + "/t.llmc";
  writeArtifact(path, {{"codegen.x86-64.so", object}}, &key);
  std::vector<uint8_t> bytes = readBytes(path);
  bytes[sectionOffset(path, "codegen.x86-64.so") + 200] ^= 0x40;
  writeBytes(path, bytes);
  std::string how;
  EXPECT_THROW(load(path, how), std::runtime_error); // the tensor checksum
  try {
    load(path, how, /*verifyTensors=*/false); // the signed SHA-256 catches it too
    ADD_FAILURE() << "a tampered object was loaded: " << how;
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("signed SHA-256"), std::string::npos) << e.what();
  }
}

TEST_F(SignedArtifact, TamperedSignatureIsRefused) {
  const std::string path = dir + "/s.llmc";
  writeArtifact(path, {{"codegen.x86-64.so", object}}, &key);
  std::vector<uint8_t> bytes = readBytes(path);
  bytes[bytes.size() - 128 + 48 + 5] ^= 1; // inside the 64-byte signature
  writeBytes(path, bytes);
  std::string how;
  EXPECT_EQ(load(path, how), nullptr);
  EXPECT_NE(how.find("bad signature"), std::string::npos) << how;
  // A signer key swapped for a trusted one does not verify either.
  bytes = readBytes(path);
  std::copy(key.pub.bytes.begin(), key.pub.bytes.end(), bytes.end() - 128 + 16);
  bytes[bytes.size() - 128 + 48 + 5] ^= 1;
  writeBytes(path, bytes);
  writeArtifact(dir + "/o.llmc", {{"codegen.x86-64.so", object}}, &other);
  std::vector<uint8_t> o = readBytes(dir + "/o.llmc");
  std::copy(key.pub.bytes.begin(), key.pub.bytes.end(), o.end() - 128 + 16);
  writeBytes(dir + "/o.llmc", o);
  EXPECT_EQ(load(dir + "/o.llmc", how), nullptr);
  EXPECT_NE(how.find("bad signature"), std::string::npos) << how;
}

TEST_F(SignedArtifact, SwappedSectionsAreRefused) {
  // Two objects of one size; the bytes of the sections are exchanged.
  const std::string good = kernelObject(1, 32768), evil = kernelObject(2, 32768);
  ASSERT_EQ(good.size(), evil.size());
  const std::string path = dir + "/w.llmc";
  writeArtifact(path, {{"codegen.x86-64.so", good}, {"codegen.spare.so", evil}}, &key);
  std::vector<uint8_t> bytes = readBytes(path);
  const uint64_t a = sectionOffset(path, "codegen.x86-64.so"),
                 b = sectionOffset(path, "codegen.spare.so");
  std::swap_ranges(bytes.begin() + int64_t(a), bytes.begin() + int64_t(a + good.size()),
                   bytes.begin() + int64_t(b));
  writeBytes(path, bytes);
  std::string how;
  EXPECT_THROW(load(path, how, /*verifyTensors=*/false), std::runtime_error);
  // Unswapped, the same artifact loads.
  writeArtifact(dir + "/w2.llmc", {{"codegen.x86-64.so", good}, {"codegen.spare.so", evil}}, &key);
  EXPECT_NE(load(dir + "/w2.llmc", how, false), nullptr) << how;
}

TEST_F(SignedArtifact, ObjectsPlantedInACacheFolderAreNeverLoaded) {
  // The old runtime dlopened `$LLMC_JIT_CACHE/obj-<checksum64>.so` when a
  // file of the object's size was there: another user could plant one.
  const std::string cache = dir + "/cache", marker = dir + "/planted-object-ran";
  ::mkdir(cache.c_str(), 0777);
  const std::string payload = "#include <cstdio>\n__attribute__((constructor)) static void run() "
                              "{ if (FILE *f = fopen(\"" + marker + "\", \"w\")) fclose(f); }\n";
  std::string planted = kernelObject(666, object.size(), payload);
  ASSERT_EQ(planted.size(), object.size());
  char key64[17];
  snprintf(key64, sizeof key64, "%016llx",
           (unsigned long long)checksum64(object.data(), object.size()));
  writeBytes(cache + "/obj-" + key64 + ".so", planted.data(), planted.size());
  ::setenv("LLMC_JIT_CACHE", cache.c_str(), 1);
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  const std::string path = dir + "/c.llmc";
  writeArtifact(path, {{"codegen.x86-64.so", object}}, &key);
  std::string how;
  auto g = load(path, how);
  ::unsetenv("LLMC_JIT_CACHE");
  ::unsetenv("XDG_CACHE_HOME");
  ASSERT_NE(g, nullptr) << how;
  EXPECT_FALSE(exists(marker)) << "an object planted in the cache folder ran";
}

TEST_F(SignedArtifact, ArtifactsLoadedTogetherKeepTheirOwnObjects) {
  // llmc eval --ref compiles and loads two models in one process: each must
  // run its own object. llmc_test_tag is bound as the "add" op kernel so
  // the test can call it through the loaded kernels.
  const nlohmann::json tagKernel = nlohmann::json::array({{{"symbol", "llmc_test_tag"}, {"kind", "add"}}});
  writeArtifact(dir + "/one.llmc", {{"codegen.x86-64.so", kernelObject(1)}}, &key, tagKernel);
  writeArtifact(dir + "/two.llmc", {{"codegen.x86-64.so", kernelObject(2)}}, &key, tagKernel);
  std::string how;
  auto a1 = Artifact::open(dir + "/one.llmc"), a2 = Artifact::open(dir + "/two.llmc");
  auto g1 = cg::GeneratedKernels::load(*a1, trusted, how);
  ASSERT_NE(g1, nullptr) << how;
  auto g2 = cg::GeneratedKernels::load(*a2, trusted, how);
  ASSERT_NE(g2, nullptr) << how;
  using TagFn = int (*)();
  EXPECT_EQ(reinterpret_cast<TagFn>(g1->findAdd())(), 1);
  EXPECT_EQ(reinterpret_cast<TagFn>(g2->findAdd())(), 2);
}

// An artifact compiled for an older kernel abi (its manifest says so, its
// object agrees), signed by a trusted key: its kernels are not run, and the
// reason names both abis and says to recompile (the runtime then runs its
// library kernels). A manifest that claims the current abi over an object
// of another is refused outright, and so is a codegen section with no abi.
TEST_F(SignedArtifact, KernelsOfAnotherAbiFallBackWithTheReason) {
  const std::string old = dir + "/old.llmc", lying = dir + "/lying.llmc", none = dir + "/none.llmc";
  const std::string oldObject = kernelObject(7, 0, "", cg::kAbi - 1);
  writeArtifact(old, {{"codegen.x86-64.so", oldObject}}, &key, nlohmann::json::array(),
                cg::kAbi - 1);
  std::string how;
  EXPECT_EQ(load(old, how), nullptr);
  EXPECT_EQ(how, "generated kernels of abi " + std::to_string(cg::kAbi - 1) +
                     " (this runtime runs abi " + std::to_string(cg::kAbi) +
                     "; recompile the artifact)");
  writeArtifact(lying, {{"codegen.x86-64.so", oldObject}}, &key);
  try {
    load(lying, how);
    ADD_FAILURE() << "an object of abi " << cg::kAbi - 1 << " under an abi " << cg::kAbi
                  << " manifest was loaded";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("is not an llmc kernel object of abi " +
                                         std::to_string(cg::kAbi)),
              std::string::npos)
        << e.what();
  }
  nlohmann::json m = baseManifest();
  m["codegen"].erase("abi");
  ArtifactWriter w(m, {{"codegen.x86-64.so", DType::U8, {int64_t(object.size())},
                        int64_t(object.size()), object.data()}});
  w.signWith(key);
  w.writeFile(none);
  EXPECT_THROW(load(none, how), std::runtime_error);
}
