//===- MixedPrecision.cpp - llmc compile --target-bpw -------------------===//
#include "compiler/driver/MixedPrecision.h"
#include "compiler/driver/QuantizeStep.h"
#include "compiler/driver/WeightProbe.h"
#include "compiler/quant/Awq.h"
#include "compiler/quant/BitAllocation.h"
#include "compiler/quant/GroupGrid.h"
#include "passes/quant/Calibration.h"
#include "llvm/Support/GlobPattern.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

namespace llmc {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fmt(const char *f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

llvm::GlobPattern glob(const std::string &pattern, const char *what) {
  auto g = llvm::GlobPattern::create(pattern);
  if (!g) {
    llvm::consumeError(g.takeError());
    throw MixedPrecisionUsageError(std::string("--target-bpw: bad ") + what + " '" + pattern + "'");
  }
  return std::move(*g);
}

/// A matrix weight whose width the plan chooses.
struct FreeWeight {
  std::string name;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> bytes; // per candidate width
  std::vector<double> err;    // RTN weight error energy per candidate width
  double probeKld = 0;        // measured at the probe width
  // Calibrated methods, at the probe width: RTN's relative output error
  // (-1: unknown), and the method's output error energy over RTN's.
  double rtnOutErr = -1, factor = 1;
};

/// Every matrix weight of the model: free, or fixed by a user override or skip.
struct WeightSet {
  std::vector<FreeWeight> free;
  nlohmann::json fixed = nlohmann::json::object(); // name -> {format, by}
  int64_t params = 0, fixedBytes = 0;
};

WeightSet classifyWeights(const CompiledModel &ref, const QuantizeStep &step,
                          const std::vector<int> &cands) {
  // GlobPattern keeps pointers into its pattern text (kept alive in `step`).
  std::vector<llvm::GlobPattern> overrideGlobs, skipGlobs;
  for (const QuantizeStep::Override &o : step.overrides)
    overrideGlobs.push_back(glob(o.glob, "override glob"));
  for (const std::string &s : step.skip)
    skipGlobs.push_back(glob(s, "skip pattern"));
  std::map<std::string, int64_t> bytesOf;
  for (const ArtifactWriter::Tensor &t : ref.tensors)
    bytesOf[t.name] = t.nbytes;

  WeightSet ws;
  for (const ArtifactWriter::Tensor &t : ref.tensors) {
    if (t.shape.size() < 2)
      continue;
    const int64_t n = numel(t.shape), cols = t.shape.back(), rows = n / cols;
    ws.params += n;
    auto o = std::find_if(overrideGlobs.begin(), overrideGlobs.end(),
                          [&](const llvm::GlobPattern &g) { return g.match(t.name); });
    if (o != overrideGlobs.end()) {
      const QuantizeStep::Override &ov = step.overrides[size_t(o - overrideGlobs.begin())];
      const DType d = quant::GridSpec{ov.bits, step.sym, ov.group}.dtype();
      ws.fixedBytes += rows * rowBytes(d, cols);
      ws.fixed[t.name] = {{"format", std::string(dtypeName(d))}, {"by", "override " + ov.text}};
      continue;
    }
    if (std::any_of(skipGlobs.begin(), skipGlobs.end(),
                    [&](const llvm::GlobPattern &g) { return g.match(t.name); })) {
      auto aux = bytesOf.find(t.name + kAuxSuffix);
      ws.fixedBytes += t.nbytes + (aux == bytesOf.end() ? 0 : aux->second);
      ws.fixed[t.name] = {{"format", std::string(dtypeName(t.dtype))}, {"by", "skip"}};
      continue;
    }
    if (t.name.find_first_of("*?[]{}\\,: ") != std::string::npos)
      throw std::runtime_error("--target-bpw: weight '" + t.name +
                               "' cannot be named in an override entry (skip it)");
    if (cols % step.group != 0)
      throw std::runtime_error("--target-bpw: weight '" + t.name + "' has rows of " +
                               std::to_string(cols) + " weights, not a multiple of the group " +
                               std::to_string(step.group) + " (skip it or choose another group)");
    FreeWeight f{t.name, rows, cols, {}, {}, 0};
    for (int b : cands)
      f.bytes.push_back(rows * rowBytes(quant::GridSpec{b, step.sym, step.group}.dtype(), cols));
    ws.free.push_back(std::move(f));
  }
  return ws;
}

/// ||x (W - Wq)^T|| / ||x W^T|| on x [tokens, cols] (llm-quantize's out_rel_err).
double relativeOutputError(const std::vector<float> &w, const std::vector<float> &wq, int64_t rows,
                           int64_t cols, const std::vector<float> &x) {
  const int64_t tokens = int64_t(x.size()) / cols;
  const std::vector<float> zeros(w.size(), 0.0f);
  const double ref = quant::outputMse(w.data(), zeros.data(), rows, cols, x.data(), tokens);
  return ref > 0 ? std::sqrt(quant::outputMse(w.data(), wq.data(), rows, cols, x.data(), tokens) / ref)
                 : -1.0;
}

std::vector<float> loadF32(const CompiledModel &ref, const FreeWeight &f) {
  std::vector<float> w(size_t(f.rows * f.cols));
  WeightStore::dequantizeRows(*ref.store->find(f.name), 0, f.rows, w.data());
  return w;
}

/// Weights that must share one width: for AWQ the weights its scales touch
/// together (q,k,v,o of an attention: o's scales fold into v; gate,up,down
/// of an MLP: down's fold into up), so every site keeps one grid and is
/// still scaled (llm-quantize scales a site only within one grid);
/// otherwise each weight alone. Indices into `free`.
std::vector<std::vector<size_t>> allocationUnits(const std::vector<FreeWeight> &free,
                                                 const Program &program, bool tieAwqSites) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < free.size(); ++i)
    index[free[i].name] = i;
  std::vector<std::vector<size_t>> units;
  std::set<size_t> placed;
  if (tieAwqSites)
    for (const ProgramNode &n : program.nodes) {
      std::vector<const char *> roles;
      if (n.op == "attention")
        roles = {"q", "k", "v", "o"};
      else if (n.op == "mlp")
        roles = {"gate", "up", "down"};
      std::vector<size_t> unit;
      for (const char *r : roles) {
        auto w = n.weights.find(r);
        auto it = w == n.weights.end() ? index.end() : index.find(w->second);
        if (it != index.end() && placed.insert(it->second).second)
          unit.push_back(it->second);
      }
      if (!unit.empty())
        units.push_back(unit);
    }
  for (size_t i = 0; i < free.size(); ++i)
    if (!placed.count(i))
      units.push_back({i});
  return units;
}

} // namespace

double matrixBitsPerWeight(const CompiledModel &cm) {
  // The weights as their formats store them (the IR's), side data included;
  // not the kernels' layouts the artifact may also hold.
  int64_t params = 0, bytes = 0;
  for (const std::string &name : cm.store->names()) {
    const WeightStore::Entry *e = cm.store->find(name);
    if (e->shape.size() < 2)
      continue;
    params += numel(e->shape);
    bytes += e->nbytes + int64_t(e->aux.size());
  }
  return params ? 8.0 * double(bytes) / double(params) : 0.0;
}

MixedPrecisionPlan planMixedPrecision(mlir::MLIRContext &ctx, const SourceModel &src,
                                      const MixedPrecisionOptions &opts) {
  auto say = [&](const std::string &s) {
    if (opts.progress)
      opts.progress(s);
  };
  const auto t0 = Clock::now();
  if (!(opts.targetBpw > 0) || !std::isfinite(opts.targetBpw))
    throw MixedPrecisionUsageError("--target-bpw must be a positive number");
  std::vector<int> cands = opts.candidates;
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  const auto probeAt = std::find(cands.begin(), cands.end(), opts.probeBits);
  if (probeAt == cands.end() || opts.probeTokens < 2)
    throw std::invalid_argument("planMixedPrecision: the probe width must be a candidate and "
                                "the probe window at least 2 tokens");
  const size_t probeIdx = size_t(probeAt - cands.begin());
  const QuantizeStep step = readQuantizeStep(opts.pipeline);

  // The source with no pipeline: the probes' reference and weights.
  CompileOptions refOpts;
  refOpts.embedIR = false;
  refOpts.kernels = false; // only its weights are used: no plan, no packing, no codegen
  CompiledModel ref = compileModel(ctx, src, refOpts);
  WeightSet ws = classifyWeights(ref, step, cands);
  std::vector<FreeWeight> &free = ws.free;
  if (ws.params == 0)
    throw std::runtime_error("--target-bpw: " + src.path + " has no matrix weights");

  // The budget in bytes, and the range the candidates reach.
  const int64_t budget = int64_t(std::floor(opts.targetBpw * double(ws.params) / 8.0));
  int64_t lo = ws.fixedBytes, hi = ws.fixedBytes;
  for (const FreeWeight &f : free) {
    lo += f.bytes.front();
    hi += f.bytes.back();
  }
  const auto bpw = [&](int64_t bytes) { return 8.0 * double(bytes) / double(ws.params); };
  const std::string grid =
      "group " + std::to_string(step.group) + (step.sym ? ", symmetric" : ", asymmetric");
  if (budget < lo)
    throw MixedPrecisionUsageError(
        fmt("--target-bpw %.3f is below the smallest size reachable: %.3f bits per weight ",
            opts.targetBpw, bpw(lo)) +
        "(every free matrix weight at " + std::to_string(cands.front()) + " bits, " + grid +
        (ws.fixed.empty() ? ""
                          : ", plus " + std::to_string(ws.fixed.size()) +
                                " weights fixed by override or skip") +
        ")");
  const bool saturated = budget >= hi;
  if (saturated)
    say(fmt("target-bpw: %.3f reaches the widest plan (%.3f bits per weight): every free weight "
            "gets the widest width, nothing to probe",
            opts.targetBpw, bpw(hi)));

  // Sensitivities: one forward per free weight, alone at the probe width.
  quant::CalibrationData calib;
  std::unique_ptr<WeightProbe> probe;
  const bool calibrated = step.method != "rtn"; // see the correction below
  const auto tp = Clock::now();
  if (!saturated && !free.empty()) {
    calib = quant::loadCalibration(*ref.store, opts.calibPath, opts.probeTokens, opts.probeTokens);
    probe = std::make_unique<WeightProbe>(ref, calib.sequences.front(), opts.threads);
    say(fmt("target-bpw: probing %.0f weights one at a time, %.0f-bit RTN, on %.0f tokens of ",
            double(free.size()), opts.probeBits, double(calib.tokens)) +
        calib.path);
    const quant::GridSpec probeGrid{opts.probeBits, step.sym, step.group};
    const size_t every = std::max<size_t>(1, (free.size() + 9) / 10);
    for (size_t i = 0; i < free.size(); ++i) {
      FreeWeight &f = free[i];
      const std::vector<float> w = loadF32(ref, f);
      f.err = quant::rtnErrorEnergies(w.data(), f.rows, f.cols, cands, step.sym, step.group);
      const quant::QuantizedMatrix q = quant::rtnQuantize(w.data(), f.rows, f.cols, probeGrid);
      f.probeKld = std::max(0.0, probe->kld(f.name, probeGrid.dtype(), q.pack()));
      if (const std::vector<float> *x = probe->input(f.name); x && calibrated)
        f.rtnOutErr = relativeOutputError(w, q.dequantized(), f.rows, f.cols, *x);
      if ((i + 1) % every == 0 || i + 1 == free.size())
        say(fmt("target-bpw: probed %.0f/%.0f weights in %.1f s (forwards %.1f s, ", double(i + 1),
                double(free.size()), secondsSince(tp), probe->forwardSeconds()) +
            fmt("model set-up %.1f s)", probe->buildSeconds()));
    }
  }
  const double probeSeconds = secondsSince(tp);

  // A calibrated method (gptq, awq, osaq) shrinks some weights' output
  // error far more than others' (AWQ protects weights behind outlier
  // channels): run it uniformly at the probe width and scale each weight's
  // RTN sensitivities at that width and wider by the method's output error
  // energy over RTN's. Narrower widths keep RTN's prediction: the method's
  // in-sample output error there proved too optimistic (AWQ at 2 bits on
  // SmolLM2: ratios below its 3-bit ones, while its KLD gain over RTN is
  // much smaller at 2 bits than at 3), and trusting it filled the budget
  // with 2-bit weights.
  nlohmann::json correction;
  if (probe && calibrated) {
    const auto tm = Clock::now();
    std::vector<std::string> all;
    for (const FreeWeight &f : free)
      all.push_back(f.name + ":" + std::to_string(opts.probeBits));
    CompileOptions mo;
    mo.pipeline = withOverrides(step, all);
    mo.calibPath = opts.calibPath;
    mo.embedIR = false;
    mo.kernels = false; // only its weights' transform records are read
    say("target-bpw: running " + step.method + " at " + std::to_string(opts.probeBits) +
        " bits to weigh the sensitivities by its output errors");
    const CompiledModel mq = compileModel(ctx, src, mo);
    nlohmann::json factors = nlohmann::json::object();
    for (FreeWeight &f : free) {
      const WeightStore::Entry *e = mq.store->find(f.name);
      if (!e || !e->info.contains("out_rel_err") || !(f.rtnOutErr > 0))
        continue;
      const double ratio = e->info["out_rel_err"].get<double>() / f.rtnOutErr;
      if (std::isfinite(ratio))
        f.factor = ratio * ratio;
      factors[f.name] = f.factor;
    }
    correction = {{"method", step.method},
                  {"bits", opts.probeBits},
                  {"factors", factors},
                  {"seconds", secondsSince(tm)}};
  }
  auto methodFactor = [&](const FreeWeight &f, int b) { return b < opts.probeBits ? 1.0 : f.factor; };
  auto predictedRtn = [&](const FreeWeight &f, size_t c) {
    return saturated ? 0.0 : quant::predictKld(f.probeKld, f.err[probeIdx], f.err[c]);
  };
  auto predicted = [&](const FreeWeight &f, size_t c) {
    return methodFactor(f, cands[c]) * predictedRtn(f, c);
  };

  // Diagnostics: measured vs predicted KLD at every width for a few weights.
  nlohmann::json validation = nlohmann::json::array();
  for (size_t j = 0, k = probe ? std::min(free.size(), size_t(opts.validate)) : 0; j < k; ++j) {
    // Evenly spaced, shifted by j so that the roles within a layer vary.
    const FreeWeight &f = free[std::min(free.size() - 1, j * free.size() / k + j)];
    const std::vector<float> w = loadF32(ref, f);
    nlohmann::json row = {{"weight", f.name}, {"bits", cands}};
    std::string line = "target-bpw: " + f.name + " RTN KLD measured/predicted:";
    for (size_t c = 0; c < cands.size(); ++c) {
      const quant::GridSpec g{cands[c], step.sym, step.group};
      const double measured =
          c == probeIdx ? f.probeKld
                        : probe->kld(f.name, g.dtype(), quant::rtnQuantize(w.data(), f.rows, f.cols, g).pack());
      row["measured"].push_back(measured);
      row["predicted"].push_back(predictedRtn(f, c));
      line += fmt(" %.0fb %.3g/%.3g", cands[c], measured, predictedRtn(f, c));
    }
    say(line);
    validation.push_back(row);
  }

  // Allocation over units (weights that share a width), exact byte costs.
  const std::vector<std::vector<size_t>> unitsOf = allocationUnits(
      free, Program::fromJson(ref.manifest.at("program")), step.method == "awq");
  std::vector<quant::AllocationUnit> units;
  for (const auto &members : unitsOf) {
    quant::AllocationUnit u{free[members.front()].name, std::vector<int64_t>(cands.size(), 0),
                            std::vector<double>(cands.size(), 0.0)};
    for (size_t m : members)
      for (size_t c = 0; c < cands.size(); ++c) {
        u.bytes[c] += free[m].bytes[c];
        u.kld[c] += predicted(free[m], c);
      }
    units.push_back(std::move(u));
  }
  quant::Allocation a;
  if (saturated) { // every unit at its widest
    a.choice.assign(units.size(), int(cands.size()) - 1);
    for (const quant::AllocationUnit &u : units)
      a.bytes += u.bytes.back();
  } else {
    a = quant::allocateBits(units, budget - ws.fixedBytes);
  }

  // The plan: override entries, manifest record, summary line.
  MixedPrecisionPlan plan;
  std::vector<int> chosen(free.size(), 0);
  for (size_t u = 0; u < unitsOf.size(); ++u)
    for (size_t m : unitsOf[u])
      chosen[m] = cands[size_t(a.choice[u])];
  std::vector<std::string> entries;
  nlohmann::json bits = nlohmann::json::object(), byWidth = nlohmann::json::object();
  std::map<int, std::pair<int64_t, int64_t>> histogram; // width -> (weights, params)
  for (size_t i = 0; i < free.size(); ++i) {
    entries.push_back(free[i].name + ":" + std::to_string(chosen[i]));
    bits[free[i].name] = chosen[i];
    if (!saturated)
      for (size_t c = 0; c < cands.size(); ++c)
        byWidth[free[i].name].push_back(predicted(free[i], c));
    histogram[chosen[i]].first += 1;
    histogram[chosen[i]].second += free[i].rows * free[i].cols;
  }
  plan.pipeline = withOverrides(step, entries);
  const int64_t planned = ws.fixedBytes + a.bytes;
  std::string hist;
  nlohmann::json histJson = nlohmann::json::object();
  for (const auto &[b, h] : histogram) {
    hist += (hist.empty() ? "" : ", ") +
            fmt("%.0f-bit x%.0f (%.1f%% of weights)", b, double(h.first),
                100.0 * double(h.second) / double(ws.params));
    histJson[std::to_string(b)] = {{"tensors", h.first}, {"params", h.second}};
  }
  if (!ws.fixed.empty())
    hist += fmt(", %.0f fixed by override/skip", double(ws.fixed.size()));
  plan.summary = fmt("target-bpw %.3f: ", opts.targetBpw) + step.method + " " + grid + ": " + hist +
                 (saturated ? std::string("; no probes")
                            : fmt("; predicted KLD %.4f (sum over weights)", a.kld)) +
                 fmt("; %.4f bits per weight planned; planned in %.1f s", bpw(planned),
                     secondsSince(t0));
  plan.record = {{"target_bpw", opts.targetBpw},
                 {"planned_bpw", bpw(planned)},
                 {"planned_bytes", planned},
                 {"budget_bytes", budget},
                 {"matrix_params", ws.params},
                 {"method", step.method},
                 {"group", step.group},
                 {"sym", step.sym},
                 {"candidates", cands},
                 {"probe",
                  {{"method", "rtn"},
                   {"bits", opts.probeBits},
                   {"tokens", calib.tokens},
                   {"text", calib.path},
                   {"seconds", probeSeconds}}},
                 {"predicted_kld", saturated ? nlohmann::json() : nlohmann::json(a.kld)},
                 {"tied_awq_sites", step.method == "awq"},
                 {"histogram", histJson},
                 {"bits", bits},
                 {"predicted_kld_by_width", byWidth},
                 {"fixed", ws.fixed},
                 {"seconds", secondsSince(t0)}};
  if (!validation.empty())
    plan.record["validation"] = validation;
  if (!correction.is_null())
    plan.record["method_correction"] = correction;
  return plan;
}

} // namespace llmc
