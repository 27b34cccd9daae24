//===- Backend.h - One interface for every code generator -------*- C++ -*-===//
// A backend turns a model lowered to `llmk` (kernel selection and buffer
// planning done: `llmc-lower`) into the artifact sections that carry its
// kernels and the manifest entry that tells the runtime what they are. It
// reads the kernel decisions from the ops and their attributes, never from
// the JSON plan. The CPU backend (codegen/cpu/CpuBackend.cpp) is the first;
// the CUDA backend implements the same interface.
//===----------------------------------------------------------------------===//
#pragma once
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/codegen.h"
#include "mlir/Support/LogicalResult.h"

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc::codegen {

/// What a backend adds to an artifact.
struct BackendOutput {
  struct Section {
    std::string name;  // e.g. "codegen.x86-64-v3.so"
    std::string bytes; // stored as a U8 tensor
  };
  std::vector<Section> sections;
  nlohmann::json manifest; // the manifest's "codegen" entry; null: nothing generated
  std::string summary;     // one progress line
};

class Backend {
public:
  virtual ~Backend();
  /// "cpu", "cuda": the target the kernels are for.
  virtual const char *name() const = 0;
  /// Kernels for `lowered` (one llm.model holding llmk ops). Failure (with
  /// a diagnostic on the op it concerns) when the IR is not a lowered
  /// model; a model with nothing to generate gives a null manifest and a
  /// summary saying why. Building may fail (e.g. the object compiler):
  /// that is a null manifest too, its reason in the summary, so the
  /// artifact still runs on the runtime's library kernels.
  virtual mlir::FailureOr<BackendOutput> generate(llm::ModelOp lowered) = 0;
};

/// The x86-64 backend: C++ kernels specialised to the model, built in this
/// process into one object per x86-64 level of `levels` (llmc/codegen.h;
/// empty: all six, so the artifact runs at its best on any x86-64 CPU).
std::unique_ptr<Backend> createCpuBackend(std::vector<IsaLevel> levels = {});

/// NVIDIA GPUs: CUDA C++ kernels specialised to the model, compiled by NVRTC
/// (loaded at run time) into cubin for sm_80/sm_90 and PTX for compute_80.
std::unique_ptr<Backend> createCudaBackend();

} // namespace llmc::codegen
