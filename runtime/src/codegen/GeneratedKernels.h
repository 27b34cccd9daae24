//===- GeneratedKernels.h - The artifact's generated CPU kernels -*- C++ -*-===//
// The manifest's "codegen" section names the generated kernels (one
// matrix-vector kernel per weight format and input width of the model), the
// C++ source they were generated as, and the shared objects the compiler
// built from it per instruction-set level. load() runs native code only from
// an artifact signed by a trusted key (or compiled by this very process):
// it picks the object for the level the runtime runs at
// (codegen::targetIsa(): the CPU's, or LLMC_ISA), else the best stored one
// below it that the CPU runs, copies it into a sealed memory file, checks
// that copy against the signed SHA-256 and dlopens it from there. Nothing is
// written to disk and nothing is compiled at run time.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/codegen.h"
#include "llmc/dtype.h"
#include "llmc/signing.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace llmc::codegen {


class GeneratedKernels {
public:
  /// nullptr when the artifact has no "codegen" section. `how` says which
  /// object was loaded and why. Throws std::runtime_error on a malformed
  /// section or a broken object.
  /// nullptr too when the artifact's code may not run under `trust` (`how`
  /// says why; with trust.require_signed that is an error instead).
  static std::unique_ptr<GeneratedKernels> load(const Artifact &art,
                                                const signing::CodeTrust &trust,
                                                std::string &how);
  ~GeneratedKernels();

  /// The f32-activation kernel of rows of (dtype, cols), or nullptr.
  MatvecFn find(DType dtype, int64_t cols) const;
  /// The int8-activation eight-row kernel (abi 2), or nullptr.
  Rows8Fn findRows8(DType dtype, int64_t cols) const;
  /// Op kernels (abi 3), or nullptr when the artifact has none for the shape.
  RmsNormFn findRmsNorm(int64_t cols) const;
  GateFn findGate(const std::string &activation) const;
  RopeFn findRope(int64_t heads, int64_t kvHeads, int64_t headDim, double theta,
                  bool interleaved) const;
  AttendFn findAttendF32(int64_t headDim) const;
  /// Attention over rows by pointer (paged caches); artifacts compiled
  /// before it have none.
  AttendRowsFn findAttendF32Rows(int64_t headDim) const;
  /// The grouped (GQA) kernels for `group` query heads per KV head; none
  /// for artifacts compiled before them, MHA models or head_dim % 8 != 0.
  AttendGroupFn findAttendF32Group(int64_t headDim, int64_t group) const;
  AttendRowsGroupFn findAttendF32RowsGroup(int64_t headDim, int64_t group) const;
  AttendRowsGroupF16Fn findAttendF16RowsGroup(int64_t headDim, int64_t group) const;
  AttendRowsGroupQ8Fn findAttendQ8RowsGroup(int64_t headDim, int64_t group) const;
  EmbedFn findEmbed(DType dtype, int64_t cols) const;
  AddFn findAdd() const;
  size_t size() const { return fns_.size() + rows8_.size() + ops_.size(); }
  const std::string &isa() const { return isa_; }

private:
  void *handle_ = nullptr;
  int fd_ = -1; // the sealed memory file the object was loaded from
  std::string isa_;
  std::map<std::pair<DType, int64_t>, MatvecFn> fns_;
  std::map<std::pair<DType, int64_t>, Rows8Fn> rows8_;
  std::map<std::string, void *> ops_; // by opKey()
  void *findOp(const std::string &key) const;
  void bindSymbols(const nlohmann::json &kernels, const std::string &ctx);
};

} // namespace llmc::codegen
