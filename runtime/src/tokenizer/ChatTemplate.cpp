//===- ChatTemplate.cpp - Render conversations for chat models ------------===//
// The default system prompt is taken from a string literal in the template
// of the form '<|im_start|>system\n...<|im_end|>' (a real or an escaped
// newline); a literal that is built with '+' or {{ }} is not a default.
//===----------------------------------------------------------------------===//
#include "ChatTemplate.h"

namespace llmc::tok {
namespace {

// Undoes the escapes a Jinja string literal may contain.
std::string unescapeJinja(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
  }
  return out;
}

bool findDefaultSystem(const std::string &tmpl, std::string &out) {
  const std::string start = "<|im_start|>system", end = "<|im_end|>";
  for (size_t pos = tmpl.find(start); pos != std::string::npos;
       pos = tmpl.find(start, pos + 1)) {
    size_t body = pos + start.size();
    if (tmpl.compare(body, 1, "\n") == 0)
      body += 1;
    else if (tmpl.compare(body, 2, "\\n") == 0)
      body += 2;
    else
      continue;
    size_t stop = tmpl.find(end, body);
    if (stop == std::string::npos)
      continue;
    std::string text = tmpl.substr(body, stop - body);
    if (text.empty() || text.find_first_of("'\"{}") != std::string::npos)
      continue; // not one plain literal
    out = unescapeJinja(text);
    return true;
  }
  return false;
}

// Python's str.strip() for the whitespace that occurs in practice.
std::string strip(const std::string &s) {
  auto ws = [](char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
  };
  size_t b = 0, e = s.size();
  while (b < e && ws(s[b]))
    ++b;
  while (e > b && ws(s[e - 1]))
    --e;
  return s.substr(b, e - b);
}

std::string renderChatML(const ChatFormat &f, const std::vector<ChatMessage> &msgs,
                         bool addGenerationPrompt) {
  std::string out;
  if (f.hasDefaultSystem && !msgs.empty() && msgs[0].role != "system")
    out += "<|im_start|>system\n" + f.defaultSystem + "<|im_end|>\n";
  for (const ChatMessage &m : msgs)
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (addGenerationPrompt)
    out += "<|im_start|>assistant\n";
  return out;
}

// Meta's llama-2-chat template: the system prompt goes inside the first
// user turn; the template has no generation prompt.
std::string renderLlama2(const ChatFormat &f, const std::vector<ChatMessage> &msgs) {
  std::string out;
  size_t first = 0;
  bool hasSystem = !msgs.empty() && msgs[0].role == "system";
  if (hasSystem)
    first = 1;
  for (size_t i = first; i < msgs.size(); ++i) {
    std::string content = msgs[i].content;
    if (i == first && hasSystem)
      content = "<<SYS>>\n" + msgs[0].content + "\n<</SYS>>\n\n" + content;
    if (msgs[i].role == "user")
      out += f.bos + "[INST] " + strip(content) + " [/INST]";
    else if (msgs[i].role == "assistant")
      out += " " + strip(content) + " " + f.eos;
  }
  return out;
}

} // namespace

ChatFormat detectChatFormat(const std::string &jinjaSource, const std::string &bosText,
                            const std::string &eosText) {
  ChatFormat f;
  f.bos = bosText;
  f.eos = eosText;
  if (jinjaSource.find("<|im_start|>") != std::string::npos) {
    f.hasDefaultSystem = findDefaultSystem(jinjaSource, f.defaultSystem);
  } else if (jinjaSource.find("[INST]") != std::string::npos) {
    f.style = ChatFormat::Llama2;
  }
  return f;
}

std::string renderChat(const ChatFormat &format, const std::vector<ChatMessage> &msgs,
                       bool addGenerationPrompt) {
  if (format.style == ChatFormat::Llama2)
    return renderLlama2(format, msgs);
  return renderChatML(format, msgs, addGenerationPrompt);
}

} // namespace llmc::tok
