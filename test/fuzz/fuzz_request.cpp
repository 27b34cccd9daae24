//===- fuzz_request.cpp - OpenAI request bodies and stop strings ---------===//
// parseRequest (both endpoints, no tokenizer) on arbitrary bytes, and
// StopText on the same bytes split into stop strings and a text.
//===----------------------------------------------------------------------===//
#include "OpenAiRequest.h"
#include "StopText.h"

#include <algorithm>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string body(reinterpret_cast<const char *>(data), size);
  llmc::serve::RequestLimits lim;
  lim.vocab = 1000;
  lim.context = 64;
  lim.kv_bytes_per_position = 4096;
  lim.kv_pool_bytes = 1 << 20;
  for (auto ep : {llmc::serve::Endpoint::Completions, llmc::serve::Endpoint::ChatCompletions}) {
    llmc::serve::ParsedRequest out;
    auto err = llmc::serve::parseRequest(ep, body, nullptr, lim, out);
    if (!err && (out.prompt.empty() || out.max_tokens < 1 ||
                 int64_t(out.prompt.size()) + out.max_tokens > lim.context))
      __builtin_trap(); // accepted a request outside its limits
  }
  // Stop strings: the bytes up to the first NUL-separated pieces.
  std::vector<std::string> stops;
  size_t at = 0;
  for (int k = 0; k < 3; ++k) {
    size_t nul = body.find('\0', at);
    if (nul == std::string::npos || nul == at)
      break;
    stops.push_back(body.substr(at, nul - at));
    at = nul + 1;
  }
  llmc::serve::StopText text(stops);
  const std::string rest = body.substr(at);
  // Generation stops at the first piece after which the text holds a stop
  // string, cut before the earliest one in it: a longer stop string that
  // began earlier but would end in a later piece never completes. Pieces
  // after that are ignored.
  size_t fed = 0, cut = std::string::npos, kept = 0;
  for (size_t n = 0; n <= rest.size(); n += 1 + n / 4) {
    text.append(rest.substr(fed, n - fed)); // pieces of growing length
    fed = n;
    if (text.safeLength(false) > text.text().size())
      __builtin_trap();
    if (cut != std::string::npos)
      continue;
    kept = fed;
    for (const std::string &s : stops)
      cut = std::min(cut, rest.substr(0, fed).find(s));
  }
  if (text.text() != rest.substr(0, std::min(cut, kept)) || text.stopped() != (cut != std::string::npos))
    __builtin_trap();
  return 0;
}
