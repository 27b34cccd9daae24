//===- ServeRequestTest.cpp - OpenAI request bodies and stop strings -----===//
// parseRequest on token-id prompts (no tokenizer needed): defaults, every
// field's type and range checks, unsupported features, the context and
// KV-pool limits; StopText: the cut at the first stop string and what a
// stream may send before the next token decides.
//===----------------------------------------------------------------------===//
#include "OpenAiRequest.h"
#include "StopText.h"

#include <gtest/gtest.h>

using namespace llmc::serve;

namespace {
RequestLimits limits() {
  RequestLimits l;
  l.vocab = 100;
  l.context = 32;
  l.default_max_tokens = 8;
  return l;
}

std::optional<RequestError> parse(const std::string &body, ParsedRequest &out,
                                  Endpoint ep = Endpoint::Completions,
                                  RequestLimits l = limits()) {
  return parseRequest(ep, body, nullptr, l, out);
}

/// The error's param for `body` ("" when it parses).
std::string errorParam(const std::string &body, RequestLimits l = limits()) {
  ParsedRequest p;
  auto e = parse(body, p, Endpoint::Completions, l);
  return e ? (e->param.empty() ? "<body>" : e->param) : "";
}
} // namespace

TEST(ServeRequest, TokenPromptAndDefaults) {
  ParsedRequest p;
  ASSERT_FALSE(parse(R"({"prompt": [1, 2, 3]})", p));
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(p.max_tokens, 8);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.0f); // OpenAI's default
  EXPECT_FALSE(p.has_seed);
  EXPECT_FALSE(p.stream);

  ParsedRequest q;
  ASSERT_FALSE(parse(R"({"prompt": [5], "max_tokens": 31, "temperature": 0, "top_p": 0.5,
                        "top_k": 3, "seed": 9, "stop": ["a", "bc"], "stream": true,
                        "stream_options": {"include_usage": true}, "model": "m", "n": 1})",
                     q));
  EXPECT_EQ(q.max_tokens, 31);
  EXPECT_FLOAT_EQ(q.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(q.sampling.top_p, 0.5f);
  EXPECT_EQ(q.sampling.top_k, 3);
  EXPECT_EQ(q.sampling.seed, 9u);
  EXPECT_TRUE(q.has_seed);
  EXPECT_EQ(q.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(q.stream);
  EXPECT_TRUE(q.include_usage);
  EXPECT_FALSE(q.ignore_eos);
  EXPECT_EQ(q.model, "m");
  ParsedRequest e;
  ASSERT_FALSE(parse(R"({"prompt": [5], "ignore_eos": true})", e));
  EXPECT_TRUE(e.ignore_eos);
  // The default shrinks to what the context leaves.
  ParsedRequest r;
  std::string thirty = R"({"prompt": [1)";
  for (int i = 1; i < 30; ++i)
    thirty += ",1";
  ASSERT_FALSE(parse(thirty + "]}", r));
  EXPECT_EQ(r.prompt.size(), 30u);
  EXPECT_EQ(r.max_tokens, 2);
}

TEST(ServeRequest, RefusesBadFields) {
  EXPECT_EQ(errorParam("not json"), "<body>");
  EXPECT_EQ(errorParam("[1, 2]"), "<body>");
  EXPECT_EQ(errorParam("{}"), "prompt");
  EXPECT_EQ(errorParam(R"({"prompt": []})"), "prompt");
  EXPECT_EQ(errorParam(R"({"prompt": [100]})"), "prompt");   // outside the vocabulary
  EXPECT_EQ(errorParam(R"({"prompt": [-1]})"), "prompt");
  EXPECT_EQ(errorParam(R"({"prompt": [1.5]})"), "prompt");
  EXPECT_EQ(errorParam(R"({"prompt": "text"})"), "prompt"); // no tokenizer here
  EXPECT_EQ(errorParam(R"({"prompt": [1], "max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "max_tokens": "5"})"), "max_tokens");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "max_tokens": 32})"), "max_tokens"); // 1 + 32 > 32
  EXPECT_EQ(errorParam(R"({"prompt": [1], "max_tokens": 18446744073709551615})"), "max_tokens");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "temperature": 2.5})"), "temperature");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "temperature": "hot"})"), "temperature");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "top_p": 0})"), "top_p");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "top_k": -1})"), "top_k");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "seed": 1.0})"), "seed");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "stop": 3})"), "stop");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "stop": [""]})"), "stop");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "stop": ["a","b","c","d","e"]})"), "stop");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "stream": 1})"), "stream");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "ignore_eos": "yes"})"), "ignore_eos");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "model": 7})"), "model");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "n": 2})"), "n");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "echo": true})"), "echo");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "logprobs": 2})"), "logprobs");
  EXPECT_EQ(errorParam(R"({"prompt": [1], "echo": false, "logprobs": null})"), "");
  // A prompt that fills the context leaves no room to generate.
  std::string full = R"({"prompt": [1)";
  for (int i = 1; i < 32; ++i)
    full += ",1";
  EXPECT_EQ(errorParam(full + "]}"), "prompt");
  // The KV pool: 10 + 8 positions of 1 KiB need 18 KiB.
  RequestLimits pool = limits();
  pool.kv_bytes_per_position = 1024;
  pool.kv_pool_bytes = 16 * 1024;
  EXPECT_EQ(errorParam(R"({"prompt": [1,1,1,1,1,1,1,1,1,1]})", pool), "max_tokens");
  EXPECT_EQ(errorParam(R"({"prompt": [1,1,1,1,1,1,1,1,1,1], "max_tokens": 6})", pool), "");
  // Chat needs messages (and a tokenizer).
  ParsedRequest p;
  auto e = parse(R"({"messages": []})", p, Endpoint::ChatCompletions);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages");
}

TEST(ServeRequest, StopTextCutsAndHoldsBack) {
  StopText t({"\n\n", "END"});
  EXPECT_FALSE(t.append("Hello"));
  EXPECT_EQ(t.safeLength(false), 5u);
  EXPECT_FALSE(t.append("\n"));
  EXPECT_EQ(t.safeLength(false), 5u); // "\n" may begin "\n\n"
  EXPECT_FALSE(t.append("E"));
  EXPECT_EQ(t.safeLength(false), 6u); // "E" may begin "END"
  EXPECT_EQ(t.safeLength(true), 7u);  // the end of the text: all of it
  EXPECT_TRUE(t.append("ND and more")); // the stop string spans two pieces
  EXPECT_EQ(t.text(), "Hello\n");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.safeLength(false), 6u);
  EXPECT_TRUE(t.append("anything else")); // final once stopped
  EXPECT_EQ(t.text(), "Hello\n");

  StopText u({});
  u.append("caf\xC3");                  // the first byte of a two-byte character
  EXPECT_EQ(u.safeLength(false), 3u);
  u.append("\xA9");
  EXPECT_EQ(u.safeLength(false), 5u);
  u.append("\xE2\x82");                // two bytes of a three-byte character
  EXPECT_EQ(u.safeLength(false), 5u);
  // The earliest stop string wins, wherever it is in the list.
  StopText v({"b", "a"});
  EXPECT_TRUE(v.append("xxaxb"));
  EXPECT_EQ(v.text(), "xx");
  // One byte at a time: a long stop string found across many pieces.
  StopText w({"<|end|>"});
  const std::string s = "abc<|en<|end|>tail";
  bool stopped = false;
  for (char c : s)
    stopped = w.append(std::string(1, c)) || stopped;
  EXPECT_TRUE(stopped);
  EXPECT_EQ(w.text(), "abc<|en");
}
