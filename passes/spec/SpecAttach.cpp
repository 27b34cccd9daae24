//===- SpecAttach.cpp - llm-spec-attach: a drafter for the model ---------===//
// Checks the options, removes any earlier llm.speculate (and the weights only
// it read), and adds the new one before llm.return. For medusa it first runs
// the model as it stands (an in-memory artifact, the reference engine,
// keep_hidden) over calibration sequences, fits the heads in closed form
// (MedusaFit.h), measures their agreement with the model on the held-out
// sequences through the model's own LM head, and stores them as f32 weights.
//===----------------------------------------------------------------------===//
#include "compiler/weights/CalibrationText.h"
#include "compiler/weights/InMemoryModel.h"
#include "compiler/weights/IrAttributes.h"
#include "compiler/weights/WeightStore.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/executor.h"
#include "llmc/tokenizer.h"
#include "passes/prune/BlockActivations.h"
#include "passes/prune/MoeWeights.h"
#include "passes/spec/MedusaFit.h"
#include "passes/spec/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

using namespace mlir;

namespace llmc::spec {
#define GEN_PASS_DEF_SPECATTACHPASS
#include "passes/spec/Passes.h.inc"

namespace {

constexpr const char *kHeadsName = "spec.medusa.heads";
constexpr const char *kBiasName = "spec.medusa.bias";

/// What the medusa fit found, for the log, the report and the op's `fit`.
struct FitResult {
  std::vector<MedusaHead> heads;
  std::vector<int32_t> vocab; // the draft vocabulary
  HeadAgreement agreement;
  prune::CalibrationUse use;
  int64_t trainSequences = 0, heldSequences = 0;
  double seconds = 0;
};

class SpecAttachPass : public impl::SpecAttachPassBase<SpecAttachPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    llm::ModelOp model = modelOf(getOperation());
    if (!model) {
      (void)fail("the module has no llm.model");
      return;
    }
    if (failed(checkOptions()))
      return;
    llm::LMHeadOp head = logitsHead(model);
    if (!head) {
      (void)fail("the model's logits do not come from an llm.lm_head");
      return;
    }
    removeEarlier(model);
    OpBuilder b(model.getBodyBlock().getTerminator());
    const Location loc = model.getLoc();
    const int64_t maxDraft = draft > 0 ? int64_t(draft) : (method_ == llm::SpecMethod::Medusa
                                                               ? int64_t(heads)
                                                               : int64_t(4));
    if (method_ == llm::SpecMethod::Ngram) {
      llm::SpeculateOp::create(b, loc, method_, Value(), Value(), Value(), maxDraft, ngram,
                               DenseI32ArrayAttr(), DictionaryAttr(), DenseI64ArrayAttr());
      ProgressLog(getOperation()) << "spec-attach ngram: prompt lookup, suffixes of up to "
                                  << ngram << " tokens, drafts of up to " << maxDraft << "\n";
      return;
    }
    if (method_ == llm::SpecMethod::Self) {
      attachSelf(b, loc, model, maxDraft);
      return;
    }
    try {
      WeightStore store(getOperation());
      if (!store.hasData()) {
        (void)fail("method=medusa needs the weights in the IR (llmc compile)");
        return;
      }
      const FitResult fit = fitHeads(store, model, head);
      printFit(fit);
      if (!report.empty() && failed(writeReport(fit)))
        return;
      attachHeads(b, loc, head, fit, maxDraft);
    } catch (const std::exception &e) {
      (void)fail(e.what());
    }
  }

private:
  llm::SpecMethod method_ = llm::SpecMethod::Ngram;

  /// method=self: the blocks from skip=, else from llm-prune-depth's
  /// dry-run choice on the model; the op verifies them.
  void attachSelf(OpBuilder &b, Location loc, llm::ModelOp model, int64_t maxDraft) {
    std::vector<int64_t> blocks(skip.begin(), skip.end());
    std::string from = "skip=";
    if (blocks.empty()) {
      auto chosen = model->getAttrOfType<DenseI64ArrayAttr>(prune::kDepthChoiceAttr);
      if (!chosen || chosen.empty()) {
        (void)fail("method=self needs the blocks its drafter skips: skip=a,b,... or a "
                   "preceding llm-prune-depth{method=... drop=N dry-run=true}");
        return;
      }
      blocks.assign(chosen.asArrayRef().begin(), chosen.asArrayRef().end());
      from = "llm-prune-depth's choice";
    }
    std::sort(blocks.begin(), blocks.end());
    auto op = llm::SpeculateOp::create(b, loc, method_, Value(), Value(), Value(), maxDraft, ngram,
                                       DenseI32ArrayAttr(), DictionaryAttr(),
                                       b.getDenseI64ArrayAttr(blocks));
    if (failed(op.verify())) {
      op.erase();
      (void)fail("the blocks to skip do not fit the model");
      return;
    }
    std::string list;
    for (int64_t x : blocks)
      list += (list.empty() ? "" : ",") + std::to_string(x);
    ProgressLog(getOperation()) << "spec-attach self: the drafter skips blocks " << list << " ("
                                << from << "), drafts of up to " << maxDraft << "\n";
  }

  LogicalResult fail(const Twine &msg) {
    getOperation().emitError() << "llm-spec-attach: " << msg;
    signalPassFailure();
    return failure();
  }

  LogicalResult checkOptions() {
    if (method.empty())
      return fail("option 'method' is required (ngram, medusa or self)");
    auto m = llm::symbolizeSpecMethod(method);
    if (!m)
      return fail("unknown method '" + method + "' (option 'method': ngram, medusa or self)");
    if (!skip.empty() && *m != llm::SpecMethod::Self)
      return fail("skip= belongs to method=self");
    method_ = *m;
    if (heads < 1 || heads > 8)
      return fail("heads must be in [1, 8]");
    if (draft < 0 || draft > 64)
      return fail("draft must be in [0, 64] (0: the default)");
    if (method_ == llm::SpecMethod::Medusa && draft > heads)
      return fail("draft " + std::to_string(draft) + " exceeds the " + std::to_string(heads) +
                  " heads");
    if (ngram < 1 || ngram > 16)
      return fail("ngram must be in [1, 16]");
    if (tree < 0 || tree > 64)
      return fail("tree must be in [0, 64] (0: chains)");
    if (tree > 0 && method_ != llm::SpecMethod::Medusa)
      return fail("tree= belongs to method=medusa");
    if (draftVocab < 1)
      return fail("draft-vocab must be >= 1");
    if (!(ridge > 0.0))
      return fail("ridge must be > 0");
    if (!(holdout > 0.0 && holdout <= 0.5))
      return fail("holdout must be in (0, 0.5]");
    if (calibSeq < heads + 2)
      return fail("calib-seq must be at least heads + 2");
    if (calibTokens < 2 * calibSeq)
      return fail("calib-tokens must cover at least two sequences of calib-seq (one is held "
                  "out)");
    return success();
  }

  /// The lm_head whose result llm.return gives.
  static llm::LMHeadOp logitsHead(llm::ModelOp model) {
    auto ret = cast<llm::ReturnOp>(model.getBodyBlock().getTerminator());
    return ret.getLogits().getDefiningOp<llm::LMHeadOp>();
  }

  /// Any earlier drafter goes, with the weights nothing else reads.
  static void removeEarlier(llm::ModelOp model) {
    for (llm::SpeculateOp sp : llvm::to_vector(model.getBodyBlock().getOps<llm::SpeculateOp>())) {
      SmallVector<Value> weights;
      if (sp.getHeads())
        weights = {sp.getHeads(), sp.getBias()};
      sp.erase();
      for (Value w : weights)
        if (w.use_empty())
          if (Operation *def = w.getDefiningOp())
            def->erase();
    }
  }

  /// The embedding table and LM head weights of the model.
  static std::pair<Value, Value> embeddingAndHead(llm::ModelOp model, llm::LMHeadOp head) {
    Value table;
    model.walk([&](llm::EmbedOp e) { table = e.getTable(); });
    if (!table)
      throw std::runtime_error("the model has no llm.embed");
    return {table, head.getWeight()};
  }

  /// Every calibration sequence's final hidden states, token embeddings
  /// and tokens (the model as it stands, reference engine).
  std::vector<HiddenSequence> captureSequences(Executor &ex, const WeightStore &store,
                                               Value table,
                                               const std::vector<std::vector<int32_t>> &pieces,
                                               prune::CalibrationUse &use) {
    std::vector<HiddenSequence> seqs;
    auto said = std::chrono::steady_clock::now(); // progress at most every 5 s
    for (const std::vector<int32_t> &piece : pieces) {
      if (std::chrono::steady_clock::now() - said > std::chrono::seconds(5)) {
        ProgressLog(getOperation()) << "spec-attach medusa: hidden states of calibration "
                                    << "sequence " << (seqs.size() + 1) << " of "
                                    << pieces.size() << "\n";
        said = std::chrono::steady_clock::now();
      }
      HiddenSequence s;
      s.tokens = piece;
      ex.reset();
      (void)ex.forward(s.tokens);
      const int64_t D = ex.hiddenSize(), T = int64_t(s.tokens.size());
      s.hidden = Eigen::Map<const RowMatrix>(ex.hidden().data(), T, D);
      s.embedding.resize(T, D);
      for (int64_t t = 0; t < T; ++t)
        s.embedding.row(t) = prune::weightRows(store, table, s.tokens[size_t(t)], 1);
      use.tokens += T;
      ++use.sequences;
      seqs.push_back(std::move(s));
    }
    if (seqs.size() < 2)
      throw std::runtime_error("the calibration text gives " + std::to_string(seqs.size()) +
                               " sequence(s); at least 2 are needed (one is held out)");
    return seqs;
  }

  /// The calibration sequences: a text (or a flat .ids stream) cut into
  /// pieces of calib-seq tokens; a .ids file whose lines are sequences
  /// (e.g. prompts with the model's own answers) one piece per line (cut
  /// where longer); calib-tokens in all at most, pieces too short for the
  /// heads dropped.
  std::vector<std::vector<int32_t>> calibrationSequences(const WeightStore &store,
                                                         prune::CalibrationUse &use) {
    std::vector<std::vector<int32_t>> lines;
    if (isTokenIdFile(calib)) {
      use.path = calib;
      std::ifstream in(use.path, std::ios::binary);
      if (!in)
        throw std::runtime_error(use.path + ": cannot read the calibration file");
      std::stringstream text;
      text << in.rdbuf();
      lines = readTokenIdLines(text.str(), use.path, store.vocabSize());
    } else {
      lines.push_back(prune::calibrationIds(store, calib, calibTokens, use));
    }
    std::vector<std::vector<int32_t>> pieces;
    int64_t total = 0;
    for (const std::vector<int32_t> &line : lines)
      for (size_t at = 0; at < line.size() && total < calibTokens; at += size_t(calibSeq)) {
        const size_t end = std::min({line.size(), at + size_t(calibSeq),
                                     at + size_t(calibTokens - total)});
        if (end - at < size_t(heads) + 2)
          continue;
        pieces.emplace_back(line.begin() + long(at), line.begin() + long(end));
        total += int64_t(end - at);
      }
    return pieces;
  }

  FitResult fitHeads(const WeightStore &store, llm::ModelOp model, llm::LMHeadOp head) {
    const auto t0 = std::chrono::steady_clock::now();
    FitResult r;
    const auto [table, lmWeight] = embeddingAndHead(model, head);
    const std::vector<std::vector<int32_t>> pieces = calibrationSequences(store, r.use);
    std::unique_ptr<Artifact> art = buildInMemoryArtifact(getOperation(), store);
    ExecutorOptions o;
    o.engine = Engine::Reference;
    o.max_context = calibSeq;
    o.keep_hidden = true;
    Executor ex(*art, o);
    const std::vector<HiddenSequence> seqs = captureSequences(ex, store, table, pieces, r.use);
    r.heldSequences = std::clamp<int64_t>(int64_t(double(seqs.size()) * holdout + 0.5), 1,
                                          int64_t(seqs.size()) - 1);
    r.trainSequences = int64_t(seqs.size()) - r.heldSequences;
    const std::vector<HiddenSequence> train(seqs.begin(), seqs.begin() + r.trainSequences);
    const std::vector<HiddenSequence> held(seqs.begin() + r.trainSequences, seqs.end());
    r.heads = fitMedusaHeads(train, held, heads, ridge);
    r.vocab = draftVocabulary(train, draftVocab);
    RowMatrix vocabRows(int64_t(r.vocab.size()), ex.hiddenSize());
    for (size_t i = 0; i < r.vocab.size(); ++i)
      vocabRows.row(int64_t(i)) = prune::weightRows(store, lmWeight, r.vocab[i], 1);
    std::vector<float> logits;
    auto modelChoice = [&](const float *rows, int64_t n, std::vector<int32_t> &out) {
      out.resize(size_t(n));
      constexpr int64_t kChunk = 64; // rows per LM-head product
      for (int64_t r0 = 0; r0 < n; r0 += kChunk) {
        const int64_t m = std::min(kChunk, n - r0);
        ex.lmHead(rows + r0 * ex.hiddenSize(), m, logits);
        const int64_t V = int64_t(logits.size()) / m;
        for (int64_t i = 0; i < m; ++i) {
          const float *row = logits.data() + i * V;
          out[size_t(r0 + i)] = int32_t(std::max_element(row, row + V) - row);
        }
      }
    };
    auto draftChoice = [&](const float *rows, int64_t n, std::vector<int32_t> &out) {
      const RowMatrix l = Eigen::Map<const RowMatrix>(rows, n, vocabRows.cols()) *
                          vocabRows.transpose();
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        Eigen::Index best = 0;
        l.row(i).maxCoeff(&best);
        out[size_t(i)] = r.vocab[size_t(best)];
      }
    };
    auto embed = [&](int32_t token, float *out) {
      Eigen::Map<Eigen::RowVectorXf>(out, ex.hiddenSize()) =
          prune::weightRows(store, table, token, 1);
    };
    r.agreement = measureAgreement(held, r.heads, modelChoice, draftChoice, r.vocab, embed);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  nlohmann::json fitJson(const FitResult &f) const {
    nlohmann::json lambdas = nlohmann::json::array(), mse = nlohmann::json::array(),
                   copy = nlohmann::json::array();
    for (const MedusaHead &h : f.heads) {
      lambdas.push_back(h.lambda);
      mse.push_back(h.heldMse);
      copy.push_back(h.heldMseCopy);
    }
    return {{"calibration", {{"path", f.use.path}, {"tokens", f.use.tokens},
                             {"sequences", f.use.sequences},
                             {"held_out_sequences", f.heldSequences}}},
            {"ridge", ridge.getValue()},
            {"lambda", lambdas},
            {"held_out_mse", mse},
            {"held_out_mse_copy", copy},
            {"held_out_positions", f.agreement.positions},
            {"draft_vocab_size", int64_t(f.vocab.size())},
            {"draft_vocab_coverage", f.agreement.vocabCoverage},
            {"top1", f.agreement.top1},
            {"chain", f.agreement.chain},
            {"predicted_accepted_length", f.agreement.meanAccepted},
            {"seconds", f.seconds}};
  }

  void printFit(const FitResult &f) {
    ProgressLog log(getOperation());
    log << "spec-attach medusa: " << f.heads.size() << " heads fitted on " << f.use.tokens
        << " calibration tokens of " << f.use.path << " (" << f.use.sequences
        << " sequences, " << f.heldSequences << " held out: "
        << f.agreement.positions << " positions) in " << llvm::format("%.1f", f.seconds) << " s\n";
    log << "  draft vocabulary: " << f.vocab.size() << " tokens, "
        << llvm::format("%.3f", f.agreement.vocabCoverage) << " of the model's held-out choices\n";
    for (size_t k = 0; k < f.heads.size(); ++k)
      log << "  head " << (k + 1) << " (token t+" << (k + 2) << "): held-out top-1 "
          << llvm::format("%.3f", f.agreement.top1[k]) << ", chain "
          << llvm::format("%.3f", f.agreement.chain[k]) << ", mse "
          << llvm::format("%.4g", f.heads[k].heldMse) << " (copying h_t: "
          << llvm::format("%.4g", f.heads[k].heldMseCopy) << ")\n";
    log << "predicted mean accepted length " << llvm::format("%.2f", f.agreement.meanAccepted)
        << " tokens per pass (where the held-out text is the model's own choice)\n";
  }

  LogicalResult writeReport(const FitResult &f) {
    nlohmann::json j = fitJson(f);
    j["method"] = method.getValue();
    j["heads"] = heads.getValue();
    const std::string tmp = report + ".tmp";
    {
      std::ofstream out(tmp);
      out << j.dump(1) << "\n";
      if (!out)
        return fail("cannot write report '" + report + "'");
    }
    if (std::rename(tmp.c_str(), report.c_str()) != 0)
      return fail("cannot write report '" + report + "'");
    return success();
  }

  void attachHeads(OpBuilder &b, Location loc, llm::LMHeadOp head, const FitResult &f,
                   int64_t maxDraft) {
    const int64_t K = int64_t(f.heads.size()), D = f.heads.front().w.rows();
    std::vector<float> w, bias;
    w.reserve(size_t(K * D * D));
    for (const MedusaHead &h : f.heads) {
      w.insert(w.end(), h.w.data(), h.w.data() + D * 2 * D); // row-major [D, 2D]
      bias.insert(bias.end(), h.b.begin(), h.b.end());
    }
    const nlohmann::json info = {{"method", "medusa"}, {"fit", "ridge"},
                                 {"calibration_tokens", f.use.tokens}};
    auto wOp = prune::createF32Weight(b, loc, kHeadsName, {K, D, 2 * D}, w, info);
    auto bOp = prune::createF32Weight(b, loc, kBiasName, {K, D}, bias, info);
    auto fitAttr = cast<DictionaryAttr>(jsonToAttribute(b, fitJson(f)));
    llm::SpeculateOp::create(b, loc, method_, head.getX(), wOp.getResult(), bOp.getResult(),
                             maxDraft, ngram, b.getDenseI32ArrayAttr(f.vocab), fitAttr,
                             DenseI64ArrayAttr(), tree);
  }
};

} // namespace
} // namespace llmc::spec
