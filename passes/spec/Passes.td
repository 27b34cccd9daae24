//===- Passes.td - Speculative-decoding passes ------------*- tablegen -*-===//
#ifndef LLMC_PASSES_SPEC_TD
#define LLMC_PASSES_SPEC_TD

include "mlir/Pass/PassBase.td"

def SpecAttachPass : Pass<"llm-spec-attach", "mlir::ModuleOp"> {
  let summary = "Attach a drafter for lossless speculative decoding (llm.speculate)";
  let description = [{
    Adds one `llm.speculate` op to the model (replacing any earlier one and
    its weights), which the artifact's manifest carries as "speculation"
    and `llmc run --speculate auto` uses. The target model is unchanged:
    drafts are only ever verified by it (greedy: exact match; sampling: the
    lossless rejection rule).

    - `ngram`: prompt lookup (the tokens that followed the latest earlier
      occurrence of the context's last `ngram`..1 tokens); no weights.
    - `self`: self-speculation: the drafter is the model's own kernel plan
      without some of its blocks (sharing every weight; its own KV cache),
      drafting greedily one token per step. The blocks are `skip=a,b,...`,
      else those a preceding `llm-prune-depth{... dry-run=true}` chose by
      its scores (it leaves them on the model as `llm.depth_choice`), e.g.
      `llm-prune-depth{method=angular drop=4 dry-run=true},llm-spec-attach{method=self}`.
    - `medusa`: `heads` linear maps fitted in closed form on calibration
      text: head k (1..heads) is the ridge regression of the final hidden
      state h_{t+k} (the LM head's input, after the final norm) on
      [h_t, e(x_{t+k}), 1], e the token embedding and x_{t+k} the token fed
      at t+k (in decoding: the model's own choice for head 1, head k-1's
      draft after that), so that the model's LM head applied to the output
      predicts token t+k+1 (Medusa-1 with the backbone and LM head frozen,
      the residual block replaced by a least-squares linear map that also
      sees the previous token, as Hydra's sequential heads do). The heads
      draft from the `draft-vocab` tokens most frequent in the calibration
      text (the runtime gathers their LM-head rows in f32). The ridge weight
      is chosen per head from `ridge` x {0.1, 1, 10} x the mean eigenvalue
      by held-out squared error. The last `holdout` share of the
      calibration sequences is held out: each head's top-1 agreement with
      the model's own next-token choice there, the draft vocabulary's
      coverage of those choices, the chain acceptance as decoding runs it
      (counted where the text is the model's own choice) and the mean
      accepted length that predicts are printed, written to `report=FILE`
      and recorded in the op's `fit`.
    Calibration: the first `calib-tokens` tokens of `calib` (default
    data/calib/default.txt) in sequences of `calib-seq`; a `.ids` file
    holds token ids, one sequence per line (e.g. chat prompts with the
    model's own answers: `llmc generate --chat --prompt-ids`, see
    bench/speculative.py), cut where longer than `calib-seq`. The model as
    it stands in the pipeline runs them (attach after quantizing to fit the
    heads to the quantized model).
    `draft` is the default draft length (0: `heads` for medusa, 4 for
    ngram).

    ```mlir
    // llm-spec-attach{method=medusa heads=2}
    %h = llm.weight "spec.medusa.heads" {...} : tensor<2x64x128xf32>
    %b = llm.weight "spec.medusa.bias" {...} : tensor<2x64xf32>
    llm.speculate medusa(%hn : tensor<?x64xf32>) heads(%h, %b : tensor<2x64x128xf32>, tensor<2x64xf32>) {draft_vocab = array<i32: ...>, fit = {...}, max_draft = 2 : i64}
    ```
  }];
  let options = [
    Option<"method", "method", "std::string", "\"\"", "ngram, medusa or self">,
    ListOption<"skip", "skip", "int64_t", "self: the blocks the drafter skips (default: llm-prune-depth{dry-run=true}'s choice)">,
    Option<"heads", "heads", "int64_t", "4", "medusa: heads (tokens t+2..t+heads+1), in [1, 8]">,
    Option<"draft", "draft", "int64_t", "0", "default draft length (0: heads for medusa, 4 for ngram)">,
    Option<"ngram", "ngram", "int64_t", "3", "ngram: longest context suffix matched, in [1, 16]">,
    Option<"tree", "tree", "int64_t", "0", "medusa: draft trees of up to this many tokens, verified in one pass with tree attention (0: chains), in [0, 64]">,
    Option<"draftVocab", "draft-vocab", "int64_t", "4096", "medusa: the tokens heads may draft (the most frequent in the calibration text)">,
    Option<"ridge", "ridge", "double", "0.01", "medusa: ridge weight x the mean eigenvalue (> 0; x 0.1, 1, 10 tried)">,
    Option<"holdout", "holdout", "double", "0.1", "medusa: share of calibration sequences held out, in (0, 0.5]">,
    Option<"calib", "calib", "std::string", "\"\"", "calibration text or a .ids file (default: data/calib/default.txt)">,
    Option<"calibTokens", "calib-tokens", "int64_t", "8192", "calibration tokens">,
    Option<"calibSeq", "calib-seq", "int64_t", "512", "tokens per calibration sequence">,
    Option<"report", "report", "std::string", "\"\"", "write the fit to this JSON file">,
  ];
}

#endif // LLMC_PASSES_SPEC_TD
