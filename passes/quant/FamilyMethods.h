//===- FamilyMethods.h - llm-quantize methods with their own formats -*- C++ -*-===//
// AAAC (codebooks), QTEA (ternary + salient residuals) and HBQ (hierarchical
// block FP) write their own storage formats (llmc/dtype.h families) through
// QuantizeContext::writeFormatted, into the context whose format() is
// theirs. AAAC and QTEA calibrate block by block like GPTQ (sites carry
// Hessians); their *Remaining functions handle the weights no block reads
// (embedding, LM head) without data. HBQ is data-free.
//===----------------------------------------------------------------------===//
#pragma once
#include "passes/quant/CalibrationSites.h"
#include "passes/quant/QuantizeContext.h"
#include <memory>
#include <string>
#include <vector>

namespace llmc::quant {

struct AaacPassOptions {
  int iters = 15; // assignment / weighted k-means rounds
};
void aaacBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const AaacPassOptions &o, int64_t block);
void aaacRemaining(QuantizeContext &ctx, const AaacPassOptions &o);

struct QteaPassOptions {
  double deadzone = 0.96; // initial dead zone, fraction of mean|w - beta|
  double decay = 1.0;     // error-feedback decay lambda
  double damp = 0.007;    // Hessian dampening, fraction of mean(diag H)
};
void qteaBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const QteaPassOptions &o, int64_t block);
void qteaRemaining(QuantizeContext &ctx, const QteaPassOptions &o);

struct HbqPassOptions {
  std::string table = "mix"; // L2 scale table: mix (fp1 or fp10 per block), fp1, fp10, int
};
void hbqAll(QuantizeContext &ctx, const HbqPassOptions &o);

} // namespace llmc::quant
