//===- QuantizeStep.cpp - The llm-quantize pass of a --target-bpw pipeline ===//
#include "compiler/driver/QuantizeStep.h"
#include "compiler/driver/Compile.h"
#include "llmc/dtype.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"
#include <map>

namespace llmc {
namespace {

std::string anchored(const std::string &p) {
  auto start = p.find_first_not_of(" \t\n");
  if (start == std::string::npos)
    return "";
  std::string s = p.substr(start);
  return s.rfind("builtin.module(", 0) == 0 ? s : "builtin.module(" + s + ")";
}

/// Splits at top-level `sep` (outside {} and quotes).
std::vector<std::string> splitTopLevel(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      --depth;
    } else if (c == sep && depth == 0) {
      if (!cur.empty())
        out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!cur.empty())
    out.push_back(cur);
  return out;
}

std::string unbrace(std::string v) {
  if (v.size() >= 2 && v.front() == '{' && v.back() == '}')
    return v.substr(1, v.size() - 2);
  return v;
}

mlir::OpPassManager parsePipeline(const std::string &text, const std::string &userText) {
  std::string err;
  llvm::raw_string_ostream errs(err);
  auto parsed = mlir::parsePassPipeline(text, errs);
  if (mlir::failed(parsed))
    throw CompileError("invalid --pipeline '" + userText + "': " + err);
  return std::move(*parsed);
}

/// The single top-level llm-quantize pass of `pm` (nullptr if none);
/// rejects what --target-bpw cannot plan.
mlir::Pass *findQuantizePass(mlir::OpPassManager &pm, const std::string &userText) {
  mlir::Pass *found = nullptr;
  int count = 0;
  for (mlir::Pass &p : pm.getPasses()) {
    if (p.getArgument() == "llm-quantize-rtn")
      throw MixedPrecisionUsageError(
          "--target-bpw: the pipeline '" + userText +
          "' has llm-quantize-rtn (GGUF block formats); use llm-quantize{method=rtn} instead");
    if (p.getArgument() == "llm-quantize") {
      found = &p;
      ++count;
    }
  }
  std::string printed;
  llvm::raw_string_ostream os(printed);
  pm.printAsTextualPipeline(os);
  size_t nested = 0;
  for (size_t at = printed.find("llm-quantize{"); at != std::string::npos;
       at = printed.find("llm-quantize{", at + 1))
    ++nested;
  if (count > 1 || nested > size_t(count))
    throw MixedPrecisionUsageError("--target-bpw: the pipeline '" + userText +
                                   "' must hold at most one llm-quantize pass, at the top level");
  return found;
}

} // namespace

QuantizeStep readQuantizeStep(const std::string &userPipeline) {
  QuantizeStep step;
  step.pipeline = anchored(userPipeline);
  mlir::OpPassManager pm = parsePipeline(step.pipeline.empty() ? "builtin.module()" : step.pipeline,
                                         userPipeline);
  mlir::Pass *pass = findQuantizePass(pm, userPipeline);
  if (!pass) {
    const std::string dflt = "llm-quantize{method=rtn group=64}";
    step.pipeline = step.pipeline.empty()
                        ? "builtin.module(" + dflt + ")"
                        : step.pipeline.substr(0, step.pipeline.size() - 1) + "," + dflt + ")";
    pm = parsePipeline(step.pipeline, userPipeline);
    pass = findQuantizePass(pm, userPipeline);
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  pass->printAsTextualPipeline(os);
  const auto open = text.find('{');
  if (open == std::string::npos || text.back() != '}')
    throw std::logic_error("unexpected llm-quantize options: " + text);
  std::map<std::string, std::string> opts;
  for (const std::string &kv : splitTopLevel(text.substr(open + 1, text.size() - open - 2), ' ')) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos)
      opts[kv.substr(0, eq)] = unbrace(kv.substr(eq + 1));
  }
  step.method = opts.count("method") ? opts["method"] : "rtn";
  if (step.method != "rtn" && step.method != "gptq" && step.method != "awq" &&
      step.method != "osaq")
    throw MixedPrecisionUsageError(
        "--target-bpw chooses grouped-integer widths and supports llm-quantize methods rtn, "
        "gptq, awq and osaq, not method=" +
        step.method + " (its own storage format has no per-tensor widths to choose)");
  try {
    if (opts.count("bits"))
      step.bits = std::stoi(opts["bits"]);
    if (opts.count("group"))
      step.group = std::stoll(opts["group"]);
  } catch (const std::exception &) {
    throw std::logic_error("unexpected llm-quantize options: " + text);
  }
  step.sym = opts.count("sym") && (opts["sym"] == "true" || opts["sym"] == "1");
  if (opts.count("skip"))
    step.skip = splitTopLevel(opts["skip"], ',');
  if (opts.count("override"))
    for (const std::string &o : splitTopLevel(opts["override"], ',')) {
      const std::vector<std::string> parts = splitTopLevel(o, ':');
      auto number = [](const std::string &t) {
        return !t.empty() && t.size() <= 6 && t.find_first_not_of("0123456789") == std::string::npos;
      };
      if (parts.size() < 2 || parts.size() > 3 || !number(parts[1]) ||
          (parts.size() == 3 && !number(parts[2])))
        throw MixedPrecisionUsageError("--target-bpw: bad override '" + o +
                                       "' (expected GLOB:bits or GLOB:bits:group)");
      QuantizeStep::Override entry{o, parts[0], std::stoi(parts[1]),
                                   parts.size() == 3 ? std::stoll(parts[2]) : step.group};
      try {
        (void)groupedIntDType(entry.bits, step.sym, entry.group);
      } catch (const std::exception &e) {
        throw MixedPrecisionUsageError("--target-bpw: bad override '" + o + "': " + e.what());
      }
      step.overrides.push_back(std::move(entry));
    }
  return step;
}

/// The step's pipeline with `entries` appended to its pass's overrides.
std::string withOverrides(const QuantizeStep &step, const std::vector<std::string> &entries) {
  mlir::OpPassManager pm = parsePipeline(step.pipeline, step.pipeline);
  mlir::Pass *pass = findQuantizePass(pm, step.pipeline);
  if (!entries.empty()) {
    std::string list;
    for (const std::string &e : entries)
      list += (list.empty() ? "" : ",") + e;
    std::string err;
    if (mlir::failed(pass->initializeOptions("override={" + list + "}", [&](const llvm::Twine &t) {
          err = t.str();
          return mlir::failure();
        })))
      throw std::logic_error("cannot set the planned overrides: " + err);
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  pm.printAsTextualPipeline(os);
  return anchored(out);
}

} // namespace llmc
