//===- CpuOpKernels.h - Generated kernels for the plan's other ops -*- C++ -*-===//
// Besides the matrix products (CpuKernelSource.h), the kernel plan has
// embedding lookups, RMSNorms (fused before a product or alone), gated
// activations, RoPE with the KV append, attention over the f32 KV cache and
// residual adds. Each gets a kernel with this model's constants compiled in:
// widths, head counts and head_dim (fixed trip counts, vector loops), the
// RoPE inverse frequencies as a table, 1/sqrt(head_dim), the embedding's
// block layout. The ABI of each is in llmc/codegen.h (RmsNormFn, GateFn,
// RopeFn, AttendFn, EmbedFn, AddFn); the manifest entry (manifestEntry())
// carries what the runtime matches a plan step against.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc::codegen {

struct OpKernelSpec {
  /// AttendF32Rows: attention over rows given by pointers (paged caches),
  /// the same arithmetic as AttendF32. The Group kinds: the `heads` query
  /// heads that share one KV head in one call (GQA), each head's results
  /// bit for bit the per-head kernel's (head_dim % 8 == 0, heads >= 2).
  /// AttendF16RowsGroup: AttendF32RowsGroup over IEEE f16 rows (paged
  /// caches on an f16 pool), its results on the widened rows bit for bit;
  /// AttendQ8RowsGroup the same over q8_0 rows (llmc/kv_row_type.h; a
  /// head_dim that is a multiple of 32), its results on the decoded rows.
  enum class Kind {
    RmsNorm, Gate, Rope, AttendF32, AttendF32Rows, AttendF32Group, AttendF32RowsGroup,
    AttendF16RowsGroup, AttendQ8RowsGroup, Embed, Add
  };
  Kind kind = Kind::Add;
  int64_t cols = 0;            // rms_norm, embed: the row width
  DType dtype = DType::F32;    // embed: the table's format
  std::string activation;      // gate: "silu" or "gelu"
  int64_t heads = 0, kvHeads = 0, headDim = 0; // rope (all), attend_f32(_rows) (headDim),
                                               // the group kinds (heads: the group size)
  double theta = 0;            // rope
  bool interleaved = false;    // rope: pairs (2i, 2i+1), else (i, i + head_dim/2)

  std::string symbol() const;
  /// {"symbol", "kind", ...the fields the runtime matches}.
  nlohmann::json manifestEntry() const;
  /// Equal kernels (same symbol) are generated once.
  bool operator<(const OpKernelSpec &o) const { return symbol() < o.symbol(); }
};

/// Whether an embedding table in `dtype` with rows of `cols` has a
/// generated lookup (the matrix formats of canGenerate(), and grouped
/// integers of any width whose groups divide the row).
bool canGenerateEmbed(DType dtype, int64_t cols);

/// The op kernels' C++ (after kernelSource()'s prelude, which it relies on:
/// v8f, h2f, bf2f, <cmath>). Throws std::invalid_argument for a spec it
/// cannot generate (bad shape, unknown activation, embed format).
std::string opKernelSource(const std::vector<OpKernelSpec> &ops);

} // namespace llmc::codegen
