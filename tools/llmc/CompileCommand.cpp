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
} // namespace

std::function<int()> addCompileCommand(CLI::App &app) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model (GGUF file, Hugging Face folder or llama2.c "
                 ".bin) into one .llmc artifact");
  cmd->footer("Exit codes: 0 written (or --dry-run done), 1 bad input or failed compile, "
              "2 bad flags, 3 --max-kld exceeded (nothing written).");
  cmd->add_option("model", args->input, "GGUF file, HF folder (config.json + "
                                        "*.safetensors), llama2.c checkpoint, or an IR file "
                                        "that carries its model (llmc import --emit-resources; "
                                        ".mlir or .mlirbc)")
      ->required();
  cmd->add_option("-o,--output", args->output,
                  "artifact to write (atomically); required unless --dry-run");
  cmd->add_option("--pipeline", args->pipeline,
                  "pass pipeline, e.g. 'canonicalize,cse' or "
                  "'builtin.module(canonicalize)'; recorded in the manifest");
  cmd->add_option("--calib", args->calib,
                  "calibration text for calibrated passes (default: data/calib/default.txt); "
                  "a FILE.ids gives token ids instead (models without a tokenizer)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--target-bpw", args->targetBpw,
                  "mixed precision: choose each matrix weight's width (2-8 bits) in the "
                  "pipeline's llm-quantize pass (rtn/gptq/awq/osaq; none: rtn group 64) so all "
                  "matrix weights fit B bits per weight, scales included, with the least "
                  "predicted KL divergence (measured per weight on the calibration text)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tokenizer", args->tokenizer,
                  "llama2.c tokenizer.bin (llama2.c checkpoints only)");
  cmd->add_option("--max-kld", args->maxKld,
                  "quality gate: after compiling, measure the mean KL divergence from the "
                  "reference on data/eval/default.txt; above this value write nothing and "
                  "exit 3")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-kld-ref", args->kldRef,
                  "reference for --max-kld: model or artifact (default: the same source "
                  "compiled with no pipeline)");
  cmd->add_option("--max-kld-text", args->kldText,
                  "text (or FILE.ids of token ids) scored for --max-kld (default: "
                  "data/eval/default.txt)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--max-kld-tokens", args->kldTokens,
                  "positions scored for --max-kld (default 512)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dry-run", args->dryRun,
                "compile fully in memory (the whole pipeline, calibration included), print "
                "each tensor's shape, format, bits/weight, bytes and method, and the totals; "
                "write nothing");
  cmd->add_flag("--no-ir", args->noIR, "do not embed the final IR in the manifest");
  cmd->add_flag("--no-kernels", args->noKernels,
                "store no kernel plan (the artifact then runs on the reference executor)");
  CLI::Option *sign = cmd->add_option(
      "--sign", args->signKey,
      "sign the artifact with this secret key (llmc keygen); default: " +
          signing::defaultSecretKeyPath() +
          " when it exists. Only signed artifacts run their generated kernels elsewhere");
  cmd->add_flag("--no-sign", args->noSign, "write an unsigned artifact")->excludes(sign);
  cmd->add_flag("-q,--quiet", args->quiet, "no progress lines");
  cmd->add_flag("--mlir-print-ir-after-all", args->instruments.printIrAfterAll,
                "print the IR after every pass of both phases (user passes, lowering) on "
                "stderr; weight blobs are elided");
  cmd->add_flag("--mlir-timing", args->instruments.timing,
                "print each phase's pass timing report on stderr");
  cmd->add_option("--mlir-pass-pipeline-crash-reproducer", args->instruments.crashReproducer,
                  "when a pass fails or crashes, write a reproducer (the IR before the "
                  "failing phase, weights included, and its pipeline) to this .mlir file, "
                  "for llmc-opt --run-reproducer");

  return [args]() {
    if (args->output.empty() && !args->dryRun) {
      fprintf(stderr, "llmc compile: --output is required (unless --dry-run)\n");
      return int(kUsage);
    }
    if (args->maxKld < 0 && (!args->kldRef.empty()))
      fprintf(stderr, "llmc compile: warning: --max-kld-ref has no effect without --max-kld\n");
    auto t0 = std::chrono::steady_clock::now();
    auto secs = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    auto say = [&](const std::string &s) {
      if (!args->quiet)
        progress(s);
    };
    // The signing key first: a bad key fails before any work.
    std::optional<signing::SecretKey> key;
    std::string keyPath = args->signKey;
    struct stat keySt;
    if (keyPath.empty() && !args->noSign && !args->dryRun &&
        ::stat(signing::defaultSecretKeyPath().c_str(), &keySt) == 0)
      keyPath = signing::defaultSecretKeyPath();
    if (!keyPath.empty() && !args->noSign)
      key = signing::readSecretKey(keyPath);
    // An IR file that carries its model (llmc import --emit-resources, then
    // llmc-opt) compiles exactly like the source it was imported from.
    const bool irInput = isIrFile(args->input);
    if (irInput && args->targetBpw > 0) {
      fprintf(stderr, "llmc compile: --target-bpw needs a source model, not an IR file\n");
      return int(kUsage);
    }
    say("reading " + args->input);
    char buf[512];
    std::optional<SourceModel> src;
    if (!irInput) {
      src = readModel(args->input, args->tokenizer);
      snprintf(buf, sizeof buf, "read %s model '%s': %zu tensors in %.2f s",
               src->format.c_str(), src->config.architecture.c_str(), src->tensors.size(),
               secs());
      say(buf);
    }

    mlir::DialectRegistry registry;
    registerLlmcDialects(registry);
    registerLlmcPasses();
    mlir::MLIRContext ctx(registry);
    auto compileInput = [&](const CompileOptions &o) {
      return irInput ? compileModule(ctx, readIrFile(ctx, args->input), o)
                     : compileModel(ctx, *src, o);
    };
    CompileOptions opts;
    opts.pipeline = args->pipeline;
    opts.calibPath = args->calib;
    opts.embedIR = !args->noIR;
    opts.kernels = !args->noKernels;
    opts.progress = say;
    opts.quiet = args->quiet;
    opts.instruments = args->instruments;
    MixedPrecisionPlan plan;
    if (args->targetBpw > 0) {
      MixedPrecisionOptions mp;
      mp.targetBpw = args->targetBpw;
      mp.pipeline = args->pipeline;
      mp.calibPath = args->calib;
      mp.progress = say;
      // Diagnostics knobs (not flags): probe window, and weights measured
      // at every width to check the sensitivity model.
      if (const char *v = std::getenv("LLMC_TARGET_BPW_PROBE_TOKENS"))
        mp.probeTokens = std::max(2, std::atoi(v));
      if (const char *v = std::getenv("LLMC_TARGET_BPW_VALIDATE"))
        mp.validate = std::max(0, std::atoi(v));
      try {
        plan = planMixedPrecision(ctx, *src, mp);
      } catch (const MixedPrecisionUsageError &e) {
        fprintf(stderr, "llmc compile: %s\n", e.what());
        return int(kUsage);
      }
      say(plan.summary);
      opts.pipeline = plan.pipeline;
    }
    CompiledModel cm = compileInput(opts);
    if (args->targetBpw > 0) {
      const double achieved = matrixBitsPerWeight(cm);
      if (achieved > args->targetBpw)
        throw std::runtime_error("--target-bpw: the compiled matrix weights take " +
                                 std::to_string(achieved) + " bits per weight, over the target");
      plan.record["achieved_bpw"] = achieved;
      cm.manifest["mixed_precision"] = plan.record;
    }
    ArtifactWriter writer(cm.manifest, cm.tensors);

    if (args->maxKld >= 0) {
      auto model = Artifact::fromBuffer(writer.toBuffer(), args->input + " (compiled)",
                                        /*verify_tensors=*/false);
      model->markBuiltInThisProcess();
      std::unique_ptr<Artifact> ref;
      std::string refLabel = args->kldRef;
      if (!args->kldRef.empty()) {
        ref = loadModelOrArtifact(args->kldRef, "", args->tokenizer, args->quiet);
      } else {
        refLabel = args->input + " (no pipeline)";
        CompileOptions refOpts;
        refOpts.embedIR = false;
        CompiledModel refCm = compileInput(refOpts);
        ArtifactWriter refWriter(refCm.manifest, refCm.tensors);
        ref = Artifact::fromBuffer(refWriter.toBuffer(), refLabel, /*verify_tensors=*/false);
        ref->markBuiltInThisProcess();
      }
      std::string textPath = args->kldText.empty() ? defaultEvalTextPath() : args->kldText;
      metrics::EvalSummary s = compareOnText(*model, args->input, *ref, refLabel, textPath,
                                             args->kldTokens, /*threads=*/0, args->quiet);
      const bool pass = s.kld_mean <= args->maxKld; // NaN fails
      // The gate's verdict is printed even with --quiet.
      snprintf(buf, sizeof buf,
               "kld gate: mean KLD %.6f (p99 %.6f, top1 %.2f%%) over %lld positions of %s "
               "vs %s; max %.6f: %s",
               s.kld_mean, s.kld_p99, s.top1, (long long)s.positions, textPath.c_str(),
               refLabel.c_str(), args->maxKld, pass ? "pass" : "FAIL");
      progress(buf);
      if (!pass) {
        fprintf(stderr, "llmc: error: mean KL divergence %.6f exceeds --max-kld %.6f; %s\n",
                s.kld_mean, args->maxKld,
                args->dryRun ? "(dry run)" : ("not writing " + args->output).c_str());
        return int(kKldGate);
      }
    }

    if (args->dryRun) {
      printStoragePlan(cm);
      if (args->targetBpw > 0)
        printf("%s; achieved %.4f bits per weight\n", plan.summary.c_str(),
               plan.record["achieved_bpw"].get<double>());
      snprintf(buf, sizeof buf, "dry run: compiled %zu tensors in %.2f s; nothing written",
               cm.tensors.size(), secs());
      say(buf);
      return int(kOk);
    }
    if (key)
      writer.signWith(*key);
    writer.writeFile(args->output);
    struct stat st;
    double mb = ::stat(args->output.c_str(), &st) == 0 ? st.st_size / 1048576.0 : 0;
    snprintf(buf, sizeof buf, "wrote %s (%.1f MiB, %zu tensors, %s) in %.2f s total",
             args->output.c_str(), mb, cm.tensors.size(),
             key ? ("signed by " + key->pub.fingerprint() + " of " + keyPath).c_str()
                 : "unsigned",
             secs());
    say(buf);
    if (!key && cm.manifest.contains("codegen"))
      say("note: unsigned artifacts run the runtime's built-in kernels, not their generated "
          "ones; run `llmc keygen` once to sign every compile with your own trusted key");
    return int(kOk);
  };
}

} // namespace llmc::tool
