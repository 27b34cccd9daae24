//===- CompileCommand.cpp - llmc compile MODEL -o OUT.llmc --------------===//
// Reads a source model, compiles it in memory, optionally gates the result
// on its KL divergence from a reference (--max-kld: the same source compiled
// with no pipeline, or --max-kld-ref) and writes the artifact atomically.
// --dry-run compiles and prints the per-tensor storage table instead of
// writing. A failed gate writes nothing and exits kKldGate (3).
// --target-bpw B plans per-weight widths first (compiler/driver/MixedPrecision.h)
// and compiles the pipeline with them as llm-quantize overrides.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Evaluation.h"
#include "llmc/codegen.h"
#include "compiler/Registration.h"
#include "compiler/driver/Compile.h"
#include "compiler/driver/IrFile.h"
#include "compiler/driver/MixedPrecision.h"
#include "mlir/IR/MLIRContext.h"
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <sys/stat.h>

namespace llmc::tool {
namespace {
struct CompileArgs {
  std::string input, output, pipeline, tokenizer, kldRef, calib, kldText, signKey;
  std::string target = "cpu";
  std::string cpuLevels; // --cpu-levels; empty: LLMC_CPU_LEVELS, else all
  bool noSign = false;
  double maxKld = -1, targetBpw = 0;
  int64_t kldTokens = 512;
  bool noIR = false, quiet = false, dryRun = false, noKernels = false;
  PipelineInstruments instruments;
};

std::string shapeText(const std::vector<int64_t> &s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

/// The --dry-run table on stdout: one row per stored tensor and the totals.
/// A weight stored in its kernels' layout (packed_weights) is listed under
/// its own name, shape and format, with the bytes it takes in that layout.
void printStoragePlan(const CompiledModel &cm) {
  printf("%-36s %-16s %-12s %8s %12s  %-6s %s\n", "name", "shape", "format", "bits/w", "bytes",
         "layout", "method");
  int64_t params = 0, bytes = 0, quantParams = 0, quantBytes = 0;
  const nlohmann::json packed = cm.manifest.value("packed_weights", nlohmann::json::object());
  std::map<std::string, std::string> weightOf; // packed tensor -> weight
  for (auto &[name, p] : packed.items())
    weightOf[p["tensor"].get<std::string>()] = name;
  for (const ArtifactWriter::Tensor &t : cm.tensors) {
    std::string weight = t.name, format(dtypeName(t.dtype)), layout = "-";
    std::vector<int64_t> shape = t.shape;
    if (auto w = weightOf.find(t.name); w != weightOf.end()) {
      weight = w->second;
      shape = packed[weight]["shape"].get<std::vector<int64_t>>();
      format = packed[weight]["dtype"].get<std::string>();
      layout = "rows8";
    }
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::string method = "-";
    if (const WeightStore::Entry *e = cm.store->find(weight); e && e->info.contains("method"))
      method = e->info["method"].get<std::string>();
    double bpw = n ? 8.0 * double(t.nbytes) / double(n) : 0;
    printf("%-36s %-16s %-12s %8.3f %12lld  %-6s %s\n", weight.c_str(), shapeText(shape).c_str(),
           format.c_str(), bpw, (long long)t.nbytes, layout.c_str(), method.c_str());
    params += n;
    bytes += (int64_t)t.nbytes;
    if (method != "-") {
      quantParams += n;
      quantBytes += (int64_t)t.nbytes;
    }
  }
  printf("total: %zu tensors, %lld parameters, %lld bytes (%.2f MiB), %.3f bits/weight\n",
         cm.tensors.size(), (long long)params, (long long)bytes, bytes / 1048576.0,
         params ? 8.0 * double(bytes) / double(params) : 0.0);
  if (quantParams)
    printf("transformed by the pipeline: %lld parameters, %lld bytes, %.3f bits/weight\n",
           (long long)quantParams, (long long)quantBytes,
           8.0 * double(quantBytes) / double(quantParams));
  fflush(stdout);
}

void declareCompileOptions(CLI::App &app, CompileArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model (GGUF file, Hugging Face folder or llama2.c "
                 ".bin) into one .llmc artifact");
  cmd->footer("Exit codes: 0 written (or --dry-run done), 1 bad input or failed compile, "
              "2 bad flags, 3 --max-kld exceeded (nothing written).");
  cmd->add_option("model", a.input, "GGUF file, HF folder (config.json + "
                                    "*.safetensors), llama2.c checkpoint, or an IR file "
                                    "that carries its model (llmc import --emit-resources; "
                                    ".mlir or .mlirbc)")
      ->required();
  cmd->add_option("-o,--output", a.output,
                  "artifact to write (atomically); required unless --dry-run");
  cmd->add_option("--pipeline", a.pipeline,
                  "pass pipeline, e.g. 'canonicalize,cse' or "
                  "'builtin.module(canonicalize)'; recorded in the manifest");
  cmd->add_option("--calib", a.calib,
                  "calibration text for calibrated passes (default: data/calib/default.txt); "
                  "a FILE.ids gives token ids instead (models without a tokenizer)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--target-bpw", a.targetBpw,
                  "mixed precision: choose each matrix weight's width (2-8 bits) in the "
                  "pipeline's llm-quantize pass (rtn/gptq/awq/osaq; none: rtn group 64) so all "
                  "matrix weights fit B bits per weight, scales included, with the least "
                  "predicted KL divergence (measured per weight on the calibration text)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tokenizer", a.tokenizer,
                  "llama2.c tokenizer.bin (llama2.c checkpoints only)");
  cmd->add_option("--max-kld", a.maxKld,
                  "quality gate: after compiling, measure the mean KL divergence from the "
                  "reference on data/eval/default.txt; above this value write nothing and "
                  "exit 3")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-kld-ref", a.kldRef,
                  "reference for --max-kld: model or artifact (default: the same source "
                  "compiled with no pipeline)");
  cmd->add_option("--max-kld-text", a.kldText,
                  "text (or FILE.ids of token ids) scored for --max-kld (default: "
                  "data/eval/default.txt)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--max-kld-tokens", a.kldTokens,
                  "positions scored for --max-kld (default 512)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dry-run", a.dryRun,
                "compile fully in memory (the whole pipeline, calibration included), print "
                "each tensor's shape, format, bits/weight, bytes and method, and the totals; "
                "write nothing");
  cmd->add_flag("--no-ir", a.noIR, "do not embed the final IR in the manifest");
  cmd->add_flag("--no-kernels", a.noKernels,
                "store no kernel plan (the artifact then runs on the reference executor)");
  cmd->add_option("--target", a.target,
                  "code generators: cpu (default: x86-64 objects), cuda (CUDA kernels as cubin "
                  "for sm_80/sm_90 and PTX, built by NVRTC; no GPU needed to compile) or "
                  "cpu,cuda (both in one artifact)")
      ->check(CLI::IsMember({"cpu", "cuda", "cpu,cuda", "cuda,cpu"}));
  cmd->add_option("--cpu-levels", a.cpuLevels,
                  "x86-64 levels the cpu target builds kernel objects for: all (default: the "
                  "artifact runs at its best on any x86-64 CPU), host (only the level this "
                  "machine runs, or LLMC_ISA's: a faster compile, for artifacts run here; a "
                  "CPU below it runs the built-in kernels) or a comma list in increasing order "
                  "(x86-64,x86-64-v2,x86-64-v3,x86-64-v3-vnni,x86-64-v4,x86-64-v4-vnni); "
                  "default from LLMC_CPU_LEVELS when set");
  CLI::Option *sign = cmd->add_option(
      "--sign", a.signKey,
      "sign the artifact with this secret key (llmc keygen); default: " +
          signing::defaultSecretKeyPath() +
          " when it exists. Only signed artifacts run their generated kernels elsewhere");
  cmd->add_flag("--no-sign", a.noSign, "write an unsigned artifact")->excludes(sign);
  cmd->add_flag("-q,--quiet", a.quiet, "no progress lines");
  cmd->add_flag("--mlir-print-ir-after-all", a.instruments.printIrAfterAll,
                "print the IR after every pass of both phases (user passes, lowering) on "
                "stderr; weight blobs are elided");
  cmd->add_flag("--mlir-timing", a.instruments.timing,
                "print each phase's pass timing report on stderr");
  cmd->add_option("--mlir-pass-pipeline-crash-reproducer", a.instruments.crashReproducer,
                  "when a pass fails or crashes, write a reproducer (the IR before the "
                  "failing phase, weights included, and its pipeline) to this .mlir file, "
                  "for llmc-opt --run-reproducer");
}

/// Seconds since the compile started, and its progress lines (none with
/// --quiet).
struct CompileProgress {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  bool quiet = false;
  double secs() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void say(const std::string &s) const {
    if (!quiet)
      progress(s);
  }
  std::function<void(const std::string &)> sayFn() const {
    return [this](const std::string &s) { say(s); };
  }
};

/// The key to sign with: --sign, else the default secret key when it exists
/// (not for --no-sign or --dry-run); read before any work so that a bad key
/// fails first. `keyPath` receives where it came from.
std::optional<signing::SecretKey> readSigningKey(const CompileArgs &a, std::string &keyPath) {
  keyPath = a.signKey;
  struct stat keySt;
  if (keyPath.empty() && !a.noSign && !a.dryRun &&
      ::stat(signing::defaultSecretKeyPath().c_str(), &keySt) == 0)
    keyPath = signing::defaultSecretKeyPath();
  if (!keyPath.empty() && !a.noSign)
    return signing::readSecretKey(keyPath);
  return std::nullopt;
}

/// --target-bpw: plans each weight's width; false (after an error line) on
/// a usage error.
bool planTargetBpw(mlir::MLIRContext &ctx, const SourceModel &src, const CompileArgs &a,
                   const CompileProgress &p, MixedPrecisionPlan &plan) {
  MixedPrecisionOptions mp;
  mp.targetBpw = a.targetBpw;
  mp.pipeline = a.pipeline;
  mp.calibPath = a.calib;
  mp.progress = p.sayFn();
  // Diagnostics knobs (not flags): probe window, and weights measured
  // at every width to check the sensitivity model.
  if (const char *v = std::getenv("LLMC_TARGET_BPW_PROBE_TOKENS"))
    mp.probeTokens = std::max(2, std::atoi(v));
  if (const char *v = std::getenv("LLMC_TARGET_BPW_VALIDATE"))
    mp.validate = std::max(0, std::atoi(v));
  try {
    plan = planMixedPrecision(ctx, src, mp);
  } catch (const MixedPrecisionUsageError &e) {
    fprintf(stderr, "llmc compile: %s\n", e.what());
    return false;
  }
  p.say(plan.summary);
  return true;
}

using CompileFn = std::function<CompiledModel(const CompileOptions &)>;

/// --max-kld: the compiled model's mean KL divergence from the reference
/// (--max-kld-ref, or the input compiled with no pipeline) on the text;
/// kOk when within the limit, else kKldGate (after an error line).
int gateOnKld(const CompileArgs &a, const ArtifactWriter &writer, const CompileFn &compileInput) {
  auto model = Artifact::fromBuffer(writer.toBuffer(), a.input + " (compiled)",
                                    /*verify_tensors=*/false);
  model->markBuiltInThisProcess();
  std::unique_ptr<Artifact> ref;
  std::string refLabel = a.kldRef;
  if (!a.kldRef.empty()) {
    ref = loadModelOrArtifact(a.kldRef, "", a.tokenizer, a.quiet);
  } else {
    refLabel = a.input + " (no pipeline)";
    CompileOptions refOpts;
    refOpts.embedIR = false;
    refOpts.cpuLevels = {codegen::targetIsa()}; // run here only
    CompiledModel refCm = compileInput(refOpts);
    ArtifactWriter refWriter(refCm.manifest, refCm.tensors);
    ref = Artifact::fromBuffer(refWriter.toBuffer(), refLabel, /*verify_tensors=*/false);
    ref->markBuiltInThisProcess();
  }
  std::string textPath = a.kldText.empty() ? defaultTextPath(DefaultText::Eval) : a.kldText;
  metrics::EvalSummary s = compareOnText(*model, a.input, *ref, refLabel, textPath,
                                         a.kldTokens, /*threads=*/0, a.quiet);
  const bool pass = s.kld_mean <= a.maxKld; // NaN fails
  // The gate's verdict is printed even with --quiet.
  char buf[512];
  snprintf(buf, sizeof buf,
           "kld gate: mean KLD %.6f (p99 %.6f, top1 %.2f%%) over %lld positions of %s "
           "vs %s; max %.6f: %s",
           s.kld_mean, s.kld_p99, s.top1, (long long)s.positions, textPath.c_str(),
           refLabel.c_str(), a.maxKld, pass ? "pass" : "FAIL");
  progress(buf);
  if (!pass) {
    fprintf(stderr, "llmc: error: mean KL divergence %.6f exceeds --max-kld %.6f; %s\n",
            s.kld_mean, a.maxKld, a.dryRun ? "(dry run)" : ("not writing " + a.output).c_str());
    return int(kKldGate);
  }
  return int(kOk);
}

/// Signs (with a key) and writes the artifact, then says what was written.
void writeArtifact(const CompileArgs &a, ArtifactWriter &writer, const CompiledModel &cm,
                   const std::optional<signing::SecretKey> &key, const std::string &keyPath,
                   const CompileProgress &p) {
  if (key)
    writer.signWith(*key);
  writer.writeFile(a.output);
  struct stat st;
  double mb = ::stat(a.output.c_str(), &st) == 0 ? st.st_size / 1048576.0 : 0;
  char buf[512];
  snprintf(buf, sizeof buf, "wrote %s (%.1f MiB, %zu tensors, %s) in %.2f s total",
           a.output.c_str(), mb, cm.tensors.size(),
           key ? ("signed by " + key->pub.fingerprint() + " of " + keyPath).c_str()
               : "unsigned",
           p.secs());
  p.say(buf);
  if (!key && cm.manifest.contains("codegen"))
    p.say("note: unsigned artifacts run the runtime's built-in kernels, not their generated "
          "ones; run `llmc keygen` once to sign every compile with your own trusted key");
}

/// --cpu-levels, else LLMC_CPU_LEVELS, else every level; false (with a
/// message) for a text that names none.
bool cpuLevelsFromArgs(const CompileArgs &a, std::vector<codegen::IsaLevel> &levels) {
  const char *env = std::getenv("LLMC_CPU_LEVELS");
  const bool fromEnv = a.cpuLevels.empty() && env && *env;
  const std::string text = !a.cpuLevels.empty() ? a.cpuLevels : fromEnv ? env : "all";
  std::string err;
  levels = codegen::parseCpuLevels(text, err);
  if (levels.empty())
    fprintf(stderr, "llmc compile: %s '%s': %s\n", fromEnv ? "LLMC_CPU_LEVELS" : "--cpu-levels",
            text.c_str(), err.c_str());
  return !levels.empty();
}

int runCompile(const CompileArgs &a) {
  if (a.output.empty() && !a.dryRun) {
    fprintf(stderr, "llmc compile: --output is required (unless --dry-run)\n");
    return int(kUsage);
  }
  const bool cuda = a.target.find("cuda") != std::string::npos;
  if (cuda && a.noKernels) {
    fprintf(stderr, "llmc compile: --target cuda needs the kernel plan (drop --no-kernels)\n");
    return int(kUsage);
  }
  std::vector<codegen::IsaLevel> cpuLevels;
  if (!cpuLevelsFromArgs(a, cpuLevels))
    return int(kUsage);
  if (a.maxKld < 0 && (!a.kldRef.empty()))
    fprintf(stderr, "llmc compile: warning: --max-kld-ref has no effect without --max-kld\n");
  CompileProgress p;
  p.quiet = a.quiet;
  std::string keyPath;
  const std::optional<signing::SecretKey> key = readSigningKey(a, keyPath);
  // An IR file that carries its model (llmc import --emit-resources, then
  // llmc-opt) compiles exactly like the source it was imported from.
  const bool irInput = isIrFile(a.input);
  if (irInput && a.targetBpw > 0) {
    fprintf(stderr, "llmc compile: --target-bpw needs a source model, not an IR file\n");
    return int(kUsage);
  }
  p.say("reading " + a.input);
  char buf[512];
  std::optional<SourceModel> src;
  if (!irInput) {
    src = readModel(a.input, a.tokenizer);
    snprintf(buf, sizeof buf, "read %s model '%s': %zu tensors in %.2f s",
             src->format.c_str(), src->config.architecture.c_str(), src->tensors.size(),
             p.secs());
    p.say(buf);
  }

  mlir::DialectRegistry registry;
  registerLlmcDialects(registry);
  registerLlmcPasses();
  mlir::MLIRContext ctx(registry);
  const CompileFn compileInput = [&](const CompileOptions &o) {
    return irInput ? compileModule(ctx, readIrFile(ctx, a.input), o) : compileModel(ctx, *src, o);
  };
  CompileOptions opts;
  opts.pipeline = a.pipeline;
  opts.calibPath = a.calib;
  opts.embedIR = !a.noIR;
  opts.kernels = !a.noKernels;
  opts.targetCpu = a.target.find("cpu") != std::string::npos;
  opts.targetCuda = a.target.find("cuda") != std::string::npos;
  opts.cpuLevels = cpuLevels;
  opts.progress = p.sayFn();
  opts.quiet = a.quiet;
  opts.instruments = a.instruments;
  MixedPrecisionPlan plan;
  if (a.targetBpw > 0) {
    if (!planTargetBpw(ctx, *src, a, p, plan))
      return int(kUsage);
    opts.pipeline = plan.pipeline;
  }
  CompiledModel cm = compileInput(opts);
  if (a.targetBpw > 0) {
    const double achieved = matrixBitsPerWeight(cm);
    if (achieved > a.targetBpw)
      throw std::runtime_error("--target-bpw: the compiled matrix weights take " +
                               std::to_string(achieved) + " bits per weight, over the target");
    plan.record["achieved_bpw"] = achieved;
    cm.manifest["mixed_precision"] = plan.record;
  }
  ArtifactWriter writer(cm.manifest, cm.tensors);

  if (a.maxKld >= 0) {
    if (const int rc = gateOnKld(a, writer, compileInput); rc != int(kOk))
      return rc;
  }

  if (a.dryRun) {
    printStoragePlan(cm);
    if (a.targetBpw > 0)
      printf("%s; achieved %.4f bits per weight\n", plan.summary.c_str(),
             plan.record["achieved_bpw"].get<double>());
    snprintf(buf, sizeof buf, "dry run: compiled %zu tensors in %.2f s; nothing written",
             cm.tensors.size(), p.secs());
    p.say(buf);
    return int(kOk);
  }
  writeArtifact(a, writer, cm, key, keyPath, p);
  return int(kOk);
}
} // namespace

std::function<int()> addCompileCommand(CLI::App &app) {
  auto args = std::make_shared<CompileArgs>();
  declareCompileOptions(app, *args);
  return [args]() { return runCompile(*args); };
}

} // namespace llmc::tool
