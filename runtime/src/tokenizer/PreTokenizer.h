//===- PreTokenizer.h - Regex-free splitters for byte-level BPE -*- C++ -*-===//
// Byte-level BPE first cuts text into pieces with a regex; merges never
// cross a piece boundary. The regexes are hand-coded here (std::regex knows
// no \p{L}), one matcher per family:
//   Gpt2:       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Gpt2Digits: every \p{N} alone first, then Gpt2 on the rest (SmolLM,
//               StarCoder: HF Digits(individual_digits) + ByteLevel)
//   Llama3:     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//               | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2:      Llama3 with \p{N} instead of \p{N}{1,3}
//===----------------------------------------------------------------------===//
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace llmc::tok {

enum class PreFlavour { Gpt2, Gpt2Digits, Llama3, Qwen2 };

/// Maps a GGUF tokenizer.ggml.pre name to a flavour. Names not known here
/// fall back to Gpt2 (the original byte-level BPE split); `known` says
/// whether the name was recognised.
PreFlavour preFlavourFromName(const std::string &pre, bool *known = nullptr);

/// Splits `text` into pieces, as [begin, end) byte ranges that cover it.
std::vector<std::pair<size_t, size_t>> preTokenizeRanges(PreFlavour flavour,
                                                         const std::string &text);
/// The same, as strings.
std::vector<std::string> preTokenize(PreFlavour flavour, const std::string &text);

} // namespace llmc::tok
