//===- PackedLayouts.h - Weights written in their kernels' layout -*- C++ -*-===//
// After kernel selection, every weight the kernel plan reads as `rows8` is
// packed here, at compile time, into a U8 tensor "<name>.rows8" recorded in
// the manifest's "packed_weights" (runtime/src/exec/PackedWeights.h), so
// loading an artifact maps it and repacks nothing. The row-major tensor is
// kept only when a product still reads it that way; otherwise it is dropped
// (the embedding lookup of a tied table unpacks its one row per token).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

struct PackingResult {
  int64_t packed = 0;      // weights written in the rows8 layout
  int64_t keptRowMajor = 0; // of those, also kept row-major
  int64_t packedBytes = 0;
  double seconds = 0;
};

/// Rewrites `tensors` and `manifest` (its "kernel_plan" decides) as above;
/// `blobs` owns the packed bytes.
PackingResult packSelectedLayouts(nlohmann::json &manifest,
                                  std::vector<ArtifactWriter::Tensor> &tensors,
                                  std::vector<std::unique_ptr<std::string>> &blobs);

} // namespace llmc
