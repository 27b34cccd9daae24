//===- PackedLayouts.cpp - Weights written in their kernels' layout ------===//
#include "compiler/artifact/PackedLayouts.h"
#include "runtime/src/exec/ThreadPool.h"
#include "runtime/src/kernels/rows8.h"
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

namespace llmc {

namespace {
bool isProduct(const std::string &k) {
  return k == "norm_matmul" || k == "norm_gated_matmul" || k == "matmul_add" || k == "norm_moe";
}

/// The weights the plan's products read row-major and the ones they read
/// as rows8. (The embedding lookup reads one row per token: from the packed
/// form when the table is also a product's weight, a tied LM head.)
void layoutUses(const nlohmann::json &plan, std::set<std::string> &rowMajor,
                std::set<std::string> &rows8) {
  for (const nlohmann::json &step : plan["steps"]) {
    if (!step.contains("weights") || step["kernel"] == "embed")
      continue;
    const nlohmann::json &w = step["weights"];
    const nlohmann::json *layouts = step.contains("layouts") ? &step["layouts"] : nullptr;
    for (size_t k = 0; k < w.size(); ++k) {
      const bool packed = isProduct(step["kernel"].get<std::string>()) && layouts &&
                          (*layouts)[k].get<std::string>() == "rows8";
      (packed ? rows8 : rowMajor).insert(w[k].get<std::string>());
    }
  }
}
} // namespace

PackingResult packSelectedLayouts(nlohmann::json &manifest,
                                  std::vector<ArtifactWriter::Tensor> &tensors,
                                  std::vector<std::unique_ptr<std::string>> &blobs) {
  PackingResult r;
  if (!manifest.contains("kernel_plan"))
    return r;
  auto t0 = std::chrono::steady_clock::now();
  std::set<std::string> rowMajor, rows8;
  layoutUses(manifest["kernel_plan"], rowMajor, rows8);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i)
    index[tensors[i].name] = i;
  ThreadPool pool(defaultThreadCount());
  nlohmann::json packed = nlohmann::json::object();
  std::set<std::string> drop;
  for (const std::string &name : rows8) {
    auto it = index.find(name);
    if (it == index.end())
      throw std::runtime_error("kernel plan weight '" + name + "' is not in the artifact");
    const ArtifactWriter::Tensor t = tensors[it->second];
    const std::optional<DType> format = kernels::rows8Layout(t.dtype);
    if (!format || (t.shape.size() != 2 && t.shape.size() != 3))
      throw std::runtime_error("weight '" + name + "' has no rows8 layout");
    // An expert tensor [experts, rows, cols] packs slab after slab (each
    // whole groups of 8 rows, so no group straddles two experts).
    const int64_t cols = t.shape.back();
    const int64_t rows = t.shape.size() == 3 ? t.shape[0] * t.shape[1] : t.shape[0];
    if (t.shape.size() == 3 && t.shape[1] % kernels::kRows8 != 0)
      throw std::runtime_error("weight '" + name + "': expert slabs of " +
                               std::to_string(t.shape[1]) + " rows are not whole groups of 8");
    const int64_t groups = rows / kernels::kRows8, gb = kernels::rows8GroupBytes(*format, cols);
    blobs.push_back(std::make_unique<std::string>(size_t(groups * gb), '\0'));
    auto *dst = reinterpret_cast<uint8_t *>(blobs.back()->data());
    const auto *src = static_cast<const uint8_t *>(t.data);
    const int64_t stride = rowBytes(t.dtype, cols);
    pool.parallelFor(0, groups, std::max<int64_t>(1, groups / 64), [&](int64_t g0, int64_t g1) {
      kernels::packRows8(t.dtype, src + g0 * kernels::kRows8 * stride, stride,
                         (g1 - g0) * kernels::kRows8, cols, dst + g0 * gb);
    });
    const std::string packedName = name + ".rows8";
    tensors.push_back({packedName, DType::U8, {groups * gb}, groups * gb, dst});
    packed[name] = {{"tensor", packedName},
                    {"layout", "rows8"},
                    {"format", std::string(dtypeName(*format))},
                    {"dtype", std::string(dtypeName(t.dtype))},
                    {"dtype_nbytes", t.nbytes}, // what the weight takes in its own format
                    {"shape", t.shape}};
    ++r.packed;
    r.packedBytes += groups * gb;
    if (rowMajor.count(name))
      ++r.keptRowMajor;
    else
      drop.insert(name);
  }
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [&](const ArtifactWriter::Tensor &t) { return drop.count(t.name); }),
                tensors.end());
  if (r.packed)
    manifest["packed_weights"] = std::move(packed);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

} // namespace llmc
