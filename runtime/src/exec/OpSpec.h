//===- OpSpec.h - Arity and weight roles of each Program op -----*- C++ -*-===//
// The static part of the op table in llmc/program.h: how many inputs each op
// takes and which weight roles it requires or accepts. Used to validate a
// Program read from JSON and by the executor.
//===----------------------------------------------------------------------===//
#pragma once
#include <string>
#include <vector>

namespace llmc {

struct OpSpec {
  const char *op;
  int arity;
  std::vector<const char *> required;
  std::vector<const char *> optional;
};

inline const std::vector<OpSpec> &opSpecs() {
  static const std::vector<OpSpec> specs = {
      {"embed", 0, {"table"}, {}},
      {"rms_norm", 1, {"weight"}, {}},
      {"layer_norm", 1, {"weight"}, {"bias"}},
      {"add", 2, {}, {}},
      {"attention", 1, {"q", "k", "v", "o"}, {"q_bias", "k_bias", "v_bias"}},
      {"mlp", 1, {"gate", "up", "down"}, {}},
      {"moe", 1, {"router", "gate", "up", "down"}, {}},
      {"lm_head", 1, {"weight"}, {}},
  };
  return specs;
}

inline const OpSpec *findOpSpec(const std::string &op) {
  for (const OpSpec &s : opSpecs())
    if (op == s.op)
      return &s;
  return nullptr;
}

} // namespace llmc
