//===- CpuIsa.cpp - x86-64 instruction-set levels -------------------------===//
#include "llmc/codegen.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc::codegen {

const char *isaName(IsaLevel l) {
  switch (l) {
  case IsaLevel::X86_64:
    return "x86-64";
  case IsaLevel::V2:
    return "x86-64-v2";
  case IsaLevel::V3:
    return "x86-64-v3";
  case IsaLevel::V3Vnni:
    return "x86-64-v3-vnni";
  case IsaLevel::V4:
    return "x86-64-v4";
  case IsaLevel::V4Vnni:
    return "x86-64-v4-vnni";
  }
  return "x86-64";
}

std::optional<IsaLevel> parseIsa(const std::string &s) {
  for (IsaLevel l : kAllIsaLevels)
    if (s == isaName(l))
      return l;
  return std::nullopt;
}

bool hostRuns(IsaLevel l) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                  __builtin_cpu_supports("ssse3");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") &&
                  __builtin_cpu_supports("movbe");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  switch (l) {
  case IsaLevel::X86_64:
    return true;
  case IsaLevel::V2:
    return v2;
  case IsaLevel::V3:
    return v3;
  case IsaLevel::V3Vnni:
    return v3 && __builtin_cpu_supports("avxvnni");
  case IsaLevel::V4:
    return v4;
  case IsaLevel::V4Vnni:
    return v4 && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return l == IsaLevel::X86_64;
#endif
}

IsaLevel hostIsa() {
  IsaLevel best = IsaLevel::X86_64;
  for (IsaLevel l : kAllIsaLevels)
    if (hostRuns(l))
      best = l;
  return best;
}

bool hostHasVnni() { return hostRuns(IsaLevel::V3Vnni) || hostRuns(IsaLevel::V4Vnni); }

IsaLevel targetIsa() {
  const IsaLevel host = hostIsa();
  const char *env = std::getenv("LLMC_ISA");
  if (!env || !*env)
    return host;
  auto forced = parseIsa(env);
  if (!forced)
    throw std::runtime_error(std::string("LLMC_ISA='") + env +
                             "' is not one of x86-64, x86-64-v2, x86-64-v3, x86-64-v3-vnni, "
                             "x86-64-v4, x86-64-v4-vnni");
  if (!hostRuns(*forced))
    throw std::runtime_error(std::string("LLMC_ISA=") + env +
                             " needs instructions this CPU lacks (its level: " + isaName(host) +
                             ")");
  return *forced;
}

std::vector<IsaLevel> parseCpuLevels(const std::string &text, std::string &error) {
  error.clear();
  if (text == "all")
    return {std::begin(kAllIsaLevels), std::end(kAllIsaLevels)};
  if (text == "host") {
    try {
      return {targetIsa()};
    } catch (const std::exception &e) {
      error = e.what();
      return {};
    }
  }
  std::vector<IsaLevel> levels;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string name = text.substr(at, comma - at);
    const std::optional<IsaLevel> l = parseIsa(name);
    if (!l) {
      error = "'" + name + "' is not all, host or an x86-64 level (x86-64, x86-64-v2, "
              "x86-64-v3, x86-64-v3-vnni, x86-64-v4, x86-64-v4-vnni)";
      return {};
    }
    if (!levels.empty() && int(*l) <= int(levels.back())) {
      error = "the levels must be listed in increasing order without repeats ('" + name +
              "' after '" + isaName(levels.back()) + "')";
      return {};
    }
    levels.push_back(*l);
    at = comma + 1;
  }
  return levels;
}

} // namespace llmc::codegen
