//===- CudaKvPolicy.h - KV-cache policies of the GPU engine -----*- C++ -*-===//
// The GPU engine's paged f16 cache under the policies that compress a
// prompt (kv_policy with mode=prefill: StreamingLLM, SnapKV, PyramidKV,
// DepthKV, ReST-KV, LaProx, CapKV, Random). The decision is the CPU
// engine's own code (kv::LayerCache), run on a host shadow of each
// (cache, sequence): after a multi-token step, the entries the shadow has
// not seen yet (the step's, and decode steps' since the last one) are read
// back from the device, the policy runs over them with the step's last
// window of queries, and the kept entries are written back to the front of
// the sequence's blocks, in order. From then on the sequence's cache slots
// fall behind its positions (kernel ABI 3: RoPE rotates by the position,
// writes at the slot, attention covers slots 0..slot), so decode steps,
// CUDA Graphs included, attend over the kept entries only. This is the
// hybrid: the graphs replay the decode step; compaction runs between steps.
// The KV heads of a cache share slots: when the policy kept fewer entries
// on some heads (LaProx's layer-wide selection, calibrated per-head
// budgets), such a head's slots between its count and the most any head
// kept are a hole its attention skips.
//
// Policies that evict while decoding (mode=decode or both) or keep running
// attention statistics (H2O, InertiaKV) get every decode step replayed into
// their shadow: the step's query row (copied by its RoPE step to a staging
// buffer, inside the decode step's CUDA Graph, and read back after it) and
// its new entry; the
// statistics come from the shadow's own attention over its entries (the
// CPU engine's code, output discarded: the GPU's is the one used), a
// prompt's from all its query rows; then the policy's decode hook, which
// evicts back to the budget whenever a head has grown `refresh` past it;
// the device is rewritten only then.
//
// PolyKV entries (kv_quant=polykv) are encoded on the device by the
// PolyKV kernels and read back, and written back, in that form: the shadow
// takes them as they are (LayerCache::appendEncoded), so its entries are
// the device's bit for bit.
//
// RDKV's rows at their per-entry widths (2, 4, 8 or 16 bits, or evicted)
// are decoded into the f16 slots when written back (every time its policy
// runs, evicting or not): attention sees the CPU's widths and evictions, to
// f16 rounding, but the device keeps f16 bytes for every kept entry (its
// evictions free slots; its narrower widths save nothing there yet).
//===----------------------------------------------------------------------===//
#pragma once
#include "../kv/KvCache.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llmc {
class ThreadPool;
}

namespace llmc::cuda {

/// One layer cache of the engine: its policy (Full when none) and shape.
struct CudaKvLayer {
  kv::Policy policy;
  int64_t layer = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t width = 0;                    // the model width (W_O's rows)
  kv::LayerCache::RowLoader woRow;      // W_O row loader (ReST-KV, LaProx)
  bool polyKv() const { return policy.quant == KvQuant::PolyKV; }
  /// Bytes of one key row and one value row on the device: f16, or PolyKV's.
  int64_t keyRowBytes() const;
  int64_t valueRowBytes() const;
};

/// The device side of compaction: blocks [first, first + count) of one
/// sequence's part of one cache, each [kvHeads][kBlock] rows of the
/// cache's key and value row bytes (CudaKvLayer), keys and values.
struct CudaKvBlockIo {
  std::function<void(int cache, int64_t seq, int64_t first, int64_t count, uint8_t *k,
                     uint8_t *v)>
      read;
  std::function<void(int cache, int64_t seq, int64_t first, int64_t count, const uint8_t *k,
                     const uint8_t *v)>
      write;
  /// Sequence seq's hole in cache `cache`: [lo, hi) per KV head (lo == hi: none).
  std::function<void(int cache, int64_t seq, const std::vector<int32_t> &lohi)> setHoles;
};

class CudaKvPolicies {
public:
  static constexpr int64_t kBlock = 16; // positions per KV block (kCudaKvBlock)

  CudaKvPolicies(std::vector<CudaKvLayer> caches, int64_t sequences);
  ~CudaKvPolicies();
  /// Whether some cache compresses (the engine then feeds slots apart from
  /// positions).
  bool any() const { return any_; }
  bool compresses(int cache) const { return !caches_[size_t(cache)].policy.full(); }
  /// Whether cache `cache` replays every decode step into its shadow (it
  /// evicts while decoding or keeps attention statistics).
  bool replaysDecode(int cache) const {
    const kv::Policy &p = caches_[size_t(cache)].policy;
    return p.decode() || p.accumulates();
  }
  /// Whether some cache does (its decode steps' query rows are then read back).
  bool anyReplaysDecode() const { return anyDecode_; }
  int64_t caches() const { return int64_t(caches_.size()); }
  /// Query rows a compressing cache's policy reads of a step of n rows
  /// (the last window of them; all of them for attention statistics).
  int64_t tailRows(int cache, int64_t n) const;
  /// Entries sequence seq has in cache `cache` (its next row's slot).
  int64_t slots(int cache, int64_t seq) const {
    return slots_[size_t(cache)][size_t(seq)];
  }
  /// n rows of sequence seq were appended to every cache.
  void advance(int64_t seq, int64_t n);
  void reset(int64_t seq);
  /// After a step of n > 1 rows of sequence seq from position p0, whose
  /// last tailRows(cache, n) query rows ([rows, heads * headDim]) are
  /// `tail`: the policy of `cache` keeps its budget, the device blocks
  /// rewritten through io when it evicted anything. Returns the entries
  /// evicted, summed over the KV heads.
  int64_t afterPrompt(int cache, int64_t seq, int64_t p0, int64_t n, const float *tail,
                      const CudaKvBlockIo &io);
  /// After a decode step of sequence seq at position pos whose query row
  /// was q: the shadow takes the step, and when the policy evicts, the
  /// device blocks are rewritten. Returns the entries evicted (over KV heads).
  int64_t afterDecode(int cache, int64_t seq, int64_t pos, const float *q,
                      const CudaKvBlockIo &io);

private:
  kv::LayerCache &shadow(int cache, int64_t seq);
  /// Reads the entries past synced_ (slots [synced, slots)) of the device
  /// cache into the shadow.
  void syncShadow(int cache, int64_t seq, int64_t lastPos, const CudaKvBlockIo &io);
  /// When the shadow holds fewer entries than `before` (summed over KV
  /// heads): its entries written to the front of the device blocks, holes
  /// set, slots = the most any head keeps. Returns the entries evicted.
  int64_t writeBack(int cache, int64_t seq, int64_t before, const CudaKvBlockIo &io);
  int64_t shadowEntries(int cache, int64_t seq);
  /// The shadow's attention of T query rows (its last T entries' own):
  /// what H2O and InertiaKV take their statistics from.
  void shadowAttend(int cache, kv::LayerCache &sh, const float *q, int64_t T);

  std::vector<CudaKvLayer> caches_;
  std::vector<std::vector<int64_t>> slots_;  // [cache][sequence]
  std::vector<std::vector<int64_t>> synced_; // slots the shadow has seen
  std::vector<std::vector<std::unique_ptr<kv::LayerCache>>> shadows_;
  std::unique_ptr<ThreadPool> pool_; // the shadows' attention (one thread, made on first use)
  std::vector<float> attendOut_;     // its output, unused
  bool any_ = false, anyDecode_ = false;
};

} // namespace llmc::cuda
