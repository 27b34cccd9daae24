//===- QuantizeHbq.cpp - llm-quantize method=hbq -------------------------===//
// HBQ is data-free: every pending target is loaded as f32, each row is
// quantized on its own by the runtime's hbqQuantizeRow (llmc/format/hbq.h:
// per L1 block an E5M3 scale, per quarter block the best significand of the
// chosen L2 table) and the rows are written in the context's hbq format, no
// side data. The manifest records the table option and, for mix, the share
// of L1 blocks that picked FP-10.
//===----------------------------------------------------------------------===//
#include "passes/quant/FamilyMethods.h"
#include "llmc/format/hbq.h"
#include <chrono>
#include <stdexcept>

namespace llmc::quant {

void hbqAll(QuantizeContext &ctx, const HbqPassOptions &o) {
  const auto spec = hbqSpec(ctx.format());
  if (!spec)
    throw std::runtime_error("hbq: the context's format " + std::string(dtypeName(ctx.format())) +
                             " is not an hbq type");
  const auto table = hbqTableFromName(o.table);
  if (!table)
    throw std::runtime_error("hbq: table '" + o.table + "' (expected mix, fp1, fp10 or int)");
  for (const std::string &name : ctx.targets()) {
    if (!ctx.pending(name))
      continue;
    auto t0 = std::chrono::steady_clock::now();
    FloatWeight w = ctx.load(name);
    if (w.cols % spec->block != 0)
      throw std::runtime_error("hbq: weight '" + name + "' has rows of " +
                               std::to_string(w.cols) + " weights, not a multiple of the block " +
                               std::to_string(spec->block));
    const int64_t rowBytes = llmc::rowBytes(ctx.format(), w.cols);
    std::vector<uint8_t> bytes(size_t(w.rows * rowBytes));
    std::vector<float> back(w.data.size());
    HbqRowStats stats;
    for (int64_t r = 0; r < w.rows; ++r) {
      const float *src = w.data.data() + r * w.cols;
      uint8_t *dst = bytes.data() + r * rowBytes;
      try {
        hbqQuantizeRow(*spec, *table, src, dst, w.cols, &stats);
      } catch (const std::exception &e) {
        throw std::runtime_error("hbq: weight '" + name + "' row " + std::to_string(r) + ": " +
                                 e.what());
      }
      dequantizeRow(ctx.format(), dst, back.data() + r * w.cols, w.cols);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json extra = {{"table", o.table}};
    if (*table == HbqTable::Mix && stats.blocks > 0)
      extra["fp10_share"] = double(stats.fp10Blocks) / double(stats.blocks);
    ctx.writeFormatted(name, w, back, std::move(bytes), {}, "hbq", secs, std::move(extra));
  }
}

} // namespace llmc::quant
