//===- CudaArtifact.cpp - An artifact's CUDA kernels, checked -------------===//
#include "llmc/cuda.h"

#include <stdexcept>
#include <utility>
#include <vector>

namespace llmc::cuda {

namespace {

const nlohmann::json &cudaEntry(const Artifact &art) {
  const nlohmann::json &m = art.manifest();
  if (!m.contains("codegen_cuda") || !m["codegen_cuda"].is_object())
    throw std::runtime_error(art.path() + " carries no CUDA kernels (compile it with "
                                          "`llmc compile --target cpu,cuda`)");
  return m["codegen_cuda"];
}

/// (arch, section name) of every image listed under `key` ("cubin", "ptx").
std::vector<std::pair<std::string, std::string>> images(const nlohmann::json &cg,
                                                        const char *key) {
  std::vector<std::pair<std::string, std::string>> out;
  if (cg.contains(key) && cg[key].is_object())
    for (auto it = cg[key].begin(); it != cg[key].end(); ++it)
      if (it.value().is_string())
        out.emplace_back(it.key(), it.value().get<std::string>());
  return out;
}

} // namespace

void verifyCudaSections(const Artifact &art, const signing::CodeTrust &trust) {
  const nlohmann::json &cg = cudaEntry(art);
  const nlohmann::json *abi = cg.contains("abi") ? &cg["abi"] : nullptr;
  if (!abi || !abi->is_number_integer() || abi->get<int64_t>() != kCudaKernelAbi)
    throw std::runtime_error(
        art.path() + ": its CUDA kernels follow kernel ABI " +
        (abi && abi->is_number_integer() ? std::to_string(abi->get<int64_t>()) : "(none)") +
        " and this runtime launches ABI " + std::to_string(kCudaKernelAbi) +
        ": recompile the model with `llmc compile --target cuda` (or cpu,cuda)");
  if (art.builtInThisProcess())
    return;
  const SignatureCheck c = art.checkSignature(trust.keys);
  if (c.status != SignatureStatus::Trusted)
    throw std::runtime_error(art.path() + " is " + c.describe() +
                             ": its CUDA kernels are not run; sign it with `llmc compile "
                             "--sign KEY` and trust the key with --trusted-key or the trust "
                             "store " + signing::defaultTrustDir());
  for (const char *key : {"cubin", "ptx"})
    for (const auto &[arch, section] : images(cg, key)) {
      const TensorView *t = art.tensor(section);
      const signing::Digest *want = art.tensorDigest(section);
      if (!t || t->dtype != DType::U8)
        throw std::runtime_error(art.path() + ": CUDA section '" + section + "' is missing");
      if (!want || signing::sha256(t->data, size_t(t->nbytes)) != *want)
        throw std::runtime_error(art.path() + ": CUDA section '" + section +
                                 "' does not match its signed SHA-256 (tampered)");
    }
}

CudaImage trustedCudaImage(const Artifact &art, const signing::CodeTrust &trust, int major,
                           int minor) {
  verifyCudaSections(art, trust);
  const nlohmann::json &cg = cudaEntry(art);
  std::vector<std::string> cubins, ptxs;
  for (const auto &[arch, section] : images(cg, "cubin"))
    cubins.push_back(arch);
  for (const auto &[arch, section] : images(cg, "ptx"))
    ptxs.push_back(arch);
  std::string why;
  CudaImage img;
  img.arch = pickCudaImage(cubins, ptxs, major, minor, why);
  if (img.arch.empty())
    throw std::runtime_error(art.path() + ": " + why);
  const std::string section =
      cg[img.arch.rfind("sm_", 0) == 0 ? "cubin" : "ptx"][img.arch].get<std::string>();
  const TensorView *t = art.tensor(section);
  img.bytes.assign(static_cast<const char *>(t->data), size_t(t->nbytes));
  return img;
}

} // namespace llmc::cuda
