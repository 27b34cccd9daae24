//===- PruneDepth.cpp - llm-prune-depth: score blocks, remove some -------===//
// Checks every option against the module's blocks, scores the blocks
// (compiler/prune/DepthScores.h: WRP and magnitude from the IR's weights,
// Block Influence and angular distance from the residual stream on
// calibration text), reports the scores and the choice, and removes the
// chosen llm.layer ops: their users read their input, the rest are
// renumbered (layer index, KV-cache slot, weight names) and the config
// records num_layers and kept_layers.
//===----------------------------------------------------------------------===//
#include "passes/prune/Passes.h"
#include "compiler/prune/DepthScores.h"
#include "compiler/weights/WeightStore.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/ir_enums.h"
#include "passes/prune/BlockActivations.h"
#include "passes/prune/RepairSpans.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

using namespace mlir;

namespace llmc::prune {
#define GEN_PASS_DEF_PRUNEDEPTHPASS
#include "passes/prune/Passes.h.inc"

namespace {

struct Settings {
  std::optional<llm::DepthPruneMethod> method; // none: layers= only
  llm::WrpSignature signature = llm::WrpSignature::Gram;
  int64_t blocks = 0, remove = 0, first = 0, last = 0;
  std::vector<int64_t> explicitBlocks; // layers=, ascending
};

struct Choice {
  std::vector<double> scores; // per block, or per run start (angular)
  std::vector<int64_t> removed, groupStart;
  std::vector<double> redundancy; // WRP
  CalibrationUse calib;
  double seconds = 0;
  std::vector<SpanRepair> repairs; // repair=true
  CalibrationUse repairCalib;
  double repairSeconds = 0;
};

std::string weightName(Value v) {
  auto w = v.getDefiningOp<llm::WeightOp>();
  return w ? w.getName().str() : std::string();
}

/// A 2-D view [rows, cols] of weight `name` (3-D: [E*F, D]) dequantized to f32.
Eigen::MatrixXf dequantized(const WeightStore &store, const std::string &name, int64_t firstRow,
                            int64_t rows) {
  const WeightStore::Entry *e = store.find(name);
  if (!e || !e->data)
    throw std::runtime_error("weight '" + name + "' has no data in the IR");
  const int64_t cols = e->shape.back();
  std::vector<float> buf(size_t(rows * cols));
  WeightStore::dequantizeRows(*e, firstRow, rows, buf.data());
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  return Eigen::Map<RowMajor>(buf.data(), rows, cols);
}

int64_t matrixRows(const WeightStore &store, const std::string &name) {
  const WeightStore::Entry *e = store.find(name);
  if (!e)
    throw std::runtime_error("weight '" + name + "' is not in the IR");
  int64_t r = 1;
  for (size_t i = 0; i + 1 < e->shape.size(); ++i)
    r *= e->shape[i];
  return r;
}

/// The block's matrices (every weight of rank >= 2 its compute ops read).
std::vector<std::string> blockMatrices(llm::LayerOp layer, const WeightStore &store) {
  std::vector<std::string> names;
  layer.walk([&](llm::WeightOp w) {
    const WeightStore::Entry *e = store.find(w.getName().str());
    if (e && e->shape.size() >= 2)
      names.push_back(w.getName().str());
  });
  return names;
}

/// Mean over the block's matrices of their RMS weight.
double magnitudeOf(llm::LayerOp layer, const WeightStore &store) {
  const std::vector<std::string> names = blockMatrices(layer, store);
  if (names.empty())
    throw std::runtime_error("block " + std::to_string(layer.getIndex()) + " has no matrices");
  double sum = 0;
  for (const std::string &n : names) {
    const Eigen::MatrixXf w = dequantized(store, n, 0, matrixRows(store, n));
    sum += std::sqrt(double(w.squaredNorm()) / double(w.size()));
  }
  return sum / double(names.size());
}

BlockWriters writersOf(llm::LayerOp layer, const WeightStore &store) {
  BlockWriters b;
  std::string wo, wd;
  bool moe = false;
  layer.walk([&](llm::AttentionOp a) { wo = weightName(a.getWo()); });
  layer.walk([&](llm::MLPOp m) { wd = weightName(m.getDown()); });
  layer.walk([&](llm::MoEOp m) {
    wd = weightName(m.getDown());
    moe = true;
  });
  if (wo.empty() || wd.empty())
    throw std::runtime_error("block " + std::to_string(layer.getIndex()) +
                             " has no attention output or MLP down projection");
  b.wo = dequantized(store, wo, 0, matrixRows(store, wo));
  const WeightStore::Entry *e = store.find(wd);
  if (!moe) {
    b.wd.push_back(dequantized(store, wd, 0, matrixRows(store, wd)));
  } else { // [E, D, F]: expert x's rows are x*D .. (x+1)*D of the [E*D, F] view
    const int64_t D = e->shape[1];
    for (int64_t x = 0; x < e->shape[0]; ++x)
      b.wd.push_back(dequantized(store, wd, x * D, D));
  }
  return b;
}

/// The original-model index of every block that stays.
std::vector<int64_t> keptOriginal(int64_t blocks, const std::vector<int64_t> &removed,
                                  const std::vector<int64_t> &origin) {
  const std::set<int64_t> gone(removed.begin(), removed.end());
  std::vector<int64_t> kept;
  for (int64_t l = 0; l < blocks; ++l)
    if (!gone.count(l))
      kept.push_back(origin[size_t(l)]);
  return kept;
}

/// "blk.<from>.rest" -> "blk.<to>.rest"; other names unchanged.
std::string renamed(llvm::StringRef name, int64_t from, int64_t to) {
  const std::string old = "blk." + std::to_string(from) + ".";
  if (!name.starts_with(old))
    return name.str();
  return "blk." + std::to_string(to) + "." + name.drop_front(old.size()).str();
}

class PruneDepthPass : public impl::PruneDepthPassBase<PruneDepthPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    llm::ModelOp model = modelOf(getOperation());
    if (!model) {
      (void)fail("the module has no llm.model");
      return;
    }
    SmallVector<llm::LayerOp> blocks;
    for (Operation &op : model.getBodyBlock())
      if (auto l = dyn_cast<llm::LayerOp>(op))
        blocks.push_back(l);
    Settings s;
    if (failed(checkBlocks(model, blocks)) || failed(parseOptions(int64_t(blocks.size()), s)))
      return;
    Choice c;
    try {
      const auto t0 = std::chrono::steady_clock::now();
      if (s.method)
        c = scoreAndChoose(blocks, s);
      c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (const std::exception &e) {
      (void)fail(e.what());
      return;
    }
    if (!s.explicitBlocks.empty())
      c.removed = s.explicitBlocks;
    std::sort(c.removed.begin(), c.removed.end());
    if (repair && !dryRun && failed(repairCut(int64_t(blocks.size()), c)))
      return;
    const std::vector<int64_t> origin = originalIndices(model, int64_t(blocks.size()));
    printChoice(s, c, origin);
    if (!report.empty() && failed(writeReport(s, c, origin)))
      return;
    model->removeAttr(kDepthChoiceAttr); // indices of the model as it was
    if (!dryRun)
      removeBlocks(model, blocks, c.removed, origin);
    else // for llm-spec-attach{method=self}: the blocks a drafter may skip
      model->setAttr(kDepthChoiceAttr, OpBuilder(model).getDenseI64ArrayAttr(c.removed));
  }

private:
  /// repair=true: fits and folds the least-squares map of every removed run
  /// that follows a kept block (RepairSpans.h), on the model before the cut.
  LogicalResult repairCut(int64_t L, Choice &c) {
    if (!(repairLambda > 0.0))
      return fail("repair-lambda must be > 0");
    try {
      const auto t0 = std::chrono::steady_clock::now();
      WeightStore store(getOperation());
      if (!store.hasData())
        return fail("repair needs the weights in the IR (llmc compile)");
      c.repairs = repairableSpans(c.removed);
      repairSpans(getOperation(), store, L, c.repairs, calib, calibTokens, calibSeq,
                  repairLambda, c.repairCalib);
      c.repairSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (const std::exception &e) {
      return fail(e.what());
    }
    return success();
  }

  LogicalResult fail(const Twine &msg) {
    getOperation().emitError() << "llm-prune-depth: " << msg;
    signalPassFailure();
    return failure();
  }

  /// Blocks are llm.layer 0 .. L-1 in order, and no KV policy is attached yet.
  LogicalResult checkBlocks(llm::ModelOp model, ArrayRef<llm::LayerOp> blocks) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      llm::LayerOp layer = blocks[i];
      if (int64_t(layer.getIndex()) != int64_t(i))
        return fail("block " + Twine(i) + " of the model is llm.layer " +
                    Twine(int64_t(layer.getIndex())) + " (expected layers 0..L-1 in order)");
    }
    bool policy = false;
    model.walk([&](llm::AttentionOp a) { policy |= bool(a.getKvPolicyAttr()); });
    if (policy)
      return fail("a KV policy is already attached (its per-layer budgets would go stale): run "
                  "llm-prune-depth before llm-kv-policy");
    return success();
  }

  LogicalResult parseOptions(int64_t L, Settings &s) {
    s.blocks = L;
    if (!method.empty()) {
      s.method = llm::symbolizeDepthPruneMethod(method);
      if (!s.method)
        return fail("unknown method '" + method + "' (option 'method': one of " +
                    std::string(spellingsDepthPruneMethod()) + ")");
    }
    auto sig = llm::symbolizeWrpSignature(signature);
    if (!sig)
      return fail("unknown signature '" + signature + "' (one of " +
                  std::string(spellingsWrpSignature()) + ")");
    s.signature = *sig;
    if (gamma < 0 || !std::isfinite(double(gamma)))
      return fail("gamma must be >= 0");
    if (calibTokens < 2 || calibSeq < 2)
      return fail("calib-tokens and calib-seq must be at least 2");
    if (keepFirst < 0 || keepLast < 0)
      return fail("keep-first and keep-last must be >= 0");
    if (drop < 0)
      return fail("drop must be >= 0");
    if (ratio != 0 && !(ratio > 0 && ratio < 1))
      return fail("ratio must be in (0, 1)");
    if (drop > 0 && ratio > 0)
      return fail("give drop or ratio, not both");
    if (!layers.empty())
      return parseExplicitBlocks(L, s);
    if (!s.method)
      return fail("option 'method' is required (one of " +
                  std::string(spellingsDepthPruneMethod()) + "), or name the blocks with layers=");
    s.remove = ratio > 0 ? int64_t(std::llround(double(ratio) * double(L))) : int64_t(drop);
    s.first = keepFirst;
    s.last = L - keepLast;
    if (s.remove == 0 && !dryRun)
      return fail("nothing to remove: give drop=N, ratio=r or layers=... (or dry-run to report)");
    if (s.remove > s.last - s.first || s.remove >= L)
      return fail("cannot remove " + Twine(s.remove) + " of " + Twine(L) + " blocks with keep-first=" +
                  Twine(int64_t(keepFirst)) + " keep-last=" + Twine(int64_t(keepLast)));
    if (*s.method == llm::DepthPruneMethod::Angular && s.remove < 1)
      return fail("angular needs drop >= 1 (the length of the run it removes)");
    return success();
  }

  LogicalResult parseExplicitBlocks(int64_t L, Settings &s) {
    if (drop > 0 || ratio > 0)
      return fail("layers= names the blocks to remove; drop and ratio do not go with it");
    std::set<int64_t> set;
    for (int64_t l : layers) {
      if (l < 0 || l >= L)
        return fail("layers: block " + Twine(l) + " is not in [0, " + Twine(L) + ")");
      if (!set.insert(l).second)
        return fail("layers: block " + Twine(l) + " is named twice");
    }
    if (int64_t(set.size()) >= L)
      return fail("layers: at least one block must remain");
    s.explicitBlocks.assign(set.begin(), set.end());
    s.remove = int64_t(set.size());
    s.first = 0;
    s.last = L;
    return success();
  }

  Choice scoreAndChoose(ArrayRef<llm::LayerOp> blocks, const Settings &s) {
    WeightStore store(getOperation());
    if (!store.hasData()) // every method reads the weights or runs the model
      throw std::runtime_error("method " + method + " needs the weights in the IR (llmc compile, "
                               "or llmc import --emit-resources)");
    Choice c;
    using M = llm::DepthPruneMethod;
    switch (*s.method) {
    case M::Magnitude:
      for (llm::LayerOp l : blocks)
        c.scores.push_back(magnitudeOf(l, store));
      c.removed = lowestScores(c.scores, s.first, s.last, s.remove);
      break;
    case M::WRP: {
      std::vector<BlockWriters> writers;
      for (llm::LayerOp l : blocks)
        writers.push_back(writersOf(l, store));
      const WrpAnalysis a = analyzeWrp(
          writers, s.signature == llm::WrpSignature::Gram ? Signature::Gram : Signature::RowEnergy);
      WrpChoice w = chooseWrp(a, s.first, s.last, s.remove, gamma);
      c.scores = w.redundancy;
      c.removed = w.removed;
      c.groupStart = w.groupStart;
      break;
    }
    case M::BlockInfluence:
    case M::Angular: {
      const int64_t span = *s.method == M::Angular ? s.remove : 1;
      ResidualCosines cos = measureResidualCosines(getOperation(), store, s.blocks, span, calib,
                                                   calibTokens, calibSeq, c.calib);
      if (*s.method == M::BlockInfluence) {
        c.scores = cos.blockInfluence();
        c.removed = lowestScores(c.scores, s.first, s.last, s.remove);
      } else {
        c.scores = cos.angularDistance();
        const int64_t at = bestRun(c.scores, s.first, s.last, s.remove);
        if (at < 0)
          throw std::runtime_error("no run of " + std::to_string(s.remove) +
                                   " blocks fits between keep-first and keep-last");
        for (int64_t l = at; l < at + s.remove; ++l)
          c.removed.push_back(l);
      }
      break;
    }
    }
    return c;
  }

  /// Each block's index in the original model (config kept_layers, when an
  /// earlier run pruned it).
  static std::vector<int64_t> originalIndices(llm::ModelOp model, int64_t L) {
    std::vector<int64_t> origin(static_cast<size_t>(L));
    std::iota(origin.begin(), origin.end(), 0);
    if (auto kept = dyn_cast_or_null<ArrayAttr>(model.getConfig().get("kept_layers"));
        kept && int64_t(kept.size()) == L)
      for (int64_t i = 0; i < L; ++i)
        if (auto v = dyn_cast<IntegerAttr>(kept[size_t(i)]))
          origin[size_t(i)] = v.getInt();
    return origin;
  }

  void printChoice(const Settings &s, const Choice &c, const std::vector<int64_t> &origin) {
    ProgressLog log(getOperation());
    const std::set<int64_t> gone(c.removed.begin(), c.removed.end());
    const bool runs = s.method == llm::DepthPruneMethod::Angular;
    if (s.method) {
      log << llvm::format("[llmc] prune-depth %s over %lld blocks", method.c_str(),
                          (long long)s.blocks);
      if (c.calib.tokens)
        log << llvm::format(" (%lld calibration tokens of %s)", (long long)c.calib.tokens,
                            c.calib.path.c_str());
      log << llvm::format(", %.2f s\n", c.seconds);
      for (size_t i = 0; i < c.scores.size(); ++i)
        log << llvm::format("[llmc]   %s %2zu (was %lld): %.6f%s\n", runs ? "run at" : "block",
                            i, (long long)origin[i], c.scores[i],
                            !runs && gone.count(int64_t(i)) ? "  removed" : "");
    }
    std::string list;
    for (int64_t l : c.removed)
      list += (list.empty() ? "" : ",") + std::to_string(l);
    log << llvm::format("[llmc] prune-depth: %s blocks %s; %lld of %lld %s\n",
                        dryRun ? "would remove" : "removing", list.empty() ? "none" : list.c_str(),
                        (long long)(s.blocks - int64_t(c.removed.size())), (long long)s.blocks,
                        dryRun ? "would remain (dry run: nothing changed)" : "remain");
    if (repair && !dryRun && c.repairs.empty())
      log << "[llmc] prune-depth repair: nothing to repair (no removed run follows a kept "
             "block)\n";
    for (const SpanRepair &r : c.repairs)
      log << llvm::format("[llmc] prune-depth repair: blocks %lld-%lld into %s: stream error "
                          "%.4f cut, %.4f repaired (%lld calibration tokens, %.2f s)\n",
                          (long long)r.first, (long long)r.last, r.weight.c_str(), r.errorCut,
                          r.errorRepaired, (long long)c.repairCalib.tokens, c.repairSeconds);
  }

  LogicalResult writeReport(const Settings &s, const Choice &c, const std::vector<int64_t> &origin) {
    nlohmann::json j;
    j["method"] = s.method ? method : std::string("layers");
    j["blocks"] = s.blocks;
    j["keep_first"] = int64_t(keepFirst);
    j["keep_last"] = int64_t(keepLast);
    j["score"] = !s.method ? "none"
                 : *s.method == llm::DepthPruneMethod::Angular ? "run_distance"
                                                               : "block";
    j["scores"] = c.scores;
    j["removed"] = c.removed;
    j["kept_original"] = keptOriginal(s.blocks, c.removed, origin);
    j["search_seconds"] = c.seconds;
    j["dry_run"] = bool(dryRun);
    if (s.method == llm::DepthPruneMethod::WRP) {
      j["groups"] = c.groupStart;
      j["signature"] = signature;
      j["gamma"] = double(gamma);
    }
    if (c.calib.tokens)
      j["calibration"] = {{"path", c.calib.path}, {"tokens", c.calib.tokens},
                          {"sequences", c.calib.sequences}};
    for (const SpanRepair &r : c.repairs)
      j["repairs"].push_back({{"after_block", r.before}, {"removed", {r.first, r.last}},
                              {"weight", r.weight}, {"stream_error_cut", r.errorCut},
                              {"stream_error_repaired", r.errorRepaired},
                              {"calibration_tokens", c.repairCalib.tokens},
                              {"seconds", c.repairSeconds}});
    const std::string tmp = report + ".part";
    {
      std::ofstream f(tmp);
      f << j.dump(2) << "\n";
      if (!f.good()) {
        std::remove(tmp.c_str());
        return fail("cannot write report '" + report + "'");
      }
    }
    if (std::rename(tmp.c_str(), report.c_str()) != 0) {
      std::remove(tmp.c_str());
      return fail("cannot write report '" + report + "'");
    }
    return success();
  }

  void removeBlocks(llm::ModelOp model, ArrayRef<llm::LayerOp> blocks,
                    const std::vector<int64_t> &removed, const std::vector<int64_t> &origin) {
    Builder b(model.getContext());
    const std::set<int64_t> gone(removed.begin(), removed.end());
    int64_t next = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      llm::LayerOp layer = blocks[i];
      if (gone.count(int64_t(i))) {
        layer.getResult().replaceAllUsesWith(layer.getInput());
        layer.erase();
        continue;
      }
      if (int64_t(i) != next) {
        layer.setIndexAttr(b.getI64IntegerAttr(next));
        layer.walk([&](llm::AttentionOp a) { a.setLayerAttr(b.getI64IntegerAttr(next)); });
        layer.walk([&](llm::WeightOp w) {
          w.setNameAttr(b.getStringAttr(renamed(w.getName(), int64_t(i), next)));
        });
      }
      ++next;
    }
    NamedAttrList config(model.getConfig());
    config.set("num_layers", b.getI64IntegerAttr(next));
    config.set("kept_layers",
               b.getI64ArrayAttr(keptOriginal(int64_t(blocks.size()), removed, origin)));
    model.setConfigAttr(config.getDictionary(model.getContext()));
  }
};

} // namespace
} // namespace llmc::prune
