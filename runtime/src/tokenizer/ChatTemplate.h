//===- ChatTemplate.h - Render conversations for chat models ---*- C++ -*-===//
// Models ship a Jinja chat template; llmc runs no Jinja, it recognises the
// common families and renders them the way Jinja would:
//  - ChatML (template mentions <|im_start|>): "<|im_start|>{role}\n{content}
//    <|im_end|>\n" per message, "<|im_start|>assistant\n" as the generation
//    prompt. A default system message written in the template (SmolLM2,
//    Qwen2) is inserted when the conversation does not start with one.
//  - Llama 2 ([INST]): Meta's llama-2-chat format with <<SYS>>.
// Anything else, or no template, is rendered as plain ChatML.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/tokenizer.h"

#include <string>
#include <vector>

namespace llmc::tok {

struct ChatFormat {
  enum Style { ChatML, Llama2 } style = ChatML;
  bool hasDefaultSystem = false;
  std::string defaultSystem; // ChatML only
  std::string bos, eos;      // token texts, for Llama2
};

ChatFormat detectChatFormat(const std::string &jinjaSource, const std::string &bosText,
                            const std::string &eosText);
std::string renderChat(const ChatFormat &format, const std::vector<ChatMessage> &msgs,
                       bool addGenerationPrompt);

} // namespace llmc::tok
