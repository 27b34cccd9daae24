//===- KvCache.h - One attention layer's KV cache under a policy -*- C++ -*-===//
// Each KV head of a layer has its own cache: entries (key, value, original
// position) in position order, f32, PolyKV-quantized, or (RDKV, after its
// compression) a byte arena of rows at per-entry bit widths (KvRdkv.h). A
// policy shrinks a head's cache by compaction, so evicted entries really
// free memory, and heads may keep different numbers of entries (per-head
// budgets are physically different sizes, not masks). Attention reads the
// entries in their stored form. Keys are stored after RoPE, so a kept entry
// keeps its original position without re-rotation.
//
// Hooks: after a step of several tokens (a prompt, or one chunk of it),
// prefill policies keep their budget of every position so far (so a prompt
// fed in chunks is compressed chunk by chunk, its cache never much above the
// budget); while decoding, decode policies evict back to the budget
// whenever a head has grown `refresh` entries past it.
//
// Memory: bytes() is the allocated storage of the entries and of the
// policy's state (window queries, W_O Gram matrices, attention
// statistics). A KvMeter shared by an executor's layers follows the sum of
// their bytes() after every change and keeps its high-water mark (the
// peak during prefill, which compress scratch buffers do not count in).
//===----------------------------------------------------------------------===//
#pragma once
#include "KvBlockPool.h"
#include "KvPolicy.h"
#include "KvQuant.h"
#include "llmc/codegen.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace llmc {
class ThreadPool;
}

namespace llmc::kv {

/// What a multi-token step is to the policies: a prompt (or a later turn),
/// which prefill policies compress, or a speculative verification pass,
/// whose rows are decode steps that may be rewound (dropFrom) after it.
enum class StepKind { Prompt, Verification };

struct HeadCache {
  int64_t n = 0;
  std::vector<float> k, v;     // [n, hd] when not quantized
  std::vector<uint8_t> kq, vq; // [n, keyBytes], [n, valueBytes] (PolyKV)
  std::vector<uint8_t> rd;     // RDKV: each entry's key row then value row at its widths
  std::vector<uint8_t> widths; // RDKV: per entry, rdkv::packWidths(key, value)
  std::vector<int32_t> pos;    // original positions
  std::vector<float> acc;      // running attention statistics (H2O, InertiaKV)
  BlockTable paged;            // f32 entries of a paged cache (k, v stay empty)
};

/// The current and peak bytes of a set of layer caches (one executor's).
struct KvMeter {
  int64_t current = 0, peak = 0;
  void resetPeak() { peak = current; }
};

class LayerCache {
public:
  using RowLoader = std::function<void(int64_t row, float *dst)>;
  /// wo_row loads row r (H*head_dim floats) of the output projection [D,
  /// H*head_dim]; only ReST-KV and LaProx use it (W_O^h Gram matrices).
  LayerCache(const Policy &policy, int64_t layer, int64_t heads, int64_t kv_heads,
             int64_t head_dim, int64_t window_limit, int64_t D, const RowLoader &wo_row);

  /// Append T rows (k, v: [T, stride] with the KV heads side by side) at
  /// positions p0.. (row t at p0 + t; a draft tree's rows at p0 + depth[t]).
  void append(const float *k, const float *v, int64_t T, int64_t stride, int64_t p0,
              const int32_t *depth = nullptr);
  /// append() of entries already in PolyKV's form (the GPU engine's, read
  /// back): keys [T][kv_heads][keyBytes], values [T][kv_heads][valueBytes]
  /// as PolyKV encodes them. std::runtime_error unless quantized().
  void appendEncoded(const uint8_t *keys, const uint8_t *values, int64_t T, int64_t p0);
  /// The PolyKV codec a cache of this policy, layer and head size uses (its
  /// rotation's signs come from the policy's seed and the layer).
  static PolyKV polyKvFor(const Policy &policy, int64_t layer, int64_t head_dim);
  /// Causal attention of T query rows [T, heads*head_dim] (the rows just
  /// appended) over the cache; out is [T, heads*head_dim]. `gen` holds the
  /// generated kernels for this head shape, if any: over the f32 cache
  /// (flat), a paged cache's rows (rows), and the same per GQA group of
  /// query heads (group, rowsGroup; used when no policy keeps running
  /// attention statistics); quantized and RDKV caches use the library's.
  void attend(ThreadPool &pool, const float *q, int64_t T, float *out,
              const codegen::AttendKernels &gen = {});
  /// Whether dropFrom() is exact: decoding changes nothing but the entries
  /// and the window queries (the full policy, or a policy that compresses
  /// prompts only and keeps no running statistics; f32 or PolyKV entries,
  /// recording nothing, not RDKV), so dropping the newest entries leaves
  /// the cache as if they had never been appended. Speculative decoding
  /// needs it.
  bool rewindable() const {
    return (policy_.full() || (!policy_.decode() && !policy_.accumulates() &&
                               policy_.method != KvMethod::RdKV)) &&
           !record_ && !rdStored_;
  }
  /// Whether a draft tree can be verified over this cache (attendTree,
  /// keepTreePath): rewindable under the full policy, recording nothing,
  /// f32 entries or a paged pool's rows (not PolyKV, not RDKV).
  bool treeVerifiable() const {
    return rewindable() && policy_.full() && !record_ && !quantized() && !rdStored_;
  }
  /// treeVerifiable() with `gen` holding the row-address group kernel for
  /// its entries' row type (attendTree's kernel).
  bool treeVerifiable(const codegen::AttendKernels &gen) const;
  /// Attention of the T rows of a draft tree just appended (row 0 follows
  /// the cache's earlier entries, row t > 0 follows row parent[t] < t):
  /// row t sees the earlier entries and the rows on its path from row 0,
  /// in entry order, through the generated GQA-group kernel over row
  /// addresses (gen.rowsGroup, or the f16 / Q8 one of a paged pool), so
  /// each row's output is plain decoding's bit for bit. std::runtime_error
  /// unless treeVerifiable() and that kernel is there.
  void attendTree(ThreadPool &pool, const float *q, int64_t T, const int32_t *parent, float *out,
                  const codegen::AttendKernels &gen) const;
  /// After a draft tree of T rows: keep rows `path` of it (ascending, each
  /// the next one's parent, starting at row 0) as consecutive entries and
  /// drop the others, as if only the path had been fed.
  void keepTreePath(int64_t T, const std::vector<int32_t> &path);
  /// Drop every entry at position >= pos (they are the newest: entries stay
  /// in position order), and the window queries of those positions.
  /// std::runtime_error unless rewindable().
  void dropFrom(int64_t pos);
  /// Apply the policy after a step of T tokens whose queries were q.
  void afterStep(const float *q, int64_t T, int64_t p0);
  /// afterStep() given only the step's last min(T, window) query rows (all
  /// a policy reads of them; the GPU engine downloads no more).
  void afterStepTail(const float *tail, int64_t T, int64_t p0);
  /// What the following steps are (until set again; Prompt by default). A
  /// Verification step is decoding, never compressed as a prompt; its
  /// window queries are trimmed to the window by the next step or
  /// dropFrom, so a rewind keeps the rows plain decoding would keep.
  /// std::runtime_error for Verification unless rewindable().
  void setStepKind(StepKind kind);

  void reset();
  /// Keep its entries in blocks of `pool` from now on, in the pool's
  /// element type (the cache must be empty and its head_dim the pool's;
  /// std::runtime_error otherwise).
  void usePool(std::shared_ptr<KvBlockPool> pool);
  bool paged() const { return pool_ && !quantized() && !rdStored_; }
  /// Whether its entries are RDKV's rows at per-entry widths (HeadCache::rd).
  bool rdStored() const { return rdStored_; }
  /// Every entry's key (value) row of KV head g as f32, in entry order,
  /// decoded from whatever form the cache stores them in.
  void keyRows(int64_t g, std::vector<float> &dst) const;
  void valueRows(int64_t g, std::vector<float> &dst) const;
  /// Whether the cache may take blocks from a (shared) block pool.
  bool usesBlockPool() const { return pool_ != nullptr; }
  /// Its entries' row type: the pool's when paged, else f32.
  KvRowType rowType() const { return paged() ? pool_->element() : KvRowType::F32; }
  /// Whether its policy lets leading blocks be shared once paged: the full
  /// cache in f32, recording nothing, its entries exactly positions 0..n-1.
  bool sharesPrefixes() const { return policy_.full() && !quantized() && !record_; }
  /// Whether its leading blocks may be shared with another sequence's now.
  bool prefixSharable() const { return paged() && sharesPrefixes(); }
  /// An empty sharable cache takes n_blocks leading blocks (already
  /// retained for it): block b of KV head g is blocks[b * width + first + g].
  void adoptPrefix(const std::vector<int32_t> &blocks, int64_t n_blocks, int64_t width,
                   int64_t first);
  /// The ids of its first n_blocks blocks in the same layout (for publishing).
  void prefixBlocks(int64_t n_blocks, int64_t width, int64_t first,
                    std::vector<int32_t> &blocks) const;
  /// Report every change of bytes() to `meter` (nullptr: stop), starting
  /// by adding the current bytes to it.
  void attachMeter(KvMeter *meter);
  /// Whether a prompt may be fed in chunks under this policy (RDKV's
  /// compression is one pass over the whole prompt).
  bool chunkablePrefill() const { return policy_.method != Method::RdKV; }
  /// Record window queries and cumulative attention whatever the policy
  /// (sweeps: a later setPolicy can then compress this cache).
  void setRecording(bool on) { record_ = on; }
  /// Switch to another policy; compress_now applies it as after a prompt.
  void setPolicy(const Policy &policy, bool compress_now);
  /// Bytes the cache holds (allocated capacity of every head's storage).
  int64_t bytes() const;
  int64_t entries() const;
  int64_t headEntries(int64_t kv_head) const { return heads_[size_t(kv_head)].n; }
  const HeadCache &head(int64_t kv_head) const { return heads_[size_t(kv_head)]; }
  const Policy &policy() const { return policy_; }
  int64_t kvHeads() const { return KV_; }
  int64_t headDim() const { return hd_; }

private:
  bool quantized() const { return policy_.quant == KvQuant::PolyKV; }
  /// Keeps the last min(T, window) query rows of a step (`tail`: the first of them).
  void recordWindow(const float *tail, int64_t T, int64_t p0, bool trim = true);
  /// The oldest window queries dropped until at most `keep` remain.
  void trimWindow(int64_t keep);
  void compress(bool decoding);
  /// RDKV's compression: per-entry widths over the layer (defined in KvRdkv.cpp).
  void compressRdkv();
  std::vector<float> headScores(int64_t g, bool decoding, std::vector<float> *relevance);
  void keep(int64_t g, const std::vector<int64_t> &idx, int64_t headroom);
  /// Every entry's key and value row of a paged head, in entry order (E:
  /// the pool's element type, float, uint16_t f16 bits or uint8_t for a
  /// Q8 row's bytes).
  template <typename E>
  void pagedRows(const HeadCache &c, std::vector<const E *> &k, std::vector<const E *> &v) const;
  /// Entry j's key / value row of a paged cache, in the pool's element type.
  const unsigned char *pagedKey(const HeadCache &c, int64_t j) const {
    return pool_->keyBytes(c.paged.id(size_t(j / blockEntries_))) +
           (j % blockEntries_) * pool_->rowBytes();
  }
  const unsigned char *pagedValue(const HeadCache &c, int64_t j) const {
    return pool_->valueBytes(c.paged.id(size_t(j / blockEntries_))) +
           (j % blockEntries_) * pool_->rowBytes();
  }
  /// Every key (values: value) row of a paged head as f32, into dst
  /// (widened from f16, or decoded from Q8).
  void pagedRowsF32(const HeadCache &c, bool values, std::vector<float> &dst) const;
  /// Attention of one query head over entries [first, last] of a paged
  /// cache, block by block (w: scores, then probabilities, by entry; f16
  /// and Q8 rows are decoded a block at a time).
  void attendPaged(const HeadCache &c, const float *qh, int64_t first, int64_t last, float scale,
                   float *w, float *out, float *scratch) const;
  /// The first entry query entry `last` sees (the attention window, if any).
  int64_t firstVisible(const HeadCache &c, int64_t last) const;
  /// attend() with the generated GQA-group kernels (f32, f16 or Q8 entries,
  /// no running statistics): one call per (KV head, query row) for the
  /// heads sharing it. A paged cache's row addresses by KV head, in the
  /// RowAddresses of its row type.
  template <typename E> struct RowAddresses {
    std::vector<std::vector<const E *>> k, v;
    /// Fills each of the cache's KV heads' addresses.
    void fill(const LayerCache &cache);
  };
  void attendByGroup(ThreadPool &pool, const float *q, int64_t T, float *out,
                     const codegen::AttendKernels &gen, const RowAddresses<float> &rows,
                     const RowAddresses<uint16_t> &half, const RowAddresses<uint8_t> &q8) const;
  /// attend()'s running statistics of query rows [tFirst, tLast) of a
  /// T-row step on KV head g of a contiguous f32 cache, through the
  /// generated group kernel: outputs into out, each head's probabilities
  /// over 1/group added into sum (by entry).
  void groupStatistics(const HeadCache &c, const float *q, int64_t tFirst, int64_t tLast,
                       int64_t T, int64_t g, codegen::AttendGroupFn group, float *out,
                       std::vector<float> &w, float *sum) const;
  void appendPaged(HeadCache &c, const float *kr, const float *vr);
  /// Entry `from`'s rows (in whatever form the cache stores them), position
  /// and statistic copied over entry `to` (KvRewind.cpp).
  void moveEntry(HeadCache &c, int64_t from, int64_t to);
  /// Entries n.. dropped: their rows, positions and statistics (the
  /// vectors keep their capacity; a paged cache's spare blocks go back).
  void truncateEntries(HeadCache &c, int64_t n);
  /// keep() of a paged cache: entries idx (ascending) moved to the front.
  void keepPaged(HeadCache &c, const std::vector<int64_t> &idx);

  void buildGram();
  void updateMeter();
  bool accumulating() const { return policy_.accumulates() || record_; }

  Policy policy_;
  std::shared_ptr<KvBlockPool> pool_; // paged caches only
  int64_t blockEntries_ = 0;
  RowLoader woRow_;
  int64_t D_ = 0;
  bool record_ = false;
  bool rdStored_ = false; // entries live in HeadCache::rd (RDKV after its compression)
  int64_t layer_, H_, KV_, hd_, group_, windowLimit_;
  PolyKV poly_;
  std::vector<HeadCache> heads_;
  std::vector<float> gram_;     // per query head hd x hd (ReST-KV, LaProx)
  std::vector<float> winQ_;     // last W query rows [<=W, H*hd], oldest first
  std::vector<int32_t> winPos_; // their positions
  int64_t promptLen_ = 0, steps_ = 0;
  StepKind stepKind_ = StepKind::Prompt;
  int64_t rewindFloor_ = 0; // dropFrom's lowest position: after the last compressed prompt
  KvMeter *meter_ = nullptr;
  int64_t metered_ = 0; // bytes() last reported to meter_
};

} // namespace llmc::kv
