//===- CudaAttentionSource.h - CUDA RoPE, KV append and attention -*- C++ -*-===//
// The attention half of a model's GPU kernels, specialised to one attention
// shape (heads, KV heads, head size, RoPE base and style): RoPE on q and k
// with the append of k and v to a paged f16 KV cache, and decode attention
// by split-KV flash decoding over that cache (a partial softmax per split of
// the positions, merged by a second kernel).
//
// The paged cache of one layer (K and V alike) is blocks of kCudaKvBlock
// positions: element d of position slot s of KV head h in block b is at
// ((b * kvHeads + h) * kCudaKvBlock + s) * headDim + d, f16 (bits as
// unsigned short). Sequence q's position p lies in block
// blockTable[q * maxBlocks + p / kCudaKvBlock]. A step's rows (tokens) each
// name their position (pos[t]) and sequence (rowSeq[t]; a null rowSeq: all
// rows are sequence 0), so one launch serves a prefill chunk of one
// sequence and a batched decode of many alike. A KV policy that evicted
// entries (compacted outside the kernels, runtime/src/cuda/CudaKvPolicy.h)
// decouples a row's cache slot from its position: slot[t] says where the
// row's k and v go, and attention covers slots 0..slot[t]; without a policy
// the slot is the position. When the policy kept fewer entries on some KV
// heads than on others (a layer-wide selection, per-head budgets), a head's
// slots [hole[0], hole[1]) hold nothing and attention skips them.
//
// Kernel ABI (extern "C"; 3 in llmc/cuda.h):
//   <rope>(const float *qkv, long long ldqkv, int T, const int *pos,
//          const int *slot, const int *rowSeq, float *q, long long ldq,
//          unsigned short *kpool, unsigned short *vpool, const int *blockTable,
//          int maxBlocks)
//     qkv row t: q (heads * hd), k, v (kvHeads * hd each). Writes q rotated
//     by position pos[t] to q + t * ldq and the rotated k and v (f16) into
//     the caches at slot[t] (pos[t] when slot is null). gridDim.x = T, any
//     blockDim.x.
//   <attend>(const float *q, long long ldq, int T, const int *pos,
//            const int *rowSeq, const int *hole, const unsigned short *kpool,
//            const unsigned short *vpool, const int *blockTable,
//            int maxBlocks, int nSplits, int splitLen, float *part)
//     One warp (blockDim.x = 32) per (row, KV head, split): gridDim.x =
//     T * kvHeads * nSplits, block index (t * kvHeads + h) * nSplits + s.
//     Split s covers positions [s * splitLen, (s + 1) * splitLen) up to the
//     row's own (causal); pos[t] here is the last cache slot row t sees
//     (its position, or its slot under a policy that evicted entries),
//     less slots [hole[2 (q kvHeads + h)], hole[2 (q kvHeads + h) + 1]) of
//     sequence q's KV head h (a null hole: none). For
//     each of the KV head's query heads it writes (max score, sum of exp,
//     sum of exp * v) to part + ((t * heads + head) * nSplits + s) * (hd +
//     2); an empty split writes a sum of 0.
//   <combine>(const float *part, int T, int nSplits, float *out,
//             long long ldo)
//     One warp per (row, head): gridDim.x = T * heads; merges the splits
//     into out + t * ldo + head * hd.
//
// PolyKV caches (kv_quant=polykv; runtime/src/kv/KvQuant.h) get a second
// set, for a power-of-two head size: each entry stored as the CPU engine
// stores it, a key row of hd int8 codes then hd/32 f16 scales (hd + hd/16
// bytes), a value row of its f16 norm then hd 3-bit codes (2 + 3 hd / 8
// bytes), at entry ((b * kvHeads + h) * kCudaKvBlock + s) of the pools:
//   <pkv_rope>(... as <rope>, unsigned char *kpool, unsigned char *vpool,
//              const int *blockTable, int maxBlocks, const float *signs)
//     signs: the layer's hd rotation signs (kv::PolyKV). One warp per KV
//     head encodes its entry (blockDim.x a multiple of 32).
//   <pkv_attend>(... as <attend>, const unsigned char *kpool,
//                const unsigned char *vpool, ...)
//     sums values in the rotated domain (norm / hd x level).
//   <pkv_combine>(const float *part, int T, int nSplits, float *out,
//                 long long ldo, const float *signs)
//     merges and rotates back (Walsh-Hadamard, then the signs).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/ir_enums.h"

#include <cstdint>
#include <string>

namespace llmc::codegen {

constexpr int kCudaKvBlock = 16;

struct CudaAttentionSpec {
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  double theta = 10000.0;
  RopeStyle style = RopeStyle::Half;

  std::string ropeSymbol() const;    // llmc_cu_rope_kv_<H>_<KV>_<hd>_<style>_<theta>
  std::string attendSymbol() const;  // llmc_cu_attend_<H>_<KV>_<hd>
  std::string combineSymbol() const; // llmc_cu_attend_combine_<H>_<hd>
  /// Also the PolyKV kernels (some layer of this shape stores PolyKV entries).
  bool polyKv = false;
  std::string polyKvRopeSymbol() const;    // llmc_cu_pkv_rope_<H>_<KV>_<hd>_<style>_<theta>
  std::string polyKvAttendSymbol() const;  // llmc_cu_pkv_attend_<H>_<KV>_<hd>
  std::string polyKvCombineSymbol() const; // llmc_cu_pkv_combine_<H>_<hd>
  /// Floats of one (row, head, split) partial result: hd + 2.
  int64_t partFloats() const { return headDim + 2; }
};

/// Shapes the kernels cover: heads a multiple of kvHeads with at most 8
/// query heads per KV head, head size a multiple of 32 up to 256, a
/// positive RoPE base. `why` says what is not covered.
bool canGenerateCudaAttention(const CudaAttentionSpec &s, std::string *why = nullptr);

/// canGenerateCudaAttention, and a power-of-two head size (PolyKV's rotation).
bool canGenerateCudaPolyKv(const CudaAttentionSpec &s, std::string *why = nullptr);

/// The three kernels of `s`, and the PolyKV ones when s.polyKv (std::invalid_argument when not covered).
std::string cudaAttentionSource(const CudaAttentionSpec &s);

} // namespace llmc::codegen
