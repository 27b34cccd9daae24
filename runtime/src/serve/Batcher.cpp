//===- Batcher.cpp - Continuous batching over BatchEngine::forwardBatch ---===//
#include "llmc/batcher.h"

#include <cstdio>

#include <algorithm>
#include <stdexcept>

namespace llmc {

const char *finishReasonName(FinishReason r) {
  switch (r) {
  case FinishReason::Length:
    return "length";
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Context:
    return "context";
  case FinishReason::Cancelled:
    return "cancelled";
  case FinishReason::Error:
    return "error";
  }
  return "?";
}

struct Batcher::Sequence {
  int64_t id = 0;
  GenerationRequest request;
  GenerationEvents events;
  std::unique_ptr<EngineSequence> kv;
  Sampler sampler;
  int64_t fed = 0;       // prompt tokens fed
  int32_t pending = -1;  // the token the next decode step feeds
  int64_t generated = 0;
  int64_t chunk = 0;     // prompt tokens in the step being run
  bool cancelRequested = false; // by cancel(): ends at the next admit
  int64_t reserve = 0;   // KV bytes reserved while it runs
  bool done = false;
  FinishReason reason = FinishReason::Stop; // once done: told by deliver()
  std::string error;
  Sequence(int64_t i, GenerationRequest r, GenerationEvents e)
      : id(i), request(std::move(r)), events(std::move(e)), sampler(request.sampling) {}
  bool decoding() const { return fed == int64_t(request.prompt.size()); }
};

Batcher::Batcher(Executor &exec, BatcherOptions opts)
    : Batcher(makeExecutorBatchEngine(exec), opts) {}

Batcher::Batcher(std::unique_ptr<BatchEngine> owned, BatcherOptions opts)
    : owned_(std::move(owned)), engine_(*owned_), opts_(opts) {
  start();
}

Batcher::Batcher(BatchEngine &engine, BatcherOptions opts) : engine_(engine), opts_(opts) {
  start();
}

void Batcher::start() {
  if (opts_.max_batch < 1)
    throw std::invalid_argument("batcher: max_batch must be at least 1");
  if (opts_.step_tokens <= opts_.max_batch)
    throw std::invalid_argument("batcher: step_tokens (" + std::to_string(opts_.step_tokens) +
                                ") must exceed max_batch (" +
                                std::to_string(opts_.max_batch) +
                                ") so that prompts progress while every sequence decodes");
  if (opts_.max_queue < 0)
    throw std::invalid_argument("batcher: max_queue must be >= 0");
  if (opts_.kv_pool_bytes < 0)
    throw std::invalid_argument("batcher: kv_pool_bytes must be >= 0");
  engine_.configure(opts_);
}

int64_t Batcher::reserveBytes(int64_t positions) const {
  return engine_.reserveBytes(positions);
}

Batcher::~Batcher() = default;

int64_t Batcher::submit(GenerationRequest request, GenerationEvents events) {
  const int64_t n = int64_t(request.prompt.size());
  if (n == 0)
    throw std::invalid_argument("the prompt has no tokens");
  if (request.max_tokens < 1)
    throw std::invalid_argument("max_tokens must be at least 1");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= engine_.vocabSize())
      throw std::invalid_argument("token id " + std::to_string(t) +
                                  " is outside the vocabulary (size " +
                                  std::to_string(engine_.vocabSize()) + ")");
  if (n >= engine_.maxContext())
    throw std::invalid_argument("the prompt (" + std::to_string(n) +
                                " tokens) leaves no room in the context of " +
                                std::to_string(engine_.maxContext()) + " tokens");
  const int64_t positions = std::min(n + request.max_tokens, engine_.maxContext());
  const int64_t reserve = opts_.kv_pool_bytes > 0 ? reserveBytes(positions) : 0;
  if (reserve > opts_.kv_pool_bytes && opts_.kv_pool_bytes > 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "the request needs %.2f MiB of KV cache; the pool has %.2f MiB",
             double(reserve) / (1 << 20), double(opts_.kv_pool_bytes) / (1 << 20));
    throw std::invalid_argument(msg);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (int64_t(waiting_.size()) >= opts_.max_queue)
    return 0;
  const int64_t id = nextId_++;
  waiting_.push_back(std::make_unique<Sequence>(id, std::move(request), std::move(events)));
  waiting_.back()->reserve = reserve;
  stats_.waiting = int(waiting_.size());
  cv_.notify_all();
  return id;
}

void Batcher::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

void Batcher::notify() { cv_.notify_all(); }

bool Batcher::waitForWork(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    return !waiting_.empty() || !running_.empty() || !cancelled_.empty();
  });
}

BatcherStats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Batcher::finish(Sequence &s, FinishReason r, const std::string &error) {
  if (s.done)
    return;
  s.done = true;
  s.reason = r;
  s.error = error;
}

void Batcher::deliver(Sequence &s) {
  if (!s.events.on_finish)
    return;
  try {
    s.events.on_finish(s.reason, s.error);
  } catch (...) { // a callback's failure ends nothing but its own request
  }
}

void Batcher::admit() {
  std::vector<std::unique_ptr<Sequence>> dropped; // cancelled while waiting
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t id : cancelled_) {
      for (auto &r : running_)
        if (r->id == id)
          r->cancelRequested = true; // ends below, outside the lock
      auto it = std::find_if(waiting_.begin(), waiting_.end(),
                             [&](const std::unique_ptr<Sequence> &w) { return w->id == id; });
      if (it != waiting_.end()) {
        dropped.push_back(std::move(*it));
        waiting_.erase(it);
      }
    }
    cancelled_.clear();
    while (!waiting_.empty() && int(running_.size()) < opts_.max_batch &&
           (opts_.kv_pool_bytes <= 0 ||
            reserved_ + waiting_.front()->reserve <= opts_.kv_pool_bytes)) {
      reserved_ += waiting_.front()->reserve;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    stats_.waiting = int(waiting_.size());
  }
  for (auto &s : dropped) {
    finish(*s, FinishReason::Cancelled);
    deliver(*s);
  }
  for (auto &s : running_) {
    if (s->cancelRequested)
      finish(*s, FinishReason::Cancelled);
    else if (!s->kv) {
      s->kv = engine_.newSequence(s->request.prompt); // may start with shared prompt blocks
      const int64_t pos = s->kv->pos(), n = int64_t(s->request.prompt.size());
      if (pos < 0 || pos >= n) { // an engine must leave the last prompt token to run
        finish(*s, FinishReason::Error,
               "the engine's new sequence starts at position " + std::to_string(pos) +
                   ", not before the prompt's last token (" + std::to_string(n) + " tokens)");
        continue;
      }
      s->fed = pos;
      std::lock_guard<std::mutex> lock(mu_);
      stats_.prefix_hit_tokens += s->fed;
    }
  }
}

void Batcher::plan(std::vector<Sequence *> &order, std::vector<EngineEntry> &entries) {
  int64_t budget = opts_.step_tokens;
  for (auto &s : running_) // decode steps first: one token each
    if (!s->done && s->decoding()) {
      order.push_back(s.get());
      entries.push_back({s->kv.get(), {s->pending}});
      --budget;
    }
  const bool chunkable = engine_.chunkablePrefill();
  for (auto &s : running_) {
    if (s->done || s->decoding() || budget <= 0)
      continue;
    const int64_t remaining = int64_t(s->request.prompt.size()) - s->fed;
    int64_t chunk = chunkable ? std::min(remaining, budget) : remaining;
    // A one-token step is taken for a decode step by the KV policies: no
    // chunk of one, and no remainder of one, unless the prompt is one token.
    for (int k = 0; k < 2; ++k)
      if ((chunk == 1 && remaining > 1) || remaining - chunk == 1)
        chunk = std::min(remaining, chunk + 1);
    s->chunk = chunk;
    budget -= chunk;
    order.push_back(s.get());
    const auto first = s->request.prompt.begin() + s->fed;
    entries.push_back({s->kv.get(), std::vector<int32_t>(first, first + chunk)});
  }
}

void Batcher::afterStep(const std::vector<Sequence *> &order, const std::vector<float> &logits) {
  const int64_t vocab = engine_.vocabSize();
  int64_t prompt = 0, generated = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    Sequence &s = *order[i];
    if (!s.decoding()) {
      s.fed += s.chunk;
      prompt += s.chunk;
      if (!s.decoding())
        continue; // more of its prompt to come: no token yet
      engine_.publishPrompt(*s.kv, s.request.prompt);
    }
    const int32_t next = s.sampler.sample(logits.data() + int64_t(i) * vocab, vocab);
    const std::vector<int32_t> &stops = s.request.stop_tokens;
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      finish(s, FinishReason::Stop);
      continue;
    }
    ++s.generated;
    ++generated;
    try {
      if (s.events.on_token)
        s.events.on_token(next);
    } catch (...) {
      finish(s, FinishReason::Cancelled);
      continue;
    }
    if (s.generated >= s.request.max_tokens)
      finish(s, FinishReason::Length);
    else if (s.kv->pos() + 1 > engine_.maxContext())
      finish(s, FinishReason::Context);
    else
      s.pending = next;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.prompt_tokens += prompt;
  stats_.generated_tokens += generated;
}

bool Batcher::step() {
  admit();
  std::vector<Sequence *> order;
  std::vector<EngineEntry> entries;
  plan(order, entries);
  if (!entries.empty()) {
    try {
      const std::vector<float> logits = engine_.forwardBatch(entries);
      afterStep(order, logits);
    } catch (const std::exception &e) {
      for (Sequence *s : order)
        finish(*s, FinishReason::Error, e.what());
    }
  }
  // Sequences that ended leave the batch and give back their KV (blocks or
  // GPU slot) before anyone hears they finished, so a client that reads
  // /metrics after its answer sees the blocks free.
  std::vector<std::unique_ptr<Sequence>> ended;
  std::unique_lock<std::mutex> lock(mu_);
  const size_t before = running_.size();
  for (auto &s : running_)
    if (s->done) {
      reserved_ -= s->reserve;
      s->kv.reset();
      ended.push_back(std::move(s));
    }
  running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
  stats_.finished += int64_t(before - running_.size());
  stats_.running = int(running_.size());
  stats_.last_batch = int(entries.size());
  stats_.peak_batch = std::max(stats_.peak_batch, stats_.last_batch);
  stats_.kv_reserved = reserved_;
  stats_.pool = engine_.kvPoolInfo();
  stats_.kv_bytes = 0;
  for (const auto &s : running_)
    stats_.kv_bytes += s->kv ? s->kv->kvBytes() : 0;
  if (!entries.empty())
    ++stats_.steps;
  lock.unlock();
  for (auto &s : ended)
    deliver(*s);
  return !entries.empty() || before > 0;
}

} // namespace llmc
