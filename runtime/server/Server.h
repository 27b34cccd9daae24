//===- Server.h - llmc serve: an OpenAI-compatible HTTP server -*- C++ -*-===//
// Serves one compiled artifact over HTTP (cpp-httplib from Debian):
//   POST /v1/completions, POST /v1/chat/completions (stream: server-sent
//   events), GET /v1/models, GET /health, GET /metrics (Prometheus text).
// Every request is a sequence of one continuous batcher (llmc/batcher.h)
// stepped by one engine thread; HTTP worker threads only parse, wait and
// write. A full queue answers 429; an invalid request (bad JSON, a field
// of the wrong type or range, a prompt larger than the context or the KV
// pool) 400 with an OpenAI-style JSON error body; a request that runs
// longer than the request timeout is cancelled (504, or the stream ends).
// A stream whose client goes away cancels its sequence at the next token.
// shutdown() (SIGTERM in `llmc serve`) stops taking requests (503), lets
// the running ones finish for up to the grace period, cancels the rest and
// returns from run().
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/batch_engine.h"
#include "llmc/batcher.h"
#include "llmc/executor.h"
#include "llmc/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace llmc::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080; // 0: any free port (port() tells which)
  BatcherOptions batch;
  std::string model_name = "llmc";
  int64_t default_max_tokens = 256;
  int request_timeout_s = 600; // a request's whole life
  int idle_timeout_s = 5;      // keep-alive and read timeout of a connection
  int grace_s = 30;            // shutdown: how long running requests may finish
  size_t max_body_bytes = 8 << 20;
  bool quiet = false;          // no request log on stderr
};

class Server {
public:
  /// `engine` (the CPU executor's or the GPU's, llmc/batch_engine.h) and
  /// `tok` (may be null: token-id prompts only) must outlive the server.
  Server(BatchEngine &engine, const Tokenizer *tok, ServerOptions opts);
  ~Server();
  /// Binds the address; throws std::runtime_error when it cannot.
  void bind();
  /// The bound port (after bind).
  int port() const;
  /// Serves until shutdown(); calls `ready` once listening.
  void run(const std::function<void()> &ready = {});
  /// Thread- and signal-safe-from-a-watcher: begin the graceful shutdown.
  void shutdown();

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace llmc::serve
