//===- Compile.cpp - SourceModel -> artifact --------------------*- C++ -*-===//
#include "compiler/driver/Compile.h"
#include "codegen/cpu/CpuKernelSource.h"
#include "codegen/cpu/CpuOpKernels.h"
#include "runtime/src/exec/ThreadPool.h"
#include "runtime/src/kernels/rows8.h"
#include "compiler/artifact/KernelPlanExport.h"
#include "compiler/artifact/PackedLayouts.h"
#include "llmc/codegen.h"
#include "codegen/cpu/HostCompiler.h"
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

/// The op kernels of the plan's other steps (embedding, norms, gated
/// activations, RoPE, attention, adds). `library` counts the ops left to the
/// runtime's library kernels (an embedding table in another format).
std::vector<codegen::OpKernelSpec>
opKernelSpecs(const nlohmann::json &plan,
              const std::map<std::string, const ArtifactWriter::Tensor *> &byName, int &library) {
  using Spec = codegen::OpKernelSpec;
  std::vector<Spec> ops;
  std::set<std::string> seen;
  auto add = [&](const Spec &s) {
    if (seen.insert(s.symbol()).second)
      ops.push_back(s);
  };
  for (const nlohmann::json &step : plan["steps"]) {
    const std::string k = step["kernel"];
    const nlohmann::json attrs = step.value("attrs", nlohmann::json::object());
    const int64_t inW = step.contains("in") && !step["in"].empty() ? step["in"][0][1].get<int64_t>() : 0;
    Spec s;
    if (k == "embed") {
      const ArtifactWriter::Tensor *t = byName.at(step["weights"][0].get<std::string>());
      s.kind = Spec::Kind::Embed;
      s.dtype = t->dtype;
      s.cols = t->shape.back();
      if (codegen::canGenerateEmbed(s.dtype, s.cols))
        add(s);
      else
        ++library;
      continue;
    }
    if ((k == "norm_matmul" || k == "norm_gated_matmul") && step.contains("norm")) {
      s.kind = Spec::Kind::RmsNorm;
      s.cols = inW;
      add(s);
    }
    if (k == "norm_gated_matmul") {
      s.kind = Spec::Kind::Gate;
      s.activation = attrs.at("activation").get<std::string>();
      add(s);
    } else if (k == "rms_norm") {
      s.kind = Spec::Kind::RmsNorm;
      s.cols = inW;
      add(s);
    } else if (k == "rope_kv_append") {
      s.kind = Spec::Kind::Rope;
      s.heads = attrs.at("num_heads").get<int64_t>();
      s.kvHeads = attrs.at("num_kv_heads").get<int64_t>();
      s.headDim = attrs.at("head_dim").get<int64_t>();
      s.theta = attrs.at("rope_theta").get<double>();
      s.interleaved = attrs.at("rope_style").get<std::string>() == "interleaved";
      add(s);
    } else if (k == "attend") {
      s.kind = Spec::Kind::AttendF32;
      s.headDim = attrs.at("head_dim").get<int64_t>();
      add(s);
    } else if (k == "add") {
      s.kind = Spec::Kind::Add;
      add(s);
    }
  }
  return ops;
}

/// `source` built for every level in `levels`, one compiler process per
/// level, as many at once as the machine has cores. Throws a failure.
std::vector<codegen::SharedObject> buildObjects(const std::string &source,
                                                const std::vector<codegen::IsaLevel> &levels) {
  std::vector<codegen::SharedObject> built(levels.size());
  ThreadPool pool(int(std::min<size_t>(levels.size(), std::max(1u, std::thread::hardware_concurrency()))));
  pool.parallelFor(0, int64_t(levels.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      built[size_t(i)] = codegen::compileSharedObject(source, levels[size_t(i)]);
  });
  return built;
}

/// The matrix-vector kernels of every product in the kernel plan and the
/// op kernels of its other steps, as C++ built for every x86-64 level.
void generateKernels(CompiledModel &out, const std::function<void(const std::string &)> &say) {
  namespace cg = codegen;
  const nlohmann::json &plan = out.manifest["kernel_plan"];
  std::map<std::string, const ArtifactWriter::Tensor *> byName;
  for (const ArtifactWriter::Tensor &t : out.tensors)
    byName[t.name] = &t;
  std::vector<cg::MatvecSpec> specs;
  std::set<std::pair<int, int64_t>> seen;
  int skipped = 0;
  for (const nlohmann::json &step : plan["steps"]) {
    const std::string k = step["kernel"];
    if (k != "norm_matmul" && k != "norm_gated_matmul" && k != "matmul_add")
      continue;
    for (const nlohmann::json &w : step["weights"]) {
      const ArtifactWriter::Tensor *t = byName.at(w.get<std::string>());
      const int64_t cols = t->shape.back();
      // Grouped integers the runtime repacks into a Q4_0/Q4_1/Q8_0 eight-row
      // copy run that layout's int8 kernel.
      const std::optional<DType> layout = kernels::rows8Layout(t->dtype);
      const DType dtype = layout && cols % 32 == 0 ? *layout : t->dtype;
      if (!cg::canGenerate(dtype, cols) && !cg::canGenerateRows8(dtype, cols)) {
        ++skipped;
        continue;
      }
      if (seen.insert({int(dtype), cols}).second)
        specs.push_back({dtype, cols});
    }
  }
  int libraryOps = 0;
  const std::vector<cg::OpKernelSpec> ops = opKernelSpecs(plan, byName, libraryOps);
  if (specs.empty() && ops.empty()) {
    say("no generated kernels: the plan has no step in a generated format");
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string source = cg::kernelSource(specs, ops);
  // One object per x86-64 level, so the artifact runs at its best on any
  // machine of its architecture with no compiler there.
  const std::vector<cg::IsaLevel> levels(std::begin(cg::kAllIsaLevels), std::end(cg::kAllIsaLevels));
  std::vector<cg::SharedObject> built;
  try {
    built = buildObjects(source, levels);
  } catch (const std::exception &e) {
    say(std::string("no generated kernels: ") + e.what());
    return;
  }
  nlohmann::json objects = nlohmann::json::object();
  std::string compiler;
  for (size_t i = 0; i < levels.size(); ++i) {
    compiler = built[i].compiler;
    const std::string name = std::string("codegen.") + cg::isaName(levels[i]) + ".so";
    out.blobs.push_back(std::make_unique<std::string>(std::move(built[i].bytes)));
    const std::string &b = *out.blobs.back();
    out.tensors.push_back({name, DType::U8, {int64_t(b.size())}, int64_t(b.size()), b.data()});
    objects[cg::isaName(levels[i])] = name;
  }
  out.blobs.push_back(std::make_unique<std::string>(std::move(source)));
  const std::string &src = *out.blobs.back();
  out.tensors.push_back({"codegen.kernels.cpp", DType::U8, {int64_t(src.size())},
                         int64_t(src.size()), src.data()});
  nlohmann::json kernels = nlohmann::json::array();
  int count = 0;
  for (const cg::MatvecSpec &s : specs) {
    const std::string dt(dtypeName(s.dtype));
    if (cg::canGenerate(s.dtype, s.cols)) {
      kernels.push_back(
          {{"symbol", s.symbol()}, {"kind", "matvec"}, {"dtype", dt}, {"cols", s.cols}});
      ++count;
    }
    if (cg::canGenerateRows8(s.dtype, s.cols)) {
      kernels.push_back(
          {{"symbol", s.rows8Symbol()}, {"kind", "rows8_int8"}, {"dtype", dt}, {"cols", s.cols}});
      ++count;
    }
  }
  for (const cg::OpKernelSpec &o : ops) {
    kernels.push_back(o.manifestEntry());
    ++count;
  }
  nlohmann::json flags = nlohmann::json::object();
  for (cg::IsaLevel l : levels)
    flags[cg::isaName(l)] = cg::compileFlags(l);
  out.manifest["codegen"] = {{"abi", cg::kAbi},          {"source", "codegen.kernels.cpp"},
                             {"objects", objects},        {"kernels", kernels},
                             {"compiler", compiler},      {"flags", flags}};
  char buf[256];
  snprintf(buf, sizeof buf,
           "generated %d kernels: %zu (format, width) product pairs (%d products in other formats "
           "use library kernels) and %zu op kernels (%d ops use library kernels), built for %zu "
           "levels in %.2f s",
           count, specs.size(), skipped, ops.size(), libraryOps, levels.size(), secondsSince(t0));
  say(buf);
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
  if (opts.kernels) {
    auto t2 = std::chrono::steady_clock::now();
    std::string why;
    nlohmann::json plan = buildKernelPlan(*module, opts.instruments, opts.codegen, why);
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
        generateKernels(out, say);
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
