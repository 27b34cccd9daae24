//===- GeneratedKernels.h - The artifact's generated CPU kernels -*- C++ -*-===//
// The manifest's "codegen" section names the generated kernels (one
// matrix-vector kernel per weight format and input width of the model), the
// C++ source they were generated as, and the shared objects the compiler
// built from it per instruction-set level. load() picks the object for the
// level the runtime runs at (codegen::targetIsa(): the CPU's, or LLMC_ISA);
// when the artifact has none for that level it compiles the source (JIT)
// into a cache directory ($LLMC_JIT_CACHE, else $XDG_CACHE_HOME/llmc/jit or
// ~/.cache/llmc/jit) and reuses it next time; with no compiler it falls back
// to the best stored object below that level, else to none.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/codegen.h"
#include "llmc/dtype.h"

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
  static std::unique_ptr<GeneratedKernels> load(const Artifact &art, std::string &how);
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
  EmbedFn findEmbed(DType dtype, int64_t cols) const;
  AddFn findAdd() const;
  size_t size() const { return fns_.size() + rows8_.size() + ops_.size(); }
  const std::string &isa() const { return isa_; }

private:
  void *handle_ = nullptr;
  std::string isa_;
  std::map<std::pair<DType, int64_t>, MatvecFn> fns_;
  std::map<std::pair<DType, int64_t>, Rows8Fn> rows8_;
  std::map<std::string, void *> ops_; // by opKey()
  void *findOp(const std::string &key) const;
};

/// Where JIT-compiled and unpacked objects go (created on demand).
std::string jitCacheDir();

} // namespace llmc::codegen
