//===- ServeCommand.cpp - llmc serve ARTIFACT [--host] [--port] ----------===//
// Serves a compiled artifact over the OpenAI-compatible API (Server.h).
// SIGTERM and SIGINT are blocked in every thread and taken by one watcher
// thread (sigwait), which starts the graceful shutdown: the process then
// exits 0 once the running requests have finished or been cancelled.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Server.h"

#include <csignal>
#include <cstdio>
#include <pthread.h>
#include <thread>

namespace llmc::tool {
namespace {
struct ServeArgs {
  std::string input, host = "127.0.0.1", name;
  int port = 8080, threads = 0, maxBatch = 16, requestTimeout = 600, idleTimeout = 5,
      grace = 30;
  int64_t stepTokens = 256, maxQueue = 64, kvPoolMiB = 0, ctx = 0, maxTokens = 256;
  bool quiet = false;
  EngineChoice engine;
  KvPagingChoice kv;
  DeviceChoice device;
};

void declareServeOptions(CLI::App &app, ServeArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "serve", "Serve a compiled artifact over an OpenAI-compatible HTTP API "
               "(/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics) "
               "with continuous batching");
  cmd->add_option("model", a.input, ".llmc artifact (or a source model, compiled in memory)")
      ->required();
  cmd->add_option("--host", a.host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", a.port, "port (default 8080; 0: any free port, printed)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--max-batch", a.maxBatch, "sequences per forward step (default 16)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--step-tokens", a.stepTokens,
                  "tokens per step: one per decoding sequence, the rest prompt chunks "
                  "(default 256; must exceed --max-batch)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-queue", a.maxQueue, "requests waiting for a slot; more get 429 "
                                             "(default 64)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-pool", a.kvPoolMiB,
                  "MiB of KV cache for all sequences (the block pool): each reserves "
                  "(prompt + max_tokens) positions (at f32; f16 with --device cuda), in whole "
                  "blocks, while it runs; larger requests get 400 (0: room for --max-batch "
                  "whole contexts)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--model-name", a.name, "the model id in /v1/models (default: the file name)");
  cmd->add_option("--max-tokens", a.maxTokens, "max_tokens when a request gives none "
                                               "(default 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-timeout", a.requestTimeout, "seconds a request may take "
                                                         "(default 600)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--idle-timeout", a.idleTimeout, "seconds an idle connection stays open "
                                                   "(default 5)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--grace", a.grace, "seconds running requests may finish after SIGTERM "
                                      "(default 30)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a.threads, "worker threads of the engine (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--ctx", a.ctx, "maximum context per sequence (0: model's, capped at 4096)")
      ->check(CLI::NonNegativeNumber);
  addKvPagingOptions(cmd, a.kv);
  cmd->add_flag("-q,--quiet", a.quiet, "no request log on stderr");
  addEngineOptions(cmd, a.engine);
  addDeviceOptions(cmd, a.device);
}

std::string baseName(const std::string &path) {
  std::string s = path;
  while (!s.empty() && s.back() == '/')
    s.pop_back();
  const size_t slash = s.find_last_of('/');
  s = slash == std::string::npos ? s : s.substr(slash + 1);
  const size_t dot = s.rfind(".llmc");
  return dot != std::string::npos && dot + 5 == s.size() ? s.substr(0, dot) : s;
}

/// "kernels", or "cuda on NVIDIA H200 (...)".
std::string engineLabel(const BatchModel &m) {
  return m.gpu ? "cuda on " + m.gpu->deviceInfo() : m.engine->name();
}

int runServe(const ServeArgs &a) {
  if (const std::string bad = deviceConflicts(a.device, a.engine, a.threads); !bad.empty()) {
    fprintf(stderr, "llmc: error: %s\n", bad.c_str());
    return kUsage;
  }
  // Before any thread starts: the signals go to the watcher alone.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN); // a client that goes away is a failed write, not a death

  ExecutorOptions eo;
  eo.threads = a.threads;
  eo.max_context = a.ctx;
  BatchModel model =
      openForBatching(a.input, "", "", a.quiet, a.engine, eo, a.device, a.maxBatch, "serve",
                      a.kvPoolMiB << 20);
  if (!model.engine)
    return kNoDevice;
  BatchEngine &engine = *model.engine;
  const std::unique_ptr<Tokenizer> &tok = model.tok;

  serve::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.batch.max_batch = a.maxBatch;
  so.batch.step_tokens = a.stepTokens;
  so.batch.max_queue = a.maxQueue;
  so.batch.kv_pool_bytes = a.kvPoolMiB << 20;
  applyKvPaging(a.kv, a.engine.rowType(), so.batch);
  so.model_name = a.name.empty() ? baseName(a.input) : a.name;
  so.default_max_tokens = a.maxTokens;
  so.request_timeout_s = a.requestTimeout;
  so.idle_timeout_s = a.idleTimeout;
  so.grace_s = a.grace;
  so.quiet = a.quiet;
  std::unique_ptr<serve::Server> server;
  try {
    server = std::make_unique<serve::Server>(engine, tok.get(), so);
  } catch (const std::invalid_argument &e) {
    throw std::runtime_error(e.what());
  }
  server->bind();
  std::thread watcher([&server, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != 0)
      fprintf(stderr, "[llmc] %s: finishing running requests, then stopping\n",
              sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server->shutdown();
  });
  server->run([&] {
    fprintf(stderr,
            "[llmc] serving %s as '%s' on http://%s:%d | engine %s | max batch %d, step "
            "%lld tokens, queue %lld, KV pool %s, context %lld\n",
            a.input.c_str(), so.model_name.c_str(), a.host.c_str(), server->port(),
            engineLabel(model).c_str(), a.maxBatch, (long long)a.stepTokens, (long long)a.maxQueue,
            a.kvPoolMiB ? (std::to_string(a.kvPoolMiB) + " MiB").c_str() : "unlimited",
            (long long)engine.maxContext());
    fflush(stderr);
  });
  // run() returned: wake the watcher if shutdown came from elsewhere.
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  if (!a.quiet)
    fprintf(stderr, "[llmc] stopped\n");
  return kOk;
}
} // namespace

std::function<int()> addServeCommand(CLI::App &app) {
  auto a = std::make_shared<ServeArgs>();
  declareServeOptions(app, *a);
  return [a]() { return runServe(*a); };
}

} // namespace llmc::tool
