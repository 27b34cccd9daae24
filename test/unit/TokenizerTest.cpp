//===- TokenizerTest.cpp - llmc::Tokenizer against reference fixtures -----===//
// SmolLM2 (byte-level BPE, "smollm" pre-tokenizer): every fixture text must
// encode to the ids Hugging Face `tokenizers` gives (fixture written by
// test/fixtures/make_tokenizer_fixture.py), decode back to itself, and the
// chat template must render as jinja2 renders it. The tokenizer data comes
// from the SmolLM2 GGUF through llmc's reader; those tests skip without it.
// A hand-made SentencePiece vocabulary checks the "llama" kind.
//===----------------------------------------------------------------------===//
#include "llmc/tokenizer.h"

#include "MissingInput.h"

#include "../../runtime/src/tokenizer/PreTokenizer.h"
#include "compiler/import/SourceModel.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

using llmc::ChatMessage;
using llmc::Tokenizer;
using llmc::TokenizerData;
using json = nlohmann::json;

namespace {

const std::string kSourceDir = LLMC_SOURCE_DIR;
const std::string kGgufPath = kSourceDir + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

const json &fixture() {
  static const json j = [] {
    std::ifstream in(kSourceDir + "/test/fixtures/smollm2_tokens.json");
    if (!in)
      throw std::runtime_error("missing test/fixtures/smollm2_tokens.json");
    return json::parse(in);
  }();
  return j;
}

// SmolLM2's tokenizer data, read once; nullptr if the model is absent.
const TokenizerData *smolData() {
  static const std::unique_ptr<TokenizerData> data = []() -> std::unique_ptr<TokenizerData> {
    if (!std::ifstream(kGgufPath))
      return nullptr;
    return std::make_unique<TokenizerData>(llmc::readGguf(kGgufPath).tokenizer);
  }();
  return data.get();
}

const Tokenizer *smol() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    const TokenizerData *d = smolData();
    return d ? std::make_unique<Tokenizer>(*d) : nullptr;
  }();
  return tok.get();
}

#define REQUIRE_SMOLLM2()                                                                      \
  if (!smol()) {                                                                               \
    LLMC_MISSING_INPUT("SmolLM2 GGUF " << kGgufPath << " (run scripts/setup.sh)");             \
  }

std::vector<int32_t> ids(const json &j) { return j.get<std::vector<int32_t>>(); }

std::vector<ChatMessage> messages(const json &j) {
  std::vector<ChatMessage> out;
  for (const json &m : j)
    out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

} // namespace

TEST(SmolLM2Tokenizer, MetadataMatchesFixture) {
  REQUIRE_SMOLLM2();
  const TokenizerData &d = smol()->data();
  const json &f = fixture();
  EXPECT_EQ(d.kind, "gpt2");
  EXPECT_EQ(d.pre, f.at("pre").get<std::string>());
  EXPECT_EQ(smol()->vocabSize(), f.at("vocab_size").get<int32_t>());
  EXPECT_EQ(d.bos_id, f.at("bos_id").get<int32_t>());
  EXPECT_EQ(d.eos_id, f.at("eos_id").get<int32_t>());
  EXPECT_EQ(d.add_bos, f.at("add_bos").get<bool>());
}

TEST(SmolLM2Tokenizer, EncodesLikeHuggingFace) {
  REQUIRE_SMOLLM2();
  int checked = 0;
  for (const json &c : fixture().at("cases")) {
    std::string text = c.at("text");
    EXPECT_EQ(smol()->encode(text, /*add_bos=*/true), ids(c.at("ids"))) << "text: " << text;
    if (c.contains("ids_no_special")) {
      EXPECT_EQ(smol()->encode(text, true, /*parse_special=*/false), ids(c.at("ids_no_special")))
          << "text (specials as text): " << text;
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

TEST(SmolLM2Tokenizer, DecodeRoundTrips) {
  REQUIRE_SMOLLM2();
  for (const json &c : fixture().at("cases")) {
    std::string text = c.at("text");
    std::vector<int32_t> enc = smol()->encode(text);
    EXPECT_EQ(smol()->decode(enc, /*keep_special=*/true), text);
    EXPECT_EQ(smol()->decode(enc), c.at("decoded").get<std::string>()) << "text: " << text;
    std::string streamed;
    for (int32_t id : enc)
      streamed += smol()->tokenText(id);
    EXPECT_EQ(streamed, text);
  }
}

TEST(SmolLM2Tokenizer, InvalidUtf8RoundTrips) {
  REQUIRE_SMOLLM2();
  const std::string text = "ok \x80 bad \xc3 cut \xe4\xbd and \xed\xa0\x80 surrogate\xc3";
  EXPECT_EQ(smol()->decode(smol()->encode(text)), text);
  // SmolLM2 has no token for 0xFF (never in UTF-8): dropped, not <|endoftext|>.
  EXPECT_EQ(smol()->decode(smol()->encode("a\xff" "b"), true), "ab");
}

TEST(SmolLM2Tokenizer, PreTokenizerFlavours) {
  REQUIRE_SMOLLM2();
  for (auto &[name, cases] : fixture().at("flavours").items()) {
    TokenizerData d = *smolData();
    d.pre = name;
    Tokenizer t(d);
    bool known = false;
    llmc::tok::PreFlavour flavour = llmc::tok::preFlavourFromName(name, &known);
    EXPECT_TRUE(known) << name;
    for (const json &c : cases) {
      std::string text = c.at("text");
      EXPECT_EQ(llmc::tok::preTokenize(flavour, text), c.at("pieces").get<std::vector<std::string>>())
          << name << " pieces of: " << text;
      EXPECT_EQ(t.encode(text), ids(c.at("ids"))) << name << " ids of: " << text;
    }
  }
}

TEST(SmolLM2Tokenizer, ChatTemplateLikeJinja) {
  REQUIRE_SMOLLM2();
  for (const json &c : fixture().at("chat"))
    EXPECT_EQ(smol()->applyChatTemplate(messages(c.at("messages")),
                                        c.at("add_generation_prompt").get<bool>()),
              c.at("rendered").get<std::string>())
        << c.at("name");
  // The rendered prompt tokenizes with the ChatML markers as single tokens.
  std::vector<int32_t> enc = smol()->encode(smol()->applyChatTemplate({{"user", "Hi"}}));
  EXPECT_EQ(enc.front(), 1); // <|im_start|>
}

// A chat template that starts with the BOS token gets one BOS, not two (a
// tokenizer that asks for BOS, as transformers' GGUF conversion of SmolLM2
// does with BOS <|im_start|>; Llama 3's templates write {{ bos_token }});
// one that does not start with it still gets BOS.
TEST(SmolLM2Tokenizer, ChatEncodingHasOneBos) {
  REQUIRE_SMOLLM2();
  TokenizerData d = *smolData();
  d.add_bos = true;
  d.bos_id = 1; // <|im_start|>
  const Tokenizer tok(d);
  const std::string rendered = tok.applyChatTemplate({{"user", "Hi"}}, true);
  const std::vector<int32_t> chat = tok.encodeChat(rendered);
  ASSERT_GE(chat.size(), 2u);
  EXPECT_EQ(chat[0], 1);
  EXPECT_NE(chat[1], 1);
  EXPECT_EQ(chat, tok.encode(rendered, false, true));
  const std::vector<int32_t> plain = tok.encodeChat("Hello");
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain[0], 1);
  EXPECT_EQ(plain.size(), tok.encode("Hello", false, true).size() + 1);
}

TEST(SmolLM2Tokenizer, StopTokens) {
  REQUIRE_SMOLLM2();
  std::vector<int32_t> stops = smol()->stopTokens();
  ASSERT_FALSE(stops.empty());
  EXPECT_EQ(stops.front(), smol()->data().eos_id);
  EXPECT_NE(std::find(stops.begin(), stops.end(), 2), stops.end()); // <|im_end|>
  EXPECT_NE(std::find(stops.begin(), stops.end(), 0), stops.end()); // <|endoftext|>
}

//===----------------------------------------------------------------------===//
// "llama" kind: SentencePiece BPE with a hand-made vocabulary.
//===----------------------------------------------------------------------===//
namespace {

// 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then pieces with scores.
TokenizerData makeLlamaVocab() {
  TokenizerData d;
  d.kind = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    d.tokens.push_back(name);
    d.token_types.push_back(6);
  }
  d.scores.assign(d.tokens.size(), 0.f);
  const std::pair<const char *, float> pieces[] = {
      {"\xE2\x96\x81", -1000}, // 259 ▁
      {"h", -1000},            // 260
      {"e", -1000},            // 261
      {"l", -1000},            // 262
      {"o", -1000},            // 263
      {"w", -1000},            // 264
      {"r", -1000},            // 265
      {"d", -1000},            // 266
      {"he", -1},              // 267
      {"ll", -2},              // 268
      {"llo", -3},             // 269
      {"hello", -4},           // 270
      {"\xE2\x96\x81hello", -5}, // 271 ▁hello
      {"or", -6},              // 272
      {"\xE2\x96\x81w", -7},   // 273 ▁w
      {"ld", -8},              // 274
      {"a", -1000},            // 275
      {"aa", -1.5},            // 276
  };
  for (auto &[text, score] : pieces) {
    d.tokens.push_back(text);
    d.token_types.push_back(1);
    d.scores.push_back(score);
  }
  d.bos_id = 1;
  d.eos_id = 2;
  d.unk_id = 0;
  d.add_bos = true;
  d.add_space_prefix = true;
  return d;
}

} // namespace

TEST(LlamaTokenizer, MergesByScore) {
  Tokenizer t(makeLlamaVocab());
  // ▁ h e l l o ▁ w o r l d -> he, ll, llo, hello, ▁hello, or, ▁w, ld
  EXPECT_EQ(t.encode("hello world", /*add_bos=*/false), (std::vector<int32_t>{271, 273, 272, 274}));
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{1, 271, 273, 272, 274}));
  EXPECT_EQ(t.decode({1, 271, 273, 272, 274}), "hello world");
  EXPECT_EQ(t.decode({1, 271, 273, 272, 274}, /*keep_special=*/true), "<s>hello world");
  // Equal scores: the leftmost pair first.
  EXPECT_EQ(t.encode("aaa", false), (std::vector<int32_t>{259, 276, 275}));
  EXPECT_EQ(t.encode("", false), std::vector<int32_t>{});
}

TEST(LlamaTokenizer, ByteFallback) {
  Tokenizer t(makeLlamaVocab());
  // 'é' (C3 A9) and '!' are not pieces: byte tokens 3 + byte.
  std::vector<int32_t> enc = t.encode("h\xC3\xA9!", false);
  EXPECT_EQ(enc, (std::vector<int32_t>{259, 260, 3 + 0xC3, 3 + 0xA9, 3 + 0x21}));
  EXPECT_EQ(t.decode(enc), "h\xC3\xA9!");
  EXPECT_EQ(t.tokenText(3 + 0xC3), "\xC3");
  EXPECT_EQ(t.tokenText(271), " hello");
  const std::string mixed = "w\xE4\xB8\xAD\xE6\x96\x87 hello \xF0\x9F\x98\x80";
  EXPECT_EQ(t.decode(t.encode(mixed)), mixed);
}

TEST(LlamaTokenizer, SpecialTokensInText) {
  Tokenizer t(makeLlamaVocab());
  // A space prefix goes after a special token, as in llama.cpp.
  EXPECT_EQ(t.encode("<s>hello", false), (std::vector<int32_t>{1, 271}));
  EXPECT_EQ(t.decode({1, 271}, true), "<s>hello");
  EXPECT_EQ(t.encode("<s>hello", false, /*parse_special=*/false),
            (std::vector<int32_t>{259, 3 + '<', 3 + 's', 3 + '>', 270}));
  EXPECT_EQ(t.decode(t.encode("<s>hello", false, false)), "<s>hello");
}

TEST(LlamaTokenizer, Llama2ChatTemplateLikeJinja) {
  TokenizerData d = makeLlamaVocab();
  d.chat_template = fixture().at("llama2_template").get<std::string>();
  Tokenizer t(d);
  for (const json &c : fixture().at("llama2_chat"))
    EXPECT_EQ(t.applyChatTemplate(messages(c.at("messages")),
                                  c.at("add_generation_prompt").get<bool>()),
              c.at("rendered").get<std::string>())
        << c.at("name");
  EXPECT_EQ(t.stopTokens(), std::vector<int32_t>{2});
}

TEST(TokenizerBasics, NoTemplateFallsBackToChatML) {
  Tokenizer t(makeLlamaVocab());
  EXPECT_EQ(t.applyChatTemplate({{"system", "S"}, {"user", "U"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.applyChatTemplate({{"user", "U"}}, false), "<|im_start|>user\nU<|im_end|>\n");
}

TEST(TokenizerBasics, RejectsBadData) {
  TokenizerData d = makeLlamaVocab();
  d.kind = "wordpiece";
  EXPECT_THROW(Tokenizer{d}, std::runtime_error);
  d = makeLlamaVocab();
  d.eos_id = 100000;
  EXPECT_THROW(Tokenizer{d}, std::runtime_error);
  d = makeLlamaVocab();
  d.token_types.pop_back();
  EXPECT_THROW(Tokenizer{d}, std::runtime_error);
  d = makeLlamaVocab();
  d.kind = "gpt2";
  d.merges = {"nospace"};
  EXPECT_THROW(Tokenizer{d}, std::runtime_error);

  Tokenizer t(makeLlamaVocab());
  EXPECT_THROW(t.decode({5000}), std::runtime_error);
  EXPECT_THROW(t.tokenText(-1), std::runtime_error);
  Tokenizer none{TokenizerData{}};
  EXPECT_THROW(none.encode("x"), std::runtime_error);
  EXPECT_EQ(none.vocabSize(), 0);
}
