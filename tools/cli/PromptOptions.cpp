//===- PromptOptions.cpp - Prompt, sampling and KV-paging options --------===//
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

void addKvPagingOptions(CLI::App *cmd, KvPagingChoice &k) {
  cmd->add_option("--kv-block", k.block_tokens,
                  "entries per block of the paged KV cache (default 16)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--contiguous-kv", k.contiguous,
                "keep each sequence's KV cache in its own arrays instead of pool blocks");
  cmd->add_flag("--no-prefix-cache", k.no_prefix_cache,
                "do not share the KV blocks of identical prompt prefixes");
}

void applyKvPaging(const KvPagingChoice &k, KvRowType rows, BatcherOptions &bo) {
  bo.paged_kv = !k.contiguous;
  bo.kv_block_tokens = k.block_tokens;
  bo.prefix_sharing = !k.no_prefix_cache;
  bo.kv_row_type = rows;
}

std::vector<int32_t> encodePrompt(const Tokenizer &tok, const std::string &text,
                                  const PromptChoice &p, bool bos) {
  if (!p.chat)
    return tok.encode(text, bos, /*parse_special=*/false);
  std::vector<ChatMessage> msgs;
  if (!p.system.empty())
    msgs.push_back({"system", p.system});
  msgs.push_back({"user", text});
  const std::string rendered = tok.applyChatTemplate(msgs, true);
  return bos ? tok.encodeChat(rendered) : tok.encode(rendered, false, /*parse_special=*/true);
}

} // namespace llmc::tool
