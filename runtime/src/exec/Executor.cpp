//===- Executor.cpp - Run an artifact's Program on the CPU -----------------===//
// The Executor's public face: construction (ExecutorBuild.cpp resolves the
// program; ExecutorSteps.cpp runs it), what it reports about its engine and
// kernels, and the KV caches: reset, snapshots (saveKv / restoreKv) and
// policies set after construction.
//===----------------------------------------------------------------------===//
#include "ExecutorImpl.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace llmc {

Executor::Executor(const Artifact &artifact, ExecutorOptions opts)
    : impl(std::make_unique<Impl>(artifact, opts)) {}

Executor::~Executor() = default;

int64_t Executor::pos() const { return impl->pos; }
const std::vector<float> &Executor::hidden() const { return impl->hidden; }

const exec::Node *Executor::Impl::logitsNode() const {
  for (const Node &n : nodes)
    if (n.op == exec::Op::LmHead && n.out == output)
      return &n;
  return nullptr;
}

namespace {
void loadCheckedRow(const WeightMatrix &w, int32_t id, float *out, const char *what) {
  if (id < 0 || id >= w.rows)
    throw std::runtime_error(std::string("Executor: ") + what + " row " + std::to_string(id) +
                             " is outside 0.." + std::to_string(w.rows - 1));
  loadRow(w, id, out);
}
} // namespace

void Executor::lmHeadRow(int32_t id, float *out) const {
  const Impl &m = *impl;
  if (m.plan)
    return loadCheckedRow(m.plan->lmHeadMatrix(), id, out, "LM head");
  const exec::Node *n = m.logitsNode();
  if (!n)
    throw std::runtime_error("Executor::lmHeadRow: the program's logits are not an lm_head node");
  loadCheckedRow(n->a, id, out, "LM head");
}

void Executor::embeddingRow(int32_t id, float *out) const {
  const Impl &m = *impl;
  if (m.plan)
    return loadCheckedRow(m.plan->embeddingMatrix(), id, out, "embedding");
  for (const exec::Node &n : m.nodes)
    if (n.op == exec::Op::Embed)
      return loadCheckedRow(n.a, id, out, "embedding");
  throw std::runtime_error("Executor::embeddingRow: the program has no embed node");
}

int64_t Executor::hiddenSize() const {
  if (impl->plan)
    return impl->plan->hiddenWidth();
  const exec::Node *n = impl->logitsNode();
  return n ? n->inWidth : 0;
}

void Executor::lmHead(const float *x, int64_t rows, std::vector<float> &logits) {
  Impl &m = *impl;
  if (m.plan) {
    m.plan->lmHead(m.pool, x, rows, logits);
    return;
  }
  const exec::Node *n = m.logitsNode();
  if (!n)
    throw std::runtime_error("Executor::lmHead: the program's logits are not an lm_head node");
  logits.resize(size_t(rows * n->width));
  matmul(m.pool, n->a, x, rows, n->inWidth, logits.data(), n->width);
}
const char *Executor::engineName() const { return impl->plan ? "kernels" : "reference"; }
std::string Executor::untrustedCodeWarning() const {
  const std::string &h = impl->generatedHow;
  return h.rfind("not run: ", 0) == 0 ? h.substr(9) : "";
}

std::string Executor::generatedKernelsInfo() const {
  if (!impl->plan)
    return "none (reference engine)";
  if (!impl->generated)
    return impl->generatedHow;
  return impl->generatedHow + ", " + std::to_string(impl->generated->size()) + " kernels for " +
         std::to_string(impl->plan->generatedProducts()) + " products and " +
         std::to_string(impl->plan->generatedOps()) + " of " + std::to_string(impl->plan->ops()) +
         " other ops";
}
std::string Executor::activationsInfo() const {
  if (!impl->plan || impl->plan->int8Products() == 0)
    return "f32";
  char mib[32];
  snprintf(mib, sizeof mib, "%.1f", double(impl->plan->rows8Bytes()) / (1 << 20));
  // Weights come packed from the compiler; older artifacts are packed here.
  return "int8 in " + std::to_string(impl->plan->int8Products()) + " products (" +
         (impl->packed.empty() ? "" : "eight-row layouts packed at compile time; ") +
         "repacked at load: " + mib + " MiB)";
}
void Executor::reset() {
  impl->pos = 0;
  impl->treeRows = 0;
  for (kv::LayerCache &c : impl->caches)
    c.reset();
}
bool Executor::rewindable() const {
  for (const kv::LayerCache &c : impl->caches)
    if (!c.rewindable())
      return false;
  return true;
}
void Executor::rewind(int64_t pos) {
  if (impl->treeRows)
    throw std::runtime_error("Executor::rewind: a draft tree awaits acceptTreePath");
  if (pos < 0 || pos > impl->pos)
    throw std::runtime_error("Executor::rewind: position " + std::to_string(pos) +
                             " is outside 0.." + std::to_string(impl->pos));
  for (kv::LayerCache &c : impl->caches)
    c.dropFrom(pos);
  impl->pos = pos;
}
std::vector<float> Executor::verify(const std::vector<int32_t> &tokens) {
  Impl &m = *impl;
  m.checkTokens(tokens, m.pos);
  struct Restore { // every cache back to prompt steps, however the step ends
    std::vector<kv::LayerCache> &caches;
    ~Restore() {
      for (kv::LayerCache &c : caches)
        c.setStepKind(kv::StepKind::Prompt);
    }
  } restore{m.caches};
  for (kv::LayerCache &c : m.caches)
    c.setStepKind(kv::StepKind::Verification); // throws unless rewindable
  return m.step(tokens, /*all_logits=*/true);
}
ThreadPool &Executor::threadPool() { return impl->pool; }
bool Executor::treeVerifiable() const {
  const Impl &m = *impl;
  if (!m.plan || m.hook || m.stopAfterBlock >= 0)
    return false;
  for (const kv::LayerCache &c : m.caches)
    if (!c.treeVerifiable())
      return false;
  for (const PlanStep &s : m.plan->steps())
    if (s.kernel == PlanKernel::Attend && !m.caches[size_t(s.cache)].treeVerifiable(s.genAttend))
      return false;
  return true;
}
std::vector<float> Executor::verifyTree(const std::vector<int32_t> &tokens,
                                        const std::vector<int32_t> &parent) {
  Impl &m = *impl;
  if (m.treeRows)
    throw std::runtime_error("Executor::verifyTree: the last tree awaits acceptTreePath");
  if (!treeVerifiable())
    throw std::runtime_error("Executor::verifyTree: draft trees need the kernel plan, the full "
                             "KV policy over f32 or paged entries and the generated attention "
                             "kernels");
  if (parent.size() != tokens.size())
    throw std::runtime_error("Executor::verifyTree: one parent per token");
  m.checkTokens(tokens, m.pos);
  m.plan->run(m.pool, m.caches, tokens, m.pos, /*allLogits=*/true, m.planLogits,
              m.keepHidden ? &m.hidden : nullptr, parent.data());
  m.treeRows = int64_t(tokens.size());
  return m.planLogits;
}
void Executor::acceptTreePath(const std::vector<int32_t> &path) {
  Impl &m = *impl;
  if (!m.treeRows)
    throw std::runtime_error("Executor::acceptTreePath: no draft tree to accept from");
  if (path.empty() || path[0] != 0)
    throw std::runtime_error("Executor::acceptTreePath: the path starts at row 0");
  for (kv::LayerCache &c : m.caches)
    c.keepTreePath(m.treeRows, path);
  m.pos += int64_t(path.size());
  m.treeRows = 0;
}
int64_t Executor::vocabSize() const { return impl->widths[size_t(impl->output)]; }
int64_t Executor::maxContext() const { return impl->maxCtx; }
int64_t Executor::kvCacheEntries() const {
  int64_t e = 0;
  for (const kv::LayerCache &c : impl->caches)
    e += c.entries();
  return e;
}

struct KvSnapshot {
  std::vector<kv::LayerCache> caches;
  int64_t pos = 0;
};

std::shared_ptr<const KvSnapshot> Executor::saveKv() const {
  auto s = std::make_shared<KvSnapshot>();
  s->caches = impl->caches;
  for (kv::LayerCache &c : s->caches)
    c.attachMeter(nullptr); // a snapshot's bytes are not the executor's
  s->pos = impl->pos;
  return s;
}

void Executor::restoreKv(const KvSnapshot &snapshot) {
  if (snapshot.caches.size() != impl->caches.size())
    throw std::runtime_error("Executor::restoreKv: the snapshot is of another program");
  std::vector<kv::LayerCache> copy(snapshot.caches); // storage sized to the entries
  impl->caches.swap(copy);
  impl->pos = snapshot.pos;
  const int64_t peak = impl->kvMeter.peak;
  impl->attachKvMeter();
  impl->kvMeter.peak = std::max(peak, impl->kvMeter.current);
}

void Executor::setKvRecording(bool on) {
  for (kv::LayerCache &c : impl->caches)
    c.setRecording(on);
}

void Executor::setKvPolicies(const std::map<int64_t, nlohmann::json> &by_layer, bool compress_now) {
  Impl &m = *impl;
  std::vector<kv::Policy> policies(m.caches.size());
  for (const auto &[layer, json] : by_layer) {
    auto it = std::find(m.cacheLayers.begin(), m.cacheLayers.end(), layer);
    if (it == m.cacheLayers.end())
      throw std::runtime_error("Executor::setKvPolicies: no attention node has layer " +
                               std::to_string(layer));
    size_t i = size_t(it - m.cacheLayers.begin());
    if (!json.is_null())
      policies[i] = kv::parsePolicy(json, m.cacheDesc[i], m.caches[i].kvHeads());
  }
  // The layers apart, in parallel (scoring a prompt's entries is most of a
  // policy sweep's time), with the meter detached: it is re-attached to the
  // result, keeping the peak it had. Caches in a shared block pool (paged
  // rows) take and return its blocks: one layer at a time.
  const bool shared = std::any_of(m.caches.begin(), m.caches.end(),
                                  [](const kv::LayerCache &c) { return c.usesBlockPool(); });
  for (kv::LayerCache &c : m.caches)
    c.attachMeter(nullptr);
  m.pool.parallelFor(0, int64_t(m.caches.size()), shared ? int64_t(m.caches.size()) : 1,
                     [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      m.caches[size_t(i)].setPolicy(policies[size_t(i)], compress_now);
  });
  const int64_t peak = m.kvMeter.peak;
  m.attachKvMeter();
  m.kvMeter.peak = std::max(peak, m.kvMeter.current);
  for (size_t i = 0; i < m.caches.size(); ++i)
    m.freshCaches[i].setPolicy(policies[i], false);
}

int64_t Executor::kvCachePeakBytes() const { return impl->kvMeter.peak; }
void Executor::resetKvPeak() { impl->kvMeter.resetPeak(); }
int64_t Executor::kvBytesPerPosition() const {
  int64_t b = 0;
  for (const kv::LayerCache &c : impl->freshCaches)
    b += c.kvHeads() * c.headDim() * 2 * int64_t(sizeof(float));
  return b;
}
bool Executor::chunkablePrefill() const {
  for (const kv::LayerCache &c : impl->freshCaches)
    if (!c.chunkablePrefill())
      return false;
  return true;
}
int64_t Executor::prefillChunkFor(int64_t n) const { return impl->chunkFor(n); }

int64_t Executor::kvCacheBytes() const {
  int64_t bytes = 0;
  for (const kv::LayerCache &c : impl->caches)
    bytes += c.bytes();
  return bytes;
}

} // namespace llmc
