//===- PromptOptions.cpp - The prompt and sampling options of run/generate -===//
#include "Commands.h"

namespace llmc::tool {

void addPromptOptions(CLI::App *cmd, PromptChoice &p, const std::string &what,
                      const std::string &seedHelp) {
  cmd->add_flag("--chat", p.chat, "wrap " + what + " in the model's chat template");
  cmd->add_option("--system", p.system, "system message for --chat");
  cmd->add_option("--temp", p.sampling.temperature, "sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", p.sampling.top_k, "keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", p.sampling.top_p, "nucleus sampling mass (1: off)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--seed", p.sampling.seed, seedHelp);
}

std::vector<int32_t> encodePrompt(const Tokenizer &tok, const std::string &text,
                                  const PromptChoice &p, bool bos) {
  if (!p.chat)
    return tok.encode(text, bos, /*parse_special=*/false);
  std::vector<ChatMessage> msgs;
  if (!p.system.empty())
    msgs.push_back({"system", p.system});
  msgs.push_back({"user", text});
  return tok.encode(tok.applyChatTemplate(msgs, true), bos, /*parse_special=*/true);
}

} // namespace llmc::tool
