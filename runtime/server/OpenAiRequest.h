//===- OpenAiRequest.h - OpenAI-style request bodies, checked -*- C++ -*-===//
// Parses the JSON body of /v1/completions and /v1/chat/completions into
// what the batcher runs, refusing (with a message naming the field) any
// body that is not an object, a field of the wrong type or range, an
// unsupported feature (n > 1, echo, logprobs, best_of, tools), or a prompt
// that does not fit the context. Pure functions of the body and the model's
// limits: the fuzz target runs them on arbitrary bytes.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"
#include "llmc/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmc::serve {

enum class Endpoint { Completions, ChatCompletions };

/// What the model allows a request.
struct RequestLimits {
  int64_t vocab = 0;
  int64_t context = 0;           // positions per sequence
  int64_t default_max_tokens = 256;
  int64_t kv_bytes_per_position = 0; // reserved per position of a sequence (0: no pool)
  int64_t kv_pool_bytes = 0;         // 0: no pool limit
};

struct ParsedRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;
  SamplerOptions sampling;
  bool has_seed = false;         // else the server picks one
  std::vector<std::string> stop; // stop strings (at most 4, none empty)
  bool stream = false;
  bool include_usage = false; // stream_options.include_usage
  bool ignore_eos = false;    // generate past the model's stop tokens (as llama-server and vLLM)
  std::string model;          // as given (may be empty)
};

/// An invalid request: the message and the field it concerns (may be
/// empty), for a 400 response.
struct RequestError {
  std::string message, param, code;
};

/// Parses `body`; on success fills `out` and returns nothing, else the
/// error. `tok` may be null only for token-id prompts (completions).
std::optional<RequestError> parseRequest(Endpoint endpoint, const std::string &body,
                                         const Tokenizer *tok, const RequestLimits &limits,
                                         ParsedRequest &out);

} // namespace llmc::serve
