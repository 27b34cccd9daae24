//===- CudaEngine.cpp - The kernel plan as CUDA launches -===//
// CudaEngine's public calls (llmc/cuda_engine.h): open, forward, batched
// decode; the state is in CudaEngineImpl.h.
//===----------------------------------------------------------------------===//
#include "CudaEngineImpl.h"

namespace llmc::cuda {

using namespace cudaengine;

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaEngine::~CudaEngine() = default;

std::unique_ptr<CudaEngine> CudaEngine::open(const Artifact &art, const CudaEngineOptions &opts,
                                             std::string &why) {
  if (!art.manifest().contains("kernel_plan"))
    throw std::runtime_error(art.path() + ": no kernel plan (compile with kernels)");
  verifyCudaSections(art, opts.trust); // the same refusals with or without a GPU
  for (const ProgramNode &n : art.program().nodes) { // refused before any GPU is opened
    if (n.op != "attention")
      continue;
    const nlohmann::json *kp = n.attrs.contains("kv_policy") ? &n.attrs["kv_policy"] : nullptr;
    const bool sliding = kp && kp->is_object() && kp->value("kind", "") == "sliding_window";
    if (sliding || !n.attrs.value("causal", true))
      throw std::runtime_error(art.path() + ": attention with a sliding window or without a "
                               "causal mask does not run on the GPU yet (the CPU engine runs it)");
    if (!kp || kp->is_null())
      continue;
    const int64_t layer = n.attrs.value("layer", int64_t(-1));
    const std::string ctx = art.path() + ": attention (layer " + std::to_string(layer) + ")";
    const int64_t heads = n.attrs.value("num_heads", int64_t(1));
    kv::parsePolicy(*kp, ctx, n.attrs.value("num_kv_heads", heads)); // every policy runs
  }
  auto impl = std::make_unique<Impl>(art, opts);
  impl->dev = CudaDevice::open(why);
  if (!impl->dev)
    return nullptr;
  const CudaImage img =
      trustedCudaImage(art, opts.trust, impl->dev->ccMajor(), impl->dev->ccMinor());
  impl->image = img.arch;
  void *module = impl->dev->loadModule(img.bytes);
  const int64_t ctx = art.config().context_length;
  impl->maxCtx = opts.max_context > 0 ? opts.max_context
                                      : (ctx > 0 ? std::min<int64_t>(ctx, 4096) : 4096);
  if (opts.max_sequences < 1 || opts.max_sequences > 1024)
    throw std::runtime_error("cuda engine: max_sequences must be in [1, 1024]");
  impl->maxSeqs = opts.max_sequences;
  impl->build(module);
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

std::vector<float> CudaEngine::forward(const std::vector<int32_t> &tokens, bool allLogits) {
  return forwardSequence(0, tokens, allLogits);
}

std::vector<float> CudaEngine::forwardSequence(int64_t seq, const std::vector<int32_t> &tokens,
                                               bool allLogits) {
  Impl &m = *impl_;
  m.checkSequence(seq);
  if (tokens.empty())
    throw std::runtime_error("forward: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= m.vocab)
      throw std::runtime_error("forward: token id " + std::to_string(t) + " outside [0, " +
                               std::to_string(m.vocab) + ")");
  int64_t &pos = m.seqPos[size_t(seq)];
  if (pos + int64_t(tokens.size()) > m.maxCtx)
    throw std::runtime_error("forward: context overflow: " + std::to_string(pos) + " + " +
                             std::to_string(tokens.size()) + " > " + std::to_string(m.maxCtx));
  const int64_t n = int64_t(tokens.size()), p0 = pos;
  m.ensureBlocks({{seq, m.slotsHeld(seq) + n}}); // throws, the cache unchanged, when full
  std::vector<float> out(size_t((allLogits ? tokens.size() : 1) * size_t(m.vocab)));
  // A multi-token call is a prompt to the KV policies: its last query rows
  // are kept as its chunks run, and the caches compressed after the last.
  const bool compress = n > 1 && m.kv->any();
  m.tail.on = compress;
  m.tail.rows = n;
  m.decodeQ.on = n == 1 && m.kv->anyReplaysDecode();
  try {
    for (size_t at = 0; at < tokens.size(); at += size_t(kCudaPrefillChunk)) {
      const int64_t T = std::min<int64_t>(kCudaPrefillChunk, int64_t(tokens.size() - at));
      const bool lastChunk = at + size_t(T) == tokens.size();
      for (int64_t t = 0; t < T; ++t) {
        m.hostTokens[size_t(t)] = tokens[at + size_t(t)];
        m.hostPos[size_t(t)] = int32_t(pos + t);
        m.hostSeq[size_t(t)] = int32_t(seq);
        m.setRowSlots(t, seq, t);
      }
      m.tail.at = int64_t(at);
      // A lone decode token replays bucket 1's graph (its one row's logits).
      float *dst =
          allLogits ? out.data() + at * size_t(m.vocab) : lastChunk ? out.data() : nullptr;
      m.step(T, T == 1 && !allLogits, allLogits, dst);
      pos += T;
      m.kv->advance(seq, T);
    }
  } catch (...) {
    m.tail.on = m.decodeQ.on = false;
    throw;
  }
  m.tail.on = false;
  if (compress)
    m.compressAfterPrompt(seq, p0, n);
  if (m.decodeQ.on) {
    m.decodeQ.on = false;
    m.evictAfterDecode({seq}, {p0});
  }
  m.trimBlocks(seq); // what the policy evicted goes back to the pool
  return out;
}

std::vector<float> CudaEngine::decodeBatch(const std::vector<int64_t> &seqs,
                                           const std::vector<int32_t> &tokens) {
  Impl &m = *impl_;
  const int64_t B = int64_t(seqs.size());
  if (B < 1 || tokens.size() != seqs.size())
    throw std::runtime_error("decodeBatch: one token per sequence, at least one");
  int64_t bucket = 1;
  while (bucket < B)
    bucket *= 2;
  if (bucket > kCudaMaxBatch)
    throw std::runtime_error("decodeBatch: more than " + std::to_string(kCudaMaxBatch) +
                             " sequences in one step");
  for (int64_t i = 0; i < B; ++i) {
    m.checkSequence(seqs[size_t(i)]);
    if (std::count(seqs.begin(), seqs.end(), seqs[size_t(i)]) != 1)
      throw std::runtime_error("decodeBatch: sequence " + std::to_string(seqs[size_t(i)]) +
                               " twice in one step");
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= m.vocab)
      throw std::runtime_error("decodeBatch: token id " + std::to_string(tokens[size_t(i)]) +
                               " outside [0, " + std::to_string(m.vocab) + ")");
    if (m.seqPos[size_t(seqs[size_t(i)])] + 1 > m.maxCtx)
      throw std::runtime_error("decodeBatch: sequence " + std::to_string(seqs[size_t(i)]) +
                               " is at the end of the context");
  }
  std::vector<std::pair<int64_t, int64_t>> need;
  for (int64_t q : seqs)
    need.emplace_back(q, m.slotsHeld(q) + 1);
  m.ensureBlocks(need); // throws, no cache changed, when the pool is full
  for (int64_t i = 0; i < bucket; ++i) { // padding rows: the scratch sequence at 0
    const bool real = i < B;
    m.hostTokens[size_t(i)] = real ? tokens[size_t(i)] : 0;
    m.hostSeq[size_t(i)] = int32_t(real ? seqs[size_t(i)] : m.maxSeqs);
    m.hostPos[size_t(i)] = int32_t(real ? m.seqPos[size_t(seqs[size_t(i)])] : 0);
    m.setRowSlots(i, real ? seqs[size_t(i)] : m.maxSeqs, 0);
  }
  std::vector<float> all(size_t(bucket * m.vocab));
  m.decodeQ.on = m.kv->anyReplaysDecode();
  try {
    m.step(bucket, true, true, all.data());
  } catch (...) {
    m.decodeQ.on = false;
    throw;
  }
  m.decodeQ.on = false;
  std::vector<int64_t> positions(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    positions[size_t(i)] = m.seqPos[size_t(seqs[size_t(i)])]++;
    m.kv->advance(seqs[size_t(i)], 1);
  }
  m.evictAfterDecode(seqs, positions);
  for (int64_t q : seqs)
    m.trimBlocks(q);
  all.resize(size_t(B * m.vocab));
  return all;
}

void CudaEngine::resetSequence(int64_t seq) {
  impl_->checkSequence(seq);
  Impl &m = *impl_;
  m.seqPos[size_t(seq)] = 0;
  m.kv->reset(seq);
  for (int c = 0; c < int(m.kv->caches()); ++c) // no holes in an empty cache
    if (m.kv->compresses(c))
      m.setHoles(c, seq, std::vector<int32_t>(m.hostHole[size_t(c)].size() /
                                                  size_t(m.maxSeqs + 1), 0));
  m.trimBlocks(seq); // all of them
}
int64_t CudaEngine::sequencePos(int64_t seq) const {
  impl_->checkSequence(seq);
  return impl_->seqPos[size_t(seq)];
}
int64_t CudaEngine::maxSequences() const { return impl_->maxSeqs; }
int64_t CudaEngine::kvBytesPerPosition() const {
  const Impl &m = *impl_;
  return m.stats.kv_bytes / (m.blocks.pool * kKvBlock);
}
int64_t CudaEngine::kvBlocksUsed() const { return impl_->blocks.used; }

void CudaEngine::reset() { resetSequence(0); }
int64_t CudaEngine::pos() const { return impl_->seqPos[0]; }
int64_t CudaEngine::vocabSize() const { return impl_->vocab; }
int64_t CudaEngine::maxContext() const { return impl_->maxCtx; }
const CudaEngineStats &CudaEngine::stats() const { return impl_->stats; }

std::string CudaEngine::deviceInfo() const {
  const Impl &m = *impl_;
  return m.dev->name() + " (compute capability " + std::to_string(m.dev->ccMajor()) + "." +
         std::to_string(m.dev->ccMinor()) + ", image " + m.image + ")";
}



} // namespace llmc::cuda
