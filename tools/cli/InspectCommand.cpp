//===- InspectCommand.cpp - llmc inspect OUT.llmc -----------------------===//
#include "Commands.h"
#include <cstdio>
#include <string>
#include <vector>

namespace llmc::tool {
namespace {
struct InspectArgs {
  std::string input;
  bool json = false, ir = false, noVerify = false;
};

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}
/// One line per attention node that carries a kv_policy (written by
/// llm-kv-policy): its method, budget and the values that differ per layer.
void printKvPolicies(const Program &program) {
  int64_t attention = 0;
  std::vector<std::string> lines;
  for (const ProgramNode &n : program.nodes) {
    if (n.op != "attention")
      continue;
    ++attention;
    auto it = n.attrs.find("kv_policy");
    if (it == n.attrs.end() || !it->is_object())
      continue;
    const nlohmann::json &p = *it;
    char budget[64];
    if (p.value("budget_tokens", (int64_t)0) > 0)
      snprintf(budget, sizeof budget, "%lld tokens", (long long)p.value("budget_tokens", (int64_t)0));
    else
      snprintf(budget, sizeof budget, "%g", p.value("budget", 0.0));
    char line[256];
    snprintf(line, sizeof line, "  layer %-4lld %-10s budget %s, layer_scale %g, mode %s, kv_quant %s",
             (long long)n.attrs.value("layer", (int64_t)-1), p.value("method", "?").c_str(), budget,
             p.value("layer_scale", 1.0), p.value("mode", "?").c_str(),
             p.value("kv_quant", "?").c_str());
    lines.push_back(line);
  }
  if (lines.empty())
    return;
  printf("kv policies:   %zu of %lld attention layers\n", lines.size(), (long long)attention);
  for (const std::string &l : lines)
    printf("%s\n", l.c_str());
}

/// The drafter llm-spec-attach attached (manifest "speculation"), with its
/// fit for Medusa heads.
void printSpeculation(const nlohmann::json &m) {
  if (!m.contains("speculation") || !m["speculation"].is_object())
    return;
  const nlohmann::json &s = m["speculation"];
  const std::string method = s.value("method", "?");
  printf("speculation:   %s, drafts of up to %lld tokens", method.c_str(),
         (long long)s.value("max_draft", (int64_t)0));
  if (method == "ngram")
    printf(", suffixes of up to %lld tokens\n", (long long)s.value("ngram", (int64_t)0));
  else if (method == "self") {
    std::string list;
    if (s.contains("skip_blocks") && s["skip_blocks"].is_array())
      for (const nlohmann::json &b : s["skip_blocks"])
        list += (list.empty() ? "" : ",") + b.dump();
    printf(", the model without blocks %s\n", list.c_str());
  } else
    printf(", %lld heads over a draft vocabulary of %zu tokens%s\n",
           (long long)s.value("heads", (int64_t)0),
           s.contains("draft_vocab") && s["draft_vocab"].is_array() ? s["draft_vocab"].size()
                                                                     : size_t(0),
           s.contains("tree_nodes") && s["tree_nodes"].is_number_integer()
               ? (", trees of up to " + std::to_string(s["tree_nodes"].get<int64_t>()) +
                  " tokens")
                     .c_str()
               : "");
  if (!s.contains("fit") || !s["fit"].is_object())
    return;
  const nlohmann::json &f = s["fit"];
  std::string top1;
  if (f.contains("top1") && f["top1"].is_array())
    for (const nlohmann::json &v : f["top1"])
      if (v.is_number()) {
        char b[16];
        snprintf(b, sizeof b, "%s%.3f", top1.empty() ? "" : ", ", v.get<double>());
        top1 += b;
      }
  const nlohmann::json cal = f.value("calibration", nlohmann::json::object());
  printf("  fit: %lld calibration tokens; held-out top-1 per head %s; predicted accepted "
         "length %.2f\n",
         (long long)cal.value("tokens", (int64_t)0), top1.c_str(),
         f.value("predicted_accepted_length", 0.0));
}

/// The generated kernels the artifact carries: per backend, its kernels
/// and binaries (from the manifest's "codegen" and "codegen_cuda").
void printCodegen(const nlohmann::json &m) {
  if (m.contains("codegen") && m["codegen"].is_object()) {
    const nlohmann::json &c = m["codegen"];
    std::string levels;
    const nlohmann::json objects = c.value("objects", nlohmann::json::object());
    for (auto &[k, v] : objects.items())
      levels += (levels.empty() ? "" : ", ") + k;
    printf("codegen cpu:   %zu kernels; objects for %s\n",
           c.value("kernels", nlohmann::json::array()).size(), levels.c_str());
  }
  if (m.contains("codegen_cuda") && m["codegen_cuda"].is_object()) {
    const nlohmann::json &c = m["codegen_cuda"];
    std::string archs;
    for (const char *key : {"cubin", "ptx"}) {
      const nlohmann::json binaries = c.value(key, nlohmann::json::object());
      for (auto &[k, v] : binaries.items())
        archs += (archs.empty() ? "" : ", ") + k + " " + key;
    }
    printf("codegen cuda:  %zu kernels (%s); %s\n",
           c.value("kernels", nlohmann::json::array()).size(),
           c.value("compiler", std::string("?")).c_str(), archs.c_str());
  }
}
} // namespace

std::function<int()> addInspectCommand(CLI::App &app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App *cmd = app.add_subcommand("inspect", "Print an artifact's manifest and tensor table");
  cmd->add_option("artifact", args->input, ".llmc file")->required();
  cmd->add_flag("--json", args->json, "print the whole manifest as JSON");
  cmd->add_flag("--ir", args->ir, "print the embedded llm IR");
  cmd->add_flag("--no-verify", args->noVerify, "skip tensor checksums");

  return [args]() {
    auto art = Artifact::open(args->input, !args->noVerify);
    const nlohmann::json &m = art->manifest();
    if (args->json) {
      nlohmann::json j = m;
      j.erase("ir");
      printf("%s\n", j.dump(2).c_str());
      return kOk;
    }
    if (args->ir) {
      printf("%s", m.value("ir", std::string("(no IR embedded)\n")).c_str());
      return kOk;
    }
    printf("artifact:      %s (%.1f MiB, format version %d)\n", art->path().c_str(),
           art->fileSize() / 1048576.0, m.value("format_version", 0));
    printf("signature:     %s\n",
           art->checkSignature(signing::loadCodeTrust({}, false).keys).describe().c_str());
    printf("source:        %s (%s)\n", m["source"].value("path", "").c_str(),
           m["source"].value("format", "").c_str());
    // The passes the IR records (older artifacts: the pipeline text given).
    std::string passes = m["pipeline"].value("anchored", "");
    for (const nlohmann::json &p : m["pipeline"].value("passes", nlohmann::json::array()))
      passes += (passes.empty() ? "" : ", ") + p.get<std::string>();
    printf("pipeline:      %s\n", passes.empty() ? "(none)" : passes.c_str());
    printf("config:\n");
    for (auto &[k, v] : m["config"].items())
      printf("  %-24s %s\n", k.c_str(), v.dump().c_str());
    const TokenizerData &tok = art->tokenizer();
    printf("tokenizer:     %s, %zu tokens, bos %d, eos %d, chat template %s\n",
           tok.kind.empty() ? "none" : tok.kind.c_str(), tok.tokens.size(), tok.bos_id,
           tok.eos_id, tok.chat_template.empty() ? "no" : "yes");
    printf("program:       %zu nodes\n", art->program().nodes.size());
    printKvPolicies(art->program());
    printSpeculation(m);
    printCodegen(m);
    printf("tensors:       %zu\n", art->tensors().size());
    printf("  %-36s %-6s %-16s %12s %10s\n", "name", "type", "shape", "bytes", "offset");
    int64_t total = 0, params = 0;
    for (size_t i = 0; i < art->tensors().size(); ++i) {
      const TensorView &t = art->tensors()[i];
      int64_t off = m["tensors"][i].value("offset", (int64_t)0);
      printf("  %-36s %-6s %-16s %12lld %10lld\n", t.name.c_str(),
             std::string(dtypeName(t.dtype)).c_str(), shapeStr(t.shape).c_str(),
             (long long)t.nbytes, (long long)off);
      total += t.nbytes;
      params += t.numElements();
    }
    printf("total:         %lld parameters, %.1f MiB of weights, %.2f bits/weight\n",
           (long long)params, total / 1048576.0, params ? 8.0 * total / params : 0.0);
    return kOk;
  };
}

} // namespace llmc::tool
