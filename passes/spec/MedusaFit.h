//===- MedusaFit.h - Medusa heads in closed form ------------------*- C++ -*-===//
// Head k (1..K) of llm-spec-attach{method=medusa}: the ridge regression of
// the final hidden state h_{t+k} on [h_t, e(x_{t+k}), 1] over calibration
// sequences (e: the token embedding; x_{t+k} is the token fed at t+k: the
// model's own choice for k = 1, the previous head's draft after that), so
// that the model's LM head applied to the head's output predicts token
// t+k+1. Fitted on the training sequences, the ridge weight chosen by
// squared error on the held-out ones, where agreement with the model's
// own choices is measured too.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/prune/ExpertScores.h" // RowMatrix
#include <cstdint>
#include <functional>
#include <vector>

namespace llmc::spec {

using prune::RowMatrix;

/// One calibration sequence as the fit sees it.
struct HiddenSequence {
  RowMatrix hidden;            // [T, D]: final hidden state after each token
  RowMatrix embedding;         // [T, D]: the embedding of each token
  std::vector<int32_t> tokens; // [T]
};

struct MedusaHead {
  RowMatrix w;          // [D, 2D]: y = w [h; e] + b
  std::vector<float> b; // [D]
  double lambda = 0;    // the ridge weight chosen
  double heldMse = 0;   // held-out mean squared error per row of y
  double heldMseCopy = 0; // the same for y = h (the last state copied), for scale
  int64_t trainRows = 0;
};

/// Fits heads 1..K on `train` with the ridge weight ridge x {0.1, 1, 10} x
/// the mean eigenvalue of the Gram matrix that has the least squared error
/// on `held`. Throws std::invalid_argument when a head has fewer training
/// rows than unknowns or no held-out row.
std::vector<MedusaHead> fitMedusaHeads(const std::vector<HiddenSequence> &train,
                                       const std::vector<HiddenSequence> &held, int64_t heads,
                                       double ridge);

/// The `size` most frequent tokens of the sequences (ties: the smaller
/// id), in increasing id order: the tokens heads may draft.
std::vector<int32_t> draftVocabulary(const std::vector<HiddenSequence> &seqs, int64_t size);

/// For rows [n, D] of final hidden states: the argmax of the model's
/// logits for each (its next-token choice), into `ids`.
using ArgmaxFn = std::function<void(const float *rows, int64_t n, std::vector<int32_t> &ids)>;

struct HeadAgreement {
  int64_t positions = 0;     // held-out positions t with t + K < T
  double vocabCoverage = 0;  // share of the model's choices inside the draft vocabulary
  std::vector<double> top1;  // head k's draft (on the text's tokens) = the model's choice
  std::vector<double> chain; // heads 1..k all agree, each fed the previous head's draft
  /// 1 + sum of chain: tokens per target pass a chain of drafts would give
  /// where the text is what the model would have written.
  double meanAccepted = 0;
};

/// Each head's agreement with the model on `held`: the model's choices come
/// from `model`, the heads' drafts from `draft` (the LM head restricted to
/// the draft vocabulary, whose ids `vocab` lists). `chain` runs the heads
/// as the runtime does (head k fed head k-1's draft, head 1 the model's
/// choice) and counts position t while every draft equals the model's
/// choice and the text agrees with the model (so h_t's context is the one
/// a decode would have).
HeadAgreement measureAgreement(const std::vector<HiddenSequence> &held,
                               const std::vector<MedusaHead> &heads, const ArgmaxFn &model,
                               const ArgmaxFn &draft, const std::vector<int32_t> &vocab,
                               const std::function<void(int32_t, float *)> &embed);

} // namespace llmc::spec
