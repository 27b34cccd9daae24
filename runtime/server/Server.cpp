//===- Server.cpp - HTTP routes, the engine thread and shutdown -----------===//
#include "Server.h"
#include "OpenAiRequest.h"
#include "PeerSocket.h"
#include "StopText.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <sys/socket.h>

namespace llmc::serve {
namespace {
using nlohmann::json;
using Clock = std::chrono::steady_clock;
/// How often a handler waiting for a whole generation checks its client.
constexpr std::chrono::milliseconds kPeerPoll{200};

double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// One request's generation as the engine thread reports it.
struct Live {
  std::mutex mu;
  std::condition_variable cv;
  int64_t id = 0;
  Endpoint endpoint = Endpoint::Completions;
  std::vector<int32_t> tokens;
  StopText text{{}};
  bool finished = false;
  FinishReason reason = FinishReason::Error; // once finished
  std::string error;
  int64_t promptTokens = 0;
  Clock::time_point start = Clock::now(), firstToken;
};

/// OpenAI's finish_reason of a generation that ended for `r`.
const char *finishName(FinishReason r) {
  return r == FinishReason::Stop ? "stop"
         : r == FinishReason::Length || r == FinishReason::Context ? "length"
         : r == FinishReason::Cancelled ? "cancelled"
                                         : "error";
}

json errorBody(const std::string &message, const std::string &type, const std::string &param,
               const std::string &code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::string sse(const json &j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

} // namespace

struct Server::Impl {
  BatchEngine &model; // runs the steps
  const Tokenizer *tok;
  ServerOptions opts;
  Batcher batcher;
  httplib::Server http;
  int boundPort = -1;
  int listenFd = -1; // the listening socket (its backlog is raised after bind)
  std::atomic<bool> draining{false}, stopEngine{false};
  std::mutex runMu;
  std::condition_variable runCv;
  std::thread engine;
  // Live requests by batcher id (shutdown cancels them).
  std::mutex liveMu;
  std::map<int64_t, std::weak_ptr<Live>> live;
  uint64_t nextSeed = 0x9e3779b97f4a7c15ull;
  // Metrics.
  mutable std::mutex metricsMu;
  std::map<std::pair<std::string, int>, int64_t> responses; // (path, status)
  double ttftSum = 0, latencySum = 0;
  int64_t ttftCount = 0, latencyCount = 0;
  std::atomic<double> tokensPerSecond{0.0};

  Impl(BatchEngine &e, const Tokenizer *t, ServerOptions o)
      : model(e), tok(t), opts(std::move(o)), batcher(e, opts.batch) {
    routes();
  }

  void count(const std::string &path, int status) {
    std::lock_guard<std::mutex> lock(metricsMu);
    ++responses[{path, status}];
  }
  void replyError(httplib::Response &res, const std::string &path, int status,
                  const std::string &msg, const std::string &type,
                  const std::string &param = {}, const std::string &code = {}) {
    res.status = status;
    res.set_content(errorBody(msg, type, param, code).dump(), "application/json");
    count(path, status);
    if (!opts.quiet)
      fprintf(stderr, "[llmc] %s %d %s\n", path.c_str(), status, msg.c_str());
  }

  /// What token t adds to the decoded text after token `prev` (-1: none).
  /// A token's text depends only on the one before it (a SentencePiece
  /// space prefix is dropped after nothing or a special token), so the
  /// pieces of a generation concatenate to the decoding of all of it.
  std::string piece(int32_t prev, int32_t t) const {
    if (!tok)
      return (prev >= 0 ? " " : "") + std::to_string(t);
    if (prev < 0)
      return tok->decode({t});
    return tok->decode({prev, t}).substr(tok->decode({prev}).size());
  }

  RequestLimits limits() const {
    RequestLimits l;
    l.vocab = model.vocabSize();
    l.context = model.maxContext();
    l.default_max_tokens = opts.default_max_tokens;
    l.kv_bytes_per_position = model.kvBytesPerPosition();
    l.kv_pool_bytes = opts.batch.kv_pool_bytes;
    return l;
  }

  /// Queues a parsed request; null with the error already replied.
  std::shared_ptr<Live> start(Endpoint ep, ParsedRequest &p, const std::string &path,
                              httplib::Response &res) {
    auto lv = std::make_shared<Live>();
    lv->endpoint = ep;
    lv->promptTokens = int64_t(p.prompt.size());
    lv->text = StopText(p.stop);
    GenerationRequest r;
    r.prompt = std::move(p.prompt);
    r.max_tokens = p.max_tokens;
    r.sampling = p.sampling;
    if (!p.has_seed) {
      std::lock_guard<std::mutex> lock(liveMu);
      nextSeed = nextSeed * 6364136223846793005ull + 1442695040888963407ull;
      r.sampling.seed = nextSeed;
    }
    if (tok && !p.ignore_eos)
      r.stop_tokens = tok->stopTokens();
    GenerationEvents ev;
    std::weak_ptr<Live> weak = lv;
    ev.on_token = [this, weak](int32_t t) { onToken(weak, t); };
    ev.on_finish = [this, weak](FinishReason why, const std::string &err) {
      onFinish(weak, why, err);
    };
    int64_t id = 0;
    // Held across submit: the engine thread's callbacks (which lock it)
    // then always see the id.
    std::unique_lock<std::mutex> idLock(lv->mu);
    try {
      id = batcher.submit(std::move(r), std::move(ev));
      lv->id = id;
    } catch (const std::invalid_argument &e) {
      idLock.unlock();
      replyError(res, path, 400, e.what(), "invalid_request_error", "", "kv_pool_exceeded");
      return nullptr;
    }
    if (id != 0) { // before any callback can erase it
      std::lock_guard<std::mutex> lock(liveMu);
      live[id] = lv;
    }
    idLock.unlock();
    if (id == 0) {
      replyError(res, path, 429, "the server's queue is full; retry later",
                 "rate_limit_error");
      return nullptr;
    }
    return lv;
  }

  void onToken(const std::weak_ptr<Live> &weak, int32_t t) {
    auto lv = weak.lock();
    if (!lv)
      return;
    bool stopped = false;
    int64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(lv->mu);
      id = lv->id;
      if (lv->finished)
        return;
      if (lv->tokens.empty())
        lv->firstToken = Clock::now();
      stopped = lv->text.append(piece(lv->tokens.empty() ? -1 : lv->tokens.back(), t));
      lv->tokens.push_back(t);
      if (stopped) {
        lv->finished = true;
        lv->reason = FinishReason::Stop; // a stop string
      }
    }
    lv->cv.notify_all();
    if (stopped)
      batcher.cancel(id); // frees the sequence at the next step
  }

  void onFinish(const std::weak_ptr<Live> &weak, FinishReason why, const std::string &err) {
    auto lv = weak.lock();
    if (!lv)
      return;
    int64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(lv->mu);
      id = lv->id;
      if (!lv->finished) { // every token's text is in lv->text already
        lv->finished = true;
        lv->reason = why;
        lv->error = err;
      }
    }
    lv->cv.notify_all();
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(metricsMu);
      if (!lv->tokens.empty()) {
        ttftSum += secondsBetween(lv->start, lv->firstToken);
        ++ttftCount;
      }
      latencySum += secondsBetween(lv->start, now);
      ++latencyCount;
    }
    std::lock_guard<std::mutex> lock(liveMu);
    live.erase(id);
  }

  json usage(const Live &lv) const {
    const int64_t n = int64_t(lv.tokens.size());
    return {{"prompt_tokens", lv.promptTokens},
            {"completion_tokens", n},
            {"total_tokens", lv.promptTokens + n}};
  }
  std::string idOf(const Live &lv) const {
    return (lv.endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-") +
           std::to_string(lv.id);
  }

  /// A response body (or stream chunk) around one choice.
  json body(const Live &lv, const char *object, json choice) const {
    return {{"id", idOf(lv)},
            {"object", object},
            {"created", int64_t(std::time(nullptr))},
            {"model", opts.model_name},
            {"choices", json::array({std::move(choice)})}};
  }

  json finalBody(const Live &lv) const {
    const bool completion = lv.endpoint == Endpoint::Completions;
    json choice = {{"index", 0}, {"finish_reason", finishName(lv.reason)}};
    if (completion) {
      choice["text"] = lv.text.text();
      choice["logprobs"] = nullptr;
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", lv.text.text()}};
    }
    json b = body(lv, completion ? "text_completion" : "chat.completion", std::move(choice));
    b["usage"] = usage(lv);
    return b;
  }

  json chunk(const Live &lv, const std::string &delta, const json &finish, bool first) const {
    const bool completion = lv.endpoint == Endpoint::Completions;
    json choice = {{"index", 0}, {"finish_reason", finish}};
    if (completion) {
      choice["text"] = delta;
      choice["logprobs"] = nullptr;
    } else {
      choice["delta"] = first ? json{{"role", "assistant"}, {"content", delta}}
                              : (finish.is_null() ? json{{"content", delta}} : json::object());
    }
    return body(lv, completion ? "text_completion" : "chat.completion.chunk", std::move(choice));
  }

  void logDone(const std::string &path, int status, const Live &lv) {
    count(path, status);
    if (opts.quiet)
      return;
    const Clock::time_point now = Clock::now();
    fprintf(stderr, "[llmc] %s %d | prompt %lld tokens, generated %zu (%s), ttft %.3f s, %.2f s\n",
            path.c_str(), status, (long long)lv.promptTokens, lv.tokens.size(),
            finishName(lv.reason),
            lv.tokens.empty() ? 0.0 : secondsBetween(lv.start, lv.firstToken),
            secondsBetween(lv.start, now));
  }

  void generate(Endpoint ep, const httplib::Request &req, httplib::Response &res) {
    const std::string path = req.path;
    if (draining) {
      replyError(res, path, 503, "the server is shutting down", "server_error");
      return;
    }
    ParsedRequest p;
    if (auto e = parseRequest(ep, req.body, tok, limits(), p)) {
      replyError(res, path, 400, e->message, "invalid_request_error", e->param, e->code);
      return;
    }
    const bool stream = p.stream, usageChunk = p.include_usage;
    std::shared_ptr<Live> lv = start(ep, p, path, res);
    if (!lv)
      return;
    const Clock::time_point deadline = lv->start + std::chrono::seconds(opts.request_timeout_s);
    if (!stream) {
      // Waits for the whole generation, looking every 200 ms whether the
      // client is still there (httplib tells a waiting handler nothing).
      const int fd = findConnectionSocket(req.local_port, req.remote_addr, req.remote_port);
      std::unique_lock<std::mutex> lock(lv->mu);
      while (!lv->cv.wait_until(lock, std::min(deadline, Clock::now() + kPeerPoll),
                                [&] { return lv->finished; })) {
        const bool late = Clock::now() >= deadline;
        if (!late && !peerClosed(fd))
          continue;
        lock.unlock();
        batcher.cancel(lv->id);
        if (late)
          replyError(res, path, 504, "the request timed out after " +
                                         std::to_string(opts.request_timeout_s) + " s",
                     "timeout");
        else // nginx's "client closed request": nobody reads it
          replyError(res, path, 499, "the client closed the connection", "client_closed");
        return;
      }
      if (lv->reason == FinishReason::Error || lv->reason == FinishReason::Cancelled) {
        const bool cancelled = lv->reason == FinishReason::Cancelled;
        const std::string why = lv->error;
        lock.unlock();
        if (cancelled)
          replyError(res, path, 503, "the request was cancelled: the server is shutting down",
                     "server_error");
        else
          replyError(res, path, 500, "generation failed: " + why, "server_error");
        return;
      }
      res.set_content(finalBody(*lv).dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
      logDone(path, 200, *lv);
      return;
    }
    streamResponse(lv, path, deadline, usageChunk, res);
  }

  void streamResponse(const std::shared_ptr<Live> &lv, const std::string &path,
                      Clock::time_point deadline, bool usageChunk, httplib::Response &res) {
    auto sent = std::make_shared<size_t>(0);
    auto first = std::make_shared<bool>(true);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, lv, sent, first, path, deadline, usageChunk](size_t, httplib::DataSink &sink) {
          std::unique_lock<std::mutex> lock(lv->mu);
          lv->cv.wait_for(lock, std::chrono::milliseconds(200), [&] {
            return lv->finished || lv->text.safeLength(false) > *sent;
          });
          const bool done = lv->finished;
          const size_t safe = lv->text.safeLength(done);
          std::string out;
          if (safe > *sent || (*first && done)) {
            out += sse(chunk(*lv, lv->text.text().substr(*sent, safe - *sent), nullptr, *first));
            *sent = safe;
            *first = false;
          }
          if (done) {
            out += sse(chunk(*lv, "", finishName(lv->reason), false));
            if (usageChunk) {
              json u = chunk(*lv, "", nullptr, false);
              u["choices"] = json::array();
              u["usage"] = usage(*lv);
              out += sse(u);
            }
            out += "data: [DONE]\n\n";
          }
          lock.unlock();
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            batcher.cancel(lv->id); // the client went away
            return false;
          }
          if (done) {
            logDone(path, 200, *lv);
            sink.done();
          } else if (Clock::now() > deadline) {
            batcher.cancel(lv->id); // ends with finish_reason "cancelled"
          }
          return true;
        },
        [this, lv](bool success) {
          if (!success)
            batcher.cancel(lv->id);
        });
  }

  std::string metrics() const;
  void routes();
  void engineLoop();
};

std::string Server::Impl::metrics() const {
  const BatcherStats st = batcher.stats();
  std::string m;
  auto gauge = [&m](const char *name, const char *help, double v, const char *type = "gauge") {
    char num[64];
    snprintf(num, sizeof num, "%.10g", v);
    m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + num + "\n";
  };
  gauge("llmc_queue_depth", "Requests waiting for a batch slot.", st.waiting);
  gauge("llmc_running_sequences", "Sequences in the batch.", st.running);
  gauge("llmc_batch_size", "Sequences in the last forward step.", st.last_batch);
  gauge("llmc_batch_size_max", "Most sequences in one forward step so far.", st.peak_batch);
  gauge("llmc_steps_total", "Forward steps run.", double(st.steps), "counter");
  gauge("llmc_prompt_tokens_total", "Prompt tokens prefilled.", double(st.prompt_tokens),
        "counter");
  gauge("llmc_generation_tokens_total", "Tokens generated.", double(st.generated_tokens),
        "counter");
  gauge("llmc_generation_tokens_per_second", "Tokens generated per second, last second.",
        tokensPerSecond.load());
  gauge("llmc_kv_cache_bytes", "KV cache bytes held by running sequences.", double(st.kv_bytes));
  gauge("llmc_kv_reserved_bytes", "KV bytes reserved by running sequences (with a pool).",
        double(st.kv_reserved));
  gauge("llmc_kv_pool_bytes", "KV pool size (0: unlimited).", double(opts.batch.kv_pool_bytes));
  gauge("llmc_kv_pool_blocks", "Blocks of the paged KV pool (its capacity).",
        double(st.pool.capacity_blocks));
  gauge("llmc_kv_pool_blocks_used", "Pool blocks held by sequences.", double(st.pool.used_blocks));
  gauge("llmc_kv_pool_blocks_cached",
        "Pool blocks held only by the prefix cache (reclaimable).", double(st.pool.cached_blocks));
  gauge("llmc_kv_block_bytes", "Bytes of one KV block.", double(st.pool.block_bytes));
  gauge("llmc_prefix_cache_entries", "Prompt blocks published for sharing.",
        double(st.pool.prefix_entries));
  gauge("llmc_prefix_cache_hit_tokens_total", "Prompt tokens served from shared KV blocks.",
        double(st.prefix_hit_tokens), "counter");
  std::lock_guard<std::mutex> lock(metricsMu);
  m += "# HELP llmc_time_to_first_token_seconds Time from arrival to the first token.\n"
       "# TYPE llmc_time_to_first_token_seconds summary\n"
       "llmc_time_to_first_token_seconds_sum " + std::to_string(ttftSum) + "\n"
       "llmc_time_to_first_token_seconds_count " + std::to_string(ttftCount) + "\n";
  m += "# HELP llmc_request_seconds Time from arrival to the end of generation.\n"
       "# TYPE llmc_request_seconds summary\n"
       "llmc_request_seconds_sum " + std::to_string(latencySum) + "\n"
       "llmc_request_seconds_count " + std::to_string(latencyCount) + "\n";
  m += "# HELP llmc_http_responses_total Responses by path and status.\n"
       "# TYPE llmc_http_responses_total counter\n";
  for (const auto &[key, n] : responses)
    m += "llmc_http_responses_total{path=\"" + key.first + "\",status=\"" +
         std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  return m;
}

void Server::Impl::routes() {
  // cpp-httplib 0.11 listens with a backlog of 5 (compiled into Debian's
  // library): a burst of connections overflows it and clients see resets.
  // Its socket-options hook shows us the socket; bind() then listens again
  // with a real backlog.
  http.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listenFd = int(sock);
  });
  http.set_payload_max_length(opts.max_body_bytes);
  http.set_keep_alive_timeout(opts.idle_timeout_s);
  http.set_read_timeout(opts.idle_timeout_s, 0);
  http.set_write_timeout(opts.request_timeout_s, 0);
  const size_t workers = size_t(opts.batch.max_batch + opts.batch.max_queue + 8);
  http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http.Post("/v1/completions", [this](const httplib::Request &q, httplib::Response &r) {
    generate(Endpoint::Completions, q, r);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request &q, httplib::Response &r) {
    generate(Endpoint::ChatCompletions, q, r);
  });
  http.Get("/v1/models", [this](const httplib::Request &q, httplib::Response &r) {
    json m = {{"object", "list"},
              {"data", json::array({{{"id", opts.model_name},
                                     {"object", "model"},
                                     {"created", 0},
                                     {"owned_by", "llmc"},
                                     {"max_model_len", model.maxContext()}}})}};
    r.set_content(m.dump(), "application/json");
    count(q.path, 200);
  });
  http.Get("/health", [this](const httplib::Request &q, httplib::Response &r) {
    r.status = draining ? 503 : 200;
    r.set_content(json{{"status", draining ? "draining" : "ok"}}.dump(), "application/json");
    count(q.path, r.status);
  });
  http.Get("/metrics", [this](const httplib::Request &q, httplib::Response &r) {
    r.set_content(metrics(), "text/plain; version=0.0.4");
    count(q.path, 200);
  });
  http.set_error_handler([](const httplib::Request &, httplib::Response &r) {
    if (r.body.empty())
      r.set_content(errorBody(r.status == 404 ? "no such endpoint" : "request refused",
                              "invalid_request_error", "", "")
                        .dump(),
                    "application/json");
  });
}

void Server::Impl::engineLoop() {
  Clock::time_point t0 = Clock::now();
  int64_t g0 = 0;
  while (!stopEngine) {
    if (batcher.waitForWork(std::chrono::milliseconds(50)))
      batcher.step();
    const Clock::time_point now = Clock::now();
    if (secondsBetween(t0, now) >= 1.0) {
      const int64_t g = batcher.stats().generated_tokens;
      tokensPerSecond = double(g - g0) / secondsBetween(t0, now);
      g0 = g;
      t0 = now;
    }
  }
}

Server::Server(BatchEngine &engine, const Tokenizer *tok, ServerOptions opts)
    : impl(std::make_unique<Impl>(engine, tok, std::move(opts))) {}

Server::~Server() {
  shutdown();
  impl->stopEngine = true;
  if (impl->engine.joinable())
    impl->engine.join();
}

void Server::bind() {
  Impl &m = *impl;
  m.boundPort = m.opts.port == 0 ? m.http.bind_to_any_port(m.opts.host.c_str())
                                 : (m.http.bind_to_port(m.opts.host.c_str(), m.opts.port)
                                        ? m.opts.port
                                        : -1);
  if (m.boundPort <= 0)
    throw std::runtime_error("cannot listen on " + m.opts.host + ":" +
                             std::to_string(m.opts.port));
  if (m.listenFd >= 0)
    ::listen(m.listenFd, 1024); // Linux: a second listen() sets the backlog
}

int Server::port() const { return impl->boundPort; }

void Server::shutdown() {
  impl->draining = true;
  impl->runCv.notify_all();
}

void Server::run(const std::function<void()> &ready) {
  Impl &m = *impl;
  m.engine = std::thread([&m] { m.engineLoop(); });
  std::thread listener([&m] { m.http.listen_after_bind(); });
  if (ready)
    ready();
  {
    std::unique_lock<std::mutex> lock(m.runMu);
    m.runCv.wait(lock, [&] { return m.draining.load(); });
  }
  // Drain: running requests finish for up to the grace period, then the
  // rest are cancelled (their streams end, their waiters answer).
  const Clock::time_point until = Clock::now() + std::chrono::seconds(m.opts.grace_s);
  while (Clock::now() < until) {
    const BatcherStats st = m.batcher.stats();
    if (st.running == 0 && st.waiting == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  {
    std::lock_guard<std::mutex> lock(m.liveMu);
    for (const auto &[id, weak] : m.live)
      m.batcher.cancel(id);
  }
  for (int i = 0; i < 100; ++i) { // let the cancelled ones answer
    const BatcherStats st = m.batcher.stats();
    if (st.running == 0 && st.waiting == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300)); // last stream chunks
  m.http.stop();
  listener.join();
  m.stopEngine = true;
  m.batcher.notify();
  m.engine.join();
}

} // namespace llmc::serve
