//===- Compile.cpp - SourceModel -> artifact --------------------*- C++ -*-===//
#include "compiler/driver/Compile.h"
#include "codegen/Backend.h"
#include "compiler/artifact/KernelPlanExport.h"
#include "compiler/artifact/PackedLayouts.h"
#include "compiler/artifact/ProgramExport.h"
#include "compiler/import/SourceImporter.h"
#include "compiler/pipelines/CompilePipeline.h"
#include "compiler/pipelines/PassRecording.h"
#include "compiler/weights/IrAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "passes/quant/Calibration.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>
#include <map>
#include <set>
#include <thread>

using namespace mlir;

namespace llmc {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// The backends' kernels for the lowered model, added to the artifact: the
/// CPU's under the manifest's "codegen", CUDA's under "codegen_cuda".
void generateKernels(ModuleOp lowered, const CompileOptions &opts, CompiledModel &out,
                     const std::function<void(const std::string &)> &say) {
  auto models = llvm::to_vector(lowered.getOps<llm::ModelOp>());
  if (models.size() != 1)
    throw CompileError("the lowered IR has no single llm.model");
  struct Target {
    std::unique_ptr<codegen::Backend> backend;
    const char *manifestKey;
    bool required; // no kernels is an error (CUDA: only built when asked for)
  };
  std::vector<Target> targets;
  if (opts.targetCpu)
    targets.push_back({codegen::createCpuBackend(opts.cpuLevels), "codegen", false});
  if (opts.targetCuda)
    targets.push_back({codegen::createCudaBackend(), "codegen_cuda", true});
  for (Target &t : targets) {
    codegen::Backend &backend = *t.backend;
    const char *key = t.manifestKey;
    FailureOr<codegen::BackendOutput> gen = backend.generate(models.front());
    if (failed(gen))
      throw CompileError(std::string("the ") + backend.name() + " backend failed");
    if (gen->manifest.is_null() && t.required)
      throw CompileError(std::string("--target ") + backend.name() + ": " + gen->summary);
    for (codegen::BackendOutput::Section &sec : gen->sections) {
      out.blobs.push_back(std::make_unique<std::string>(std::move(sec.bytes)));
      const std::string &b = *out.blobs.back();
      out.tensors.push_back(
          {sec.name, DType::U8, {int64_t(b.size())}, int64_t(b.size()), b.data()});
    }
    if (!gen->manifest.is_null())
      out.manifest[key] = std::move(gen->manifest);
    say(gen->summary);
  }
}

/// Runs the user phase (opts.pipeline) on `module`: every pass recorded in
/// the model and verified, remarks printed as progress lines (none with
/// quiet), with the instruments asked for.
void runUserPhase(MLIRContext &ctx, ModuleOp module, const CompileOptions &opts,
                  const std::function<void(const std::string &)> &say) {
  const std::string pipeline = anchoredPipeline(opts.pipeline);
  if (pipeline.empty())
    return;
  auto t1 = std::chrono::steady_clock::now();
  std::unique_ptr<PassManager> pm = makeCompilePassManager(ctx, CompilePhase::User, opts.instruments);
  std::string err;
  if (!setUserPipeline(*pm, pipeline, err))
    throw CompileError("invalid --pipeline '" + opts.pipeline + "': " + err);
  if (!opts.calibPath.empty())
    setDefaultCalibration(*pm, opts.calibPath);
  ScopedDiagnosticHandler remarks(&ctx, [&](Diagnostic &d) -> LogicalResult {
    if (d.getSeverity() != DiagnosticSeverity::Remark)
      return failure(); // errors and warnings: the default handler
    if (!opts.quiet)
      llvm::errs() << d.str() << "\n";
    return success();
  });
  if (failed(pm->run(module)))
    throw CompileError("pipeline '" + opts.pipeline + "' failed");
  char buf[256];
  snprintf(buf, sizeof buf, "ran pipeline %s in %.2f s", pipeline.c_str(), secondsSince(t1));
  say(buf);
}

/// The weights the exported program reads, from the IR, with their side
/// data; and what produced each (the manifest's "weight_transforms").
void exportWeights(const WeightStore &store, const std::vector<ExportedWeight> &weights,
                   CompiledModel &out) {
  nlohmann::json weightInfo = nlohmann::json::object();
  for (const ExportedWeight &w : weights) {
    const WeightStore::Entry *t = store.find(w.name);
    if (!t || !t->data)
      throw CompileError("weight '" + w.name + "' has no data in the IR");
    if (t->dtype != w.dtype || t->shape != w.shape)
      throw CompileError("weight '" + w.name + "': its bytes and its type disagree (" +
                         std::string(dtypeName(w.dtype)) + " vs " +
                         std::string(dtypeName(t->dtype)) + ")");
    out.tensors.push_back({w.name, t->dtype, t->shape, t->nbytes, t->data});
    if (!t->aux.empty())
      out.tensors.push_back({w.name + kAuxSuffix, DType::U8, {int64_t(t->aux.size())},
                             int64_t(t->aux.size()), t->aux.data()});
    if (t->info.contains("method"))
      weightInfo[w.name] = t->info;
  }
  if (!weightInfo.empty())
    out.manifest["weight_transforms"] = weightInfo;
}

} // namespace

CompiledModel compileModel(MLIRContext &ctx, const SourceModel &src,
                           const CompileOptions &opts) {
  auto t0 = std::chrono::steady_clock::now();
  OwningOpRef<ModuleOp> module = importSourceModel(ctx, src);
  if (failed(verify(*module)))
    throw CompileError(src.path + ": the imported IR does not verify");
  if (opts.progress) {
    char buf[256];
    snprintf(buf, sizeof buf, "imported %s (%lld layers) in %.2f s",
             src.config.architecture.c_str(), (long long)src.config.num_layers,
             secondsSince(t0));
    opts.progress(buf);
  }
  return compileModule(ctx, std::move(module), opts);
}

CompiledModel compileModule(MLIRContext &ctx, OwningOpRef<ModuleOp> module,
                            const CompileOptions &opts) {
  auto say = [&](const std::string &s) {
    if (opts.progress)
      opts.progress(s);
  };
  llm::ModelOp model = modelOf(*module);
  if (!model)
    throw CompileError("the IR has no llm.model");
  if (!model.getSourceAttr() || !model.getTokenizerAttr())
    throw CompileError("the IR does not carry its model (no weights, tokenizer or source): "
                       "import it with llmc import --emit-resources");
  runUserPhase(ctx, *module, opts, say);
  if (failed(verify(*module)))
    throw CompileError("the IR does not verify after the pipeline");

  auto exported = exportProgram(*module);
  if (failed(exported))
    throw CompileError("cannot export the compiled model");

  CompiledModel out;
  out.store = std::make_shared<WeightStore>(*module);
  if (opts.embedIR)
    out.irText = printWithoutData(*module);
  exportWeights(*out.store, exported->weights, out);

  nlohmann::json &m = out.manifest;
  m["config"] = exported->config;
  m["program"] = exported->program.toJson();
  if (!exported->speculation.is_null())
    m["speculation"] = exported->speculation;
  if (opts.kernels) {
    auto t2 = std::chrono::steady_clock::now();
    std::string why;
    OwningOpRef<ModuleOp> lowered;
    nlohmann::json plan = buildKernelPlan(*module, opts.instruments, why, &lowered);
    if (plan.is_null()) {
      say("no kernel plan: " + why + "; the artifact runs on the reference executor");
    } else {
      char buf[256];
      snprintf(buf, sizeof buf, "lowered to %zu kernels (arena %lld floats per token) in %.2f s",
               plan["steps"].size(), (long long)plan["arena_floats_per_token"].get<int64_t>(),
               secondsSince(t2));
      say(buf);
      m["kernel_plan"] = std::move(plan);
      if (opts.codegen)
        generateKernels(*lowered, opts, out, say);
      const PackingResult packing = packSelectedLayouts(m, out.tensors, out.blobs);
      if (packing.packed) {
        snprintf(buf, sizeof buf,
                 "packed %lld weights in the rows8 layout (%.1f MiB; %lld also kept row-major) "
                 "in %.2f s",
                 (long long)packing.packed, packing.packedBytes / 1048576.0,
                 (long long)packing.keptRowMajor, packing.seconds);
        say(buf);
      }
    }
  }
  m["tokenizer"] = tokenizerToJson(out.store->tokenizer());
  nlohmann::json passes = nlohmann::json::array();
  if (ArrayAttr p = model.getPassesAttr())
    passes = attrToJson(p);
  m["pipeline"] = {{"passes", passes}};
  m["source"] = attrToJson(model.getSourceAttr());
  m["compiler"] = {{"name", "llmc"}, {"version", "0.1.0"}};
  if (opts.embedIR)
    m["ir"] = out.irText;
  out.module = std::move(module);
  return out;
}

} // namespace llmc
