//===- CpuIsa.cpp - x86-64 instruction-set levels -------------------------===//
#include "llmc/codegen.h"

#include <cstdlib>
#include <stdexcept>

namespace llmc::codegen {

const char *isaName(IsaLevel l) {
  switch (l) {
  case IsaLevel::X86_64:
    return "x86-64";
  case IsaLevel::V2:
    return "x86-64-v2";
  case IsaLevel::V3:
    return "x86-64-v3";
  case IsaLevel::V4:
    return "x86-64-v4";
  }
  return "x86-64";
}

std::optional<IsaLevel> parseIsa(const std::string &s) {
  for (IsaLevel l : {IsaLevel::X86_64, IsaLevel::V2, IsaLevel::V3, IsaLevel::V4})
    if (s == isaName(l))
      return l;
  return std::nullopt;
}

IsaLevel hostIsa() {
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
  return v4 ? IsaLevel::V4 : v3 ? IsaLevel::V3 : v2 ? IsaLevel::V2 : IsaLevel::X86_64;
#else
  return IsaLevel::X86_64;
#endif
}

bool hostHasVnni() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
#else
  return false;
#endif
}

IsaLevel targetIsa() {
  const IsaLevel host = hostIsa();
  const char *env = std::getenv("LLMC_ISA");
  if (!env || !*env)
    return host;
  auto forced = parseIsa(env);
  if (!forced)
    throw std::runtime_error(std::string("LLMC_ISA='") + env +
                             "' is not one of x86-64, x86-64-v2, x86-64-v3, x86-64-v4");
  if (int(*forced) > int(host))
    throw std::runtime_error(std::string("LLMC_ISA=") + env + " is above this CPU's level (" +
                             isaName(host) + ")");
  return *forced;
}

} // namespace llmc::codegen
