//===- KernelPlan.cpp - Parse, check and run a kernel plan ----------------===//
#include "KernelPlan.h"
#include "../artifact/JsonFields.h"
#include "Matmul.h"
#include "../kernels/dot_int8.h"
#include "../kernels/rows8.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>
#include <sys/mman.h>

namespace llmc {

namespace {

PlanKernel kernelOf(const std::string &k, const std::string &ctx) {
  static const std::pair<const char *, PlanKernel> kinds[] = {
      {"embed", PlanKernel::Embed},
      {"norm_matmul", PlanKernel::NormMatmul},
      {"norm_gated_matmul", PlanKernel::NormGatedMatmul},
      {"matmul_add", PlanKernel::MatmulAdd},
      {"norm_moe", PlanKernel::NormMoe},
      {"rope_kv_append", PlanKernel::RopeKvAppend},
      {"attend", PlanKernel::Attend},
      {"rms_norm", PlanKernel::RmsNorm},
      {"add", PlanKernel::Add}};
  for (const auto &[name, kind] : kinds)
    if (k == name)
      return kind;
  throw std::runtime_error(ctx + ": unknown kernel '" + k + "'");
}

PlanSlot slotOf(const nlohmann::json &j, const std::string &ctx) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_integer() || !j[1].is_number_integer())
    throw std::runtime_error(ctx + ": a slot must be [offset, width]");
  PlanSlot s{j[0].get<int64_t>(), j[1].get<int64_t>()};
  if (s.width <= 0 || s.offset < -1)
    throw std::runtime_error(ctx + ": bad slot [" + std::to_string(s.offset) + ", " +
                             std::to_string(s.width) + "]");
  return s;
}

void need(bool ok, const std::string &ctx, const std::string &what) {
  if (!ok)
    throw std::runtime_error(ctx + ": " + what);
}

/// Throws unless the step has `in` input slots and `w` weights (size_t(-1):
/// 1 to 8 weights).
void needArity(const PlanStep &s, size_t in, size_t w) {
  const std::string &ctx = s.desc;
  need(s.in.size() == in, ctx, "takes " + std::to_string(in) + " input slot(s)");
  need(s.w.size() == w || (w == size_t(-1) && !s.w.empty() && s.w.size() <= 8), ctx,
       w == size_t(-1) ? "takes 1 to 8 weights" : "takes " + std::to_string(w) + " weight(s)");
}

bool isProduct(PlanKernel k) {
  return k == PlanKernel::NormMatmul || k == PlanKernel::NormGatedMatmul ||
         k == PlanKernel::MatmulAdd || k == PlanKernel::NormMoe;
}

/// Step `where`'s description and kernel.
PlanStep startStep(const nlohmann::json &sj, const std::string &where) {
  PlanStep s;
  const std::string kind = jsonf::getString(sj, "kernel", where);
  s.desc = where + " (" + kind + ")";
  s.kernel = kernelOf(kind, s.desc);
  return s;
}

/// The step's input slots (each written by an earlier step) and output slot
/// (the logits for the `last` step only), all inside the arena.
void readStepSlots(PlanStep &s, const nlohmann::json &sj,
                   const std::set<std::pair<int64_t, int64_t>> &written, int64_t arenaPerToken,
                   bool last) {
  const std::string &ctx = s.desc;
  if (const nlohmann::json *in = jsonf::find(sj, "in")) {
    need(in->is_array(), ctx, "'in' must be an array of slots");
    for (const nlohmann::json &x : *in) {
      PlanSlot slot = slotOf(x, ctx);
      need(slot.offset >= 0 && written.count({slot.offset, slot.width}), ctx,
           "input slot [" + std::to_string(slot.offset) + ", " + std::to_string(slot.width) +
               "] was not written by an earlier step");
      s.in.push_back(slot);
    }
  }
  s.out = slotOf(jsonf::require(sj, "out", ctx), ctx);
  need((s.out.offset < 0) == last, ctx,
       last ? "the last step must write the logits (offset -1)"
            : "only the last step may write the logits");
  need(s.out.offset < 0 || s.out.offset + s.out.width <= arenaPerToken, ctx,
       "output slot exceeds the arena");
  for (const PlanSlot &x : s.in)
    need(x.offset + x.width <= arenaPerToken, ctx, "input slot exceeds the arena");
}

/// The step's weights (bind.matrix) and its optional RMSNorm weight
/// (bind.vector) with the norm's eps from `attrs`.
void readStepTensors(PlanStep &s, const nlohmann::json &sj, const nlohmann::json &attrs,
                     const PlanBindings &bind) {
  const std::string &ctx = s.desc;
  if (const nlohmann::json *w = jsonf::find(sj, "weights")) {
    need(w->is_array(), ctx, "'weights' must be an array of tensor names");
    for (const nlohmann::json &n : *w)
      need(n.is_string(), ctx, "'weights' must be an array of tensor names");
    if (s.kernel == PlanKernel::NormMoe) {
      // The router, then each expert's gate, up and down slabs.
      need(w->size() == 4 && bind.slabs, ctx, "takes 4 weights (router, gate, up, down)");
      s.w.push_back(bind.matrix((*w)[0].get<std::string>(), ctx));
      std::vector<WeightMatrix> slabs[3];
      for (int k = 0; k < 3; ++k)
        slabs[k] = bind.slabs((*w)[k + 1].get<std::string>(), ctx);
      need(slabs[0].size() == slabs[1].size() && slabs[0].size() == slabs[2].size(), ctx,
           "gate, up and down have different numbers of experts");
      for (size_t e = 0; e < slabs[0].size(); ++e)
        for (int k = 0; k < 3; ++k)
          s.w.push_back(slabs[k][e]);
    } else {
      for (const nlohmann::json &n : *w)
        s.w.push_back(bind.matrix(n.get<std::string>(), ctx));
    }
  }
  if (const nlohmann::json *n = jsonf::find(sj, "norm")) {
    need(n->is_string(), ctx, "'norm' must name a tensor");
    s.norm = bind.vector(n->get<std::string>(), ctx);
    double eps = jsonf::getDouble(attrs, "eps", ctx);
    need(eps >= 0, ctx, "eps must be >= 0");
    s.eps = float(eps);
  }
}

/// A rope_kv_append or attend step: head counts, its KV cache (bind.cache)
/// and, for RoPE, the frequencies and style.
void readAttentionStep(PlanStep &s, const nlohmann::json &attrs, const PlanBindings &bind) {
  using jsonf::getInt;
  const std::string &ctx = s.desc;
  const int64_t inW = s.in.empty() ? 0 : s.in[0].width;
  needArity(s, 1, 0);
  s.heads = getInt(attrs, "num_heads", ctx);
  s.kvHeads = getInt(attrs, "num_kv_heads", ctx);
  s.headDim = getInt(attrs, "head_dim", ctx);
  need(s.heads > 0 && s.kvHeads > 0 && s.headDim > 0 && s.heads % s.kvHeads == 0 &&
           s.headDim % 2 == 0, ctx, "bad head counts");
  const int64_t qd = s.heads * s.headDim;
  need(s.out.width == qd, ctx, "output width is not num_heads * head_dim");
  s.cache = bind.cache(getInt(attrs, "layer", ctx), ctx);
  if (s.kernel == PlanKernel::RopeKvAppend) {
    need(inW == qd + 2 * s.kvHeads * s.headDim, ctx, "input width is not q + k + v");
    double theta = jsonf::getDouble(attrs, "rope_theta", ctx);
    need(theta > 0, ctx, "rope_theta must be positive");
    s.invFreq = ops::ropeFrequencies(theta, s.headDim);
    s.theta = theta;
    s.rope = jsonf::getEnum<RopeStyle>(attrs, "rope_style", ctx, std::nullopt, parseRopeStyle,
                                       spellingsRopeStyle());
  } else {
    need(inW == qd, ctx, "input width is not num_heads * head_dim");
  }
}

/// Checks the step's slots, weights and norm against its kernel and reads
/// the kernel's attributes.
void checkStepKernel(PlanStep &s, const nlohmann::json &attrs, const PlanBindings &bind) {
  const std::string &ctx = s.desc;
  const int64_t inW = s.in.empty() ? 0 : s.in[0].width;
  switch (s.kernel) {
  case PlanKernel::Embed:
    needArity(s, 0, 1);
    need(s.w[0].cols == s.out.width, ctx, "table width differs from the output width");
    break;
  case PlanKernel::NormMatmul: {
    needArity(s, 1, size_t(-1));
    int64_t rows = 0;
    for (const WeightMatrix &w : s.w) {
      need(w.cols == inW, ctx, "a weight's columns differ from the input width");
      rows += w.rows;
    }
    need(rows == s.out.width, ctx, "output width is not the weights' total rows");
    need(s.norm.empty() || int64_t(s.norm.size()) == inW, ctx, "norm size differs from the input width");
    break;
  }
  case PlanKernel::NormGatedMatmul: {
    needArity(s, 1, 2);
    need(s.w[0].cols == inW && s.w[1].cols == inW && s.w[0].rows == s.out.width &&
             s.w[1].rows == s.out.width, ctx, "gate/up shapes do not match the slots");
    need(s.norm.empty() || int64_t(s.norm.size()) == inW, ctx, "norm size differs from the input width");
    s.act = jsonf::getEnum<Activation>(attrs, "activation", ctx, std::nullopt, parseActivation,
                                       spellingsActivation());
    break;
  }
  case PlanKernel::MatmulAdd:
    needArity(s, 2, 1);
    need(s.w[0].cols == inW && s.w[0].rows == s.out.width && s.in[1].width == s.out.width, ctx,
         "weight / residual shapes do not match the slots");
    break;
  case PlanKernel::NormMoe:
    need(s.in.size() == 1 || s.in.size() == 2, ctx, "takes 1 or 2 input slots (x, residual)");
    PlanEngine::checkNormMoe(s, attrs);
    break;
  case PlanKernel::RopeKvAppend:
  case PlanKernel::Attend:
    readAttentionStep(s, attrs, bind);
    break;
  case PlanKernel::RmsNorm:
    needArity(s, 1, 0);
    need(!s.norm.empty() && int64_t(s.norm.size()) == inW && s.out.width == inW, ctx,
         "needs a norm of the input width");
    break;
  case PlanKernel::Add:
    needArity(s, 2, 0);
    need(s.in[1].width == inW && s.out.width == inW, ctx, "adds slots of different widths");
    break;
  }
}

/// Whether the step's weight k takes int8 activations: the step's choice,
/// for a format with int8 kernels, except an MoE router (always f32).
bool readsInt8(const PlanStep &s, size_t k) {
  const WeightMatrix &w = s.w[k];
  return s.int8 && !(s.kernel == PlanKernel::NormMoe && k == 0) &&
         (kernels::hasInt8Dot(w.dtype) || w.rows8) && w.cols % kernels::kInt8Block == 0;
}

/// Binds a product step's generated kernels: the matrix-vector ones when
/// every weight has one (and its row-major rows), the int8 eight-row ones
/// per weight. Returns how many of its products run generated code.
int bindGeneratedProducts(PlanStep &s, const codegen::GeneratedKernels &g) {
  int products = 0;
  for (const WeightMatrix &w : s.w) {
    s.gen.push_back(g.find(w.dtype, w.cols));
    // The eight-row copy's layout (grouped integers are repacked into
    // Q4_0/Q4_1/Q8_0) picks the int8 kernel.
    s.gen8.push_back(w.rows8 ? g.findRows8(w.rows8Type, w.cols) : nullptr);
  }
  // Row-major kernels need every weight's rows as stored.
  if (std::find(s.gen.begin(), s.gen.end(), nullptr) != s.gen.end() ||
      std::any_of(s.w.begin(), s.w.end(), [](const WeightMatrix &w) { return !w.data; }))
    s.gen.clear();
  // A product runs generated code through its int8 kernel when it takes
  // int8 activations, else when the step has a matvec kernel for every
  // weight (decode-sized steps).
  for (size_t k = 0; k < s.w.size(); ++k) {
    const bool int8 = readsInt8(s, k);
    products += int8 ? s.gen8[k] != nullptr : !s.gen.empty();
  }
  if (std::count(s.gen8.begin(), s.gen8.end(), nullptr) == std::ptrdiff_t(s.gen8.size()))
    s.gen8.clear();
  return products;
}

} // namespace

PlanEngine::PlanEngine(const nlohmann::json &plan, const PlanBindings &bind) {
  const std::string top = "kernel_plan";
  int8_ = bind.int8_activations;
  arenaPerToken_ = jsonf::getInt(plan, "arena_floats_per_token", top);
  need(arenaPerToken_ >= 0 && arenaPerToken_ < (int64_t(1) << 32), top,
       "arena_floats_per_token out of range");
  const nlohmann::json *stepsJ = jsonf::find(plan, "steps");
  need(stepsJ && stepsJ->is_array() && !stepsJ->empty(), top, "needs a non-empty 'steps' array");
  std::set<std::pair<int64_t, int64_t>> written; // slots some earlier step wrote
  for (size_t i = 0; i < stepsJ->size(); ++i) {
    const nlohmann::json &sj = (*stepsJ)[i];
    PlanStep s = startStep(sj, top + " step " + std::to_string(i));
    readStepSlots(s, sj, written, arenaPerToken_, i + 1 == stepsJ->size());
    const nlohmann::json attrs = sj.contains("attrs") ? sj["attrs"] : nlohmann::json::object();
    readStepTensors(s, sj, attrs, bind);
    checkStepKernel(s, attrs, bind);
    if (isProduct(s.kernel))
      bindKernelChoice(s, sj, bind);
    if (bind.generated && isProduct(s.kernel))
      generatedProducts_ += bindGeneratedProducts(s, *bind.generated);
    bindGeneratedOps(s, bind.generated);
    if (s.out.offset >= 0)
      written.insert({s.out.offset, s.out.width});
    steps_.push_back(std::move(s));
  }
}

void PlanEngine::bindGeneratedOps(PlanStep &s, const codegen::GeneratedKernels *g) {
  auto count = [&](auto &slot, auto fn) { // fn: null without g
    ++ops_;
    slot = fn;
    generatedOps_ += slot != nullptr;
  };
  const int64_t inW = s.in.empty() ? 0 : s.in[0].width;
  switch (s.kernel) {
  case PlanKernel::Embed: // a table stored packed only is read row by row through loadRow
    count(s.genEmbed, g && s.w[0].data ? g->findEmbed(s.w[0].dtype, s.w[0].cols) : nullptr);
    break;
  case PlanKernel::NormMatmul:
  case PlanKernel::NormGatedMatmul:
  case PlanKernel::NormMoe:
  case PlanKernel::RmsNorm:
    if (!s.norm.empty())
      count(s.genNorm, g ? g->findRmsNorm(inW) : nullptr);
    if (s.kernel == PlanKernel::NormGatedMatmul || s.kernel == PlanKernel::NormMoe)
      count(s.genGate, g ? g->findGate(std::string(spelling(s.act))) : nullptr);
    break;
  case PlanKernel::RopeKvAppend:
    count(s.genRope, g ? g->findRope(s.heads, s.kvHeads, s.headDim, s.theta,
                                     s.rope == RopeStyle::Interleaved)
                       : nullptr);
    break;
  case PlanKernel::Attend:
    count(s.genAttend.flat, g ? g->findAttendF32(s.headDim) : nullptr);
    if (g) { // one op with genAttend.flat
      s.genAttend.rows = g->findAttendF32Rows(s.headDim);
      if (s.kvHeads > 0 && s.heads % s.kvHeads == 0) {
        s.genAttend.group = g->findAttendF32Group(s.headDim, s.heads / s.kvHeads);
        s.genAttend.rowsGroup = g->findAttendF32RowsGroup(s.headDim, s.heads / s.kvHeads);
        s.genAttend.rowsGroupF16 = g->findAttendF16RowsGroup(s.headDim, s.heads / s.kvHeads);
        s.genAttend.rowsGroupQ8 = g->findAttendQ8RowsGroup(s.headDim, s.heads / s.kvHeads);
      }
    }
    break;
  case PlanKernel::Add:
    count(s.genAdd, g ? g->findAdd() : nullptr);
    break;
  case PlanKernel::MatmulAdd: // the residual add is the product's accumulation
    break;
  }
}

/// The step's RMSNorm over `rows` rows of its input width: generated or library.
void PlanEngine::rmsNorm(const PlanStep &s, const float *x, float *y, int64_t rows) {
  if (s.genNorm)
    s.genNorm(x, s.norm.data(), y, rows, s.eps);
  else
    ops::rmsNorm(x, s.norm.data(), y, rows, s.in[0].width, s.eps);
}

RowEpilogue PlanEngine::gateEpilogue(const PlanStep &s, float *g, const float *u, int64_t rows,
                                     int64_t width) {
  return [&s, g, u, rows, width](int64_t r0, int64_t nr) {
    for (int64_t t = 0; t < rows; ++t) {
      if (s.genGate)
        s.genGate(g + t * width + r0, u + t * width + r0, nr);
      else
        ops::gatedActivation(s.act, g + t * width + r0, u + t * width + r0, nr);
    }
  };
}

void PlanEngine::FreeDeleter::operator()(uint8_t *p) const { std::free(p); }

void PlanEngine::bindKernelChoice(PlanStep &s, const nlohmann::json &sj, const PlanBindings &bind) {
  // The compiler's choice (llmk-select-kernels): the activations' precision
  // (exact_activations overrides int8 with f32) and each weight's layout.
  s.int8 = int8_;
  if (const nlohmann::json *a = jsonf::find(sj, "activations")) {
    need(a->is_string() && (*a == "int8" || *a == "f32"), s.desc,
         "'activations' must be \"int8\" or \"f32\"");
    s.int8 = int8_ && *a == "int8";
  }
  const nlohmann::json *layouts = jsonf::find(sj, "layouts");
  // norm_moe names 4 (router, gate, up, down): an expert's slabs share theirs.
  const bool moe = s.kernel == PlanKernel::NormMoe;
  need(!layouts || (layouts->is_array() && layouts->size() == (moe ? 4 : s.w.size())), s.desc,
       "'layouts' must name one layout per weight");
  for (size_t k = 0; k < s.w.size(); ++k) {
    WeightMatrix &w = s.w[k];
    if (layouts) {
      const nlohmann::json &l = (*layouts)[moe && k > 0 ? 1 + (k - 1) % 3 : k];
      need(l.is_string() && (l == "rows8" || l == "row_major"), s.desc,
           "a layout must be \"rows8\" or \"row_major\"");
      // rows8 weights come packed in the artifact (PackedWeights); the
      // runtime repacks nothing.
      need(l == "row_major" || w.rows8, s.desc,
           "a weight the plan reads as rows8 has no packed tensor in the artifact");
      need(l == "rows8" || w.data, s.desc, "a row_major weight has no row-major tensor");
      if (l == "row_major")
        w.rows8 = nullptr;
    } else if (s.int8) {
      packRows8(w, bind); // artifacts from before compile-time packing
    }
    int8Products_ += readsInt8(s, k);
  }
}

void PlanEngine::packRows8(WeightMatrix &w, const PlanBindings &bind) {
  const std::optional<DType> layout = kernels::rows8Layout(w.dtype);
  if (!layout || w.rows % kernels::kRows8 != 0 || w.cols % 32 != 0 ||
      (*layout == w.dtype && w.rowStride != rowBytes(w.dtype, w.cols)))
    return;
  // A layout whose library kernel is the portable one (a build without
  // AVX2) only for a generated kernel: the library's row kernels beat it.
  if (!kernels::hasFastRows8Kernel(*layout) &&
      !(bind.generated && bind.generated->findRows8(*layout, w.cols)))
    return;
  auto it = rows8_.find(w.data);
  if (it == rows8_.end()) {
    const int64_t bytes = w.rows / kernels::kRows8 * kernels::rows8GroupBytes(*layout, w.cols);
    // Large copies on 2 MiB boundaries, marked for transparent huge pages:
    // 512x fewer page faults while packing (and TLB misses while reading).
    const size_t align = bytes >= (int64_t(8) << 20) ? size_t(2) << 20 : 64;
    const size_t size = (size_t(bytes) + align - 1) / align * align;
    auto *p = static_cast<uint8_t *>(std::aligned_alloc(align, size));
    if (!p)
      throw std::bad_alloc();
    if (align > 64)
      ::madvise(p, size, MADV_HUGEPAGE); // advice only: ignored where THP is off
    const int64_t groups = w.rows / kernels::kRows8, gb = kernels::rows8GroupBytes(*layout, w.cols);
    auto pack = [&](int64_t g0, int64_t g1) {
      kernels::packRows8(w.dtype, w.data + g0 * kernels::kRows8 * w.rowStride, w.rowStride,
                         (g1 - g0) * kernels::kRows8, w.cols, p + g0 * gb);
    };
    if (bind.pool)
      bind.pool->parallelFor(0, groups, std::max<int64_t>(1, groups / 64), pack);
    else
      pack(0, groups);
    it = rows8_.emplace(w.data, std::unique_ptr<uint8_t, FreeDeleter>(p)).first;
    rows8Bytes_ += bytes;
    if (bind.release)
      bind.release(w.data, w.rows * w.rowStride);
  }
  w.rows8 = it->second.get();
  w.rows8Type = *layout;
}

MatmulPaths PlanEngine::paths(const PlanStep &s) const {
  MatmulPaths p;
  p.int8 = s.int8;
  p.generated8 = s.gen8.empty() ? nullptr : s.gen8.data();
  p.generated = s.gen.empty() ? nullptr : s.gen.data();
  return p;
}

void PlanEngine::run(ThreadPool &pool, std::vector<kv::LayerCache> &caches,
                     const std::vector<int32_t> &tokens, int64_t pos, bool allLogits,
                     std::vector<float> &logits, std::vector<float> *hidden,
                     const int32_t *treeParent) {
  const PlanSegment one{&caches, tokens.data(), int64_t(tokens.size()), pos, treeParent};
  runBatch(pool, {one}, allLogits, logits, hidden);
}

const WeightMatrix &PlanEngine::lmHeadMatrix() const {
  const PlanStep &s = steps_.back();
  if (s.kernel != PlanKernel::NormMatmul || s.w.size() != 1)
    throw std::runtime_error(s.desc + ": the logits step is not one product (no LM head alone)");
  return s.w[0];
}

const WeightMatrix &PlanEngine::embeddingMatrix() const {
  for (const PlanStep &s : steps_)
    if (s.kernel == PlanKernel::Embed)
      return s.w[0];
  throw std::runtime_error("the kernel plan has no embedding step");
}

void PlanEngine::lmHead(ThreadPool &pool, const float *x, int64_t rows,
                        std::vector<float> &logits) const {
  const PlanStep &s = steps_.back();
  (void)lmHeadMatrix(); // checks it is one product
  logits.resize(size_t(rows * s.out.width));
  products(pool, s, x, rows, logits.data());
}

void PlanEngine::products(ThreadPool &pool, const PlanStep &s, const float *x, int64_t rows,
                          float *out) const {
  const int64_t W = s.out.width;
  MatmulJob jobs[8];
  int64_t col = 0;
  for (size_t k = 0; k < s.w.size(); ++k) {
    jobs[k] = MatmulJob{&s.w[k], out + col, W, nullptr};
    col += s.w[k].rows;
  }
  matmulMany(pool, jobs, int(s.w.size()), x, rows, s.in[0].width, nullptr, paths(s));
}

void PlanEngine::gatherLastRows(const PlanStep &s, const std::vector<PlanSegment> &segments,
                                int64_t R) {
  const int64_t S = int64_t(segments.size());
  if (gather_.size() < size_t(arenaPerToken_ * S))
    gather_.resize(size_t(arenaPerToken_ * S));
  for (const PlanSlot &slot : s.in) {
    int64_t last = -1;
    for (int64_t i = 0; i < S; ++i) {
      last += segments[size_t(i)].n;
      const float *src = arena_.data() + slot.offset * R + last * slot.width;
      std::copy(src, src + slot.width, gather_.data() + slot.offset * S + i * slot.width);
    }
  }
}

void PlanEngine::runBatch(ThreadPool &pool, const std::vector<PlanSegment> &segments,
                          bool allLogits, std::vector<float> &logits,
                          std::vector<float> *hidden) {
  int64_t R = 0;
  for (const PlanSegment &g : segments)
    R += g.n;
  const int64_t S = int64_t(segments.size());
  if (arena_.size() < size_t(arenaPerToken_ * R))
    arena_.resize(size_t(arenaPerToken_ * R)); // grows to the largest step, once
  beginTree(segments, R);
  struct ClearTree { // the tree is this step's only
    const int32_t *&p;
    ~ClearTree() { p = nullptr; }
  } clearTree{treeParent_};
  const int32_t *tokens = segments[0].tokens;
  if (S > 1) { // the embedding reads the tokens of every segment in a row
    batchTokens_.clear();
    for (const PlanSegment &g : segments)
      batchTokens_.insert(batchTokens_.end(), g.tokens, g.tokens + g.n);
    tokens = batchTokens_.data();
  }
  for (const PlanStep &s : steps_) {
    StepIO io{R, 0, R, arena_.data(), nullptr};
    if (s.out.offset < 0) {
      if (hidden) { // every row's final hidden state (the step's norm, if fused)
        const float *x = arena_.data() + s.in[0].offset * R;
        hidden->resize(size_t(R * s.in[0].width));
        if (s.norm.empty())
          std::copy(x, x + R * s.in[0].width, hidden->begin());
        else
          rmsNorm(s, x, hidden->data(), R);
      }
      // The logits: every row, the one segment's last, or each segment's
      // last gathered into rows of their own.
      if (!allLogits && S == 1) {
        io.first = R - 1;
        io.rows = 1;
      } else if (!allLogits) {
        gatherLastRows(s, segments, R);
        io = StepIO{S, 0, S, gather_.data(), nullptr};
      }
      logits.resize(size_t(io.rows * s.out.width));
      io.out = logits.data();
      runStep(pool, segments[0].caches, s, tokens, segments[0].pos, io);
      continue;
    }
    if (s.kernel != PlanKernel::RopeKvAppend && s.kernel != PlanKernel::Attend) {
      io.out = arena_.data() + s.out.offset * R;
      runStep(pool, segments[0].caches, s, tokens, segments[0].pos, io);
      continue;
    }
    // RoPE's K/V rows: one per row of the step, so sequences run at once
    // write apart (sized here, never inside the parallel loop).
    if (s.kernel == PlanKernel::RopeKvAppend &&
        kv_.size() < size_t(R * 2 * s.kvHeads * s.headDim))
      kv_.resize(size_t(R * 2 * s.kvHeads * s.headDim));
    if (S > 1 && R == S) {
      // Decode only: the sequences in parallel, one thread each (the loops
      // inside run inline), rather than each sequence's few heads in turn.
      pool.parallelFor(0, S, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const PlanSegment &g = segments[size_t(i)];
          StepIO one{R, i, 1, arena_.data(), arena_.data() + s.out.offset * R + i * s.out.width};
          runStep(pool, g.caches, s, tokens, g.pos, one);
        }
      });
      continue;
    }
    int64_t r0 = 0; // per sequence: its caches and positions
    for (const PlanSegment &g : segments) {
      io.first = r0;
      io.rows = g.n;
      io.out = arena_.data() + s.out.offset * R + r0 * s.out.width;
      runStep(pool, g.caches, s, tokens, g.pos, io);
      r0 += g.n;
    }
  }
}

void PlanEngine::runStep(ThreadPool &pool, std::vector<kv::LayerCache> *caches,
                         const PlanStep &s, const int32_t *tokens, int64_t pos,
                         const StepIO &io) {
  const int64_t rows = io.rows, W = s.out.width;
  float *out = io.out;
  switch (s.kernel) {
  case PlanKernel::Embed:
    for (int64_t t = io.first; t < io.first + rows; ++t) {
      float *dst = out + (t - io.first) * W;
      if (s.genEmbed)
        s.genEmbed(s.w[0].row(tokens[t]), dst);
      else
        loadRow(s.w[0], tokens[t], dst);
    }
    break;
  case PlanKernel::NormMatmul:
  case PlanKernel::NormGatedMatmul:
    runNormMatmul(pool, s, io);
    break;
  case PlanKernel::NormMoe:
    runNormMoe(pool, s, io);
    break;
  case PlanKernel::MatmulAdd: {
    const float *res = io.in(s, 1);
    if (res != out) // not planned in place: start from the residual
      std::copy(res, res + rows * W, out);
    MatmulJob job{&s.w[0], out, W, nullptr};
    job.accumulate = true;
    matmulMany(pool, &job, 1, io.in(s, 0), rows, s.in[0].width, nullptr, paths(s));
    break;
  }
  case PlanKernel::RopeKvAppend:
    runRopeKvAppend(pool, (*caches)[size_t(s.cache)], s, pos, io);
    break;
  case PlanKernel::Attend: {
    kv::LayerCache &c = (*caches)[size_t(s.cache)];
    if (treeParent_) { // the full policy: nothing to do after the step
      c.attendTree(pool, io.in(s, 0), rows, treeParent_, out, s.genAttend);
      break;
    }
    c.attend(pool, io.in(s, 0), rows, out, s.genAttend);
    c.afterStep(io.in(s, 0), rows, pos);
    break;
  }
  case PlanKernel::RmsNorm:
    rmsNorm(s, io.in(s, 0), out, rows);
    break;
  case PlanKernel::Add: {
    const float *a = io.in(s, 0), *b = io.in(s, 1);
    if (s.genAdd) {
      s.genAdd(a, b, out, rows * W);
      break;
    }
    for (int64_t k = 0; k < rows * W; ++k)
      out[k] = a[k] + b[k];
    break;
  }
  }
}

void PlanEngine::runNormMatmul(ThreadPool &pool, const PlanStep &s, const StepIO &io) {
  const int64_t rows = io.rows, W = s.out.width, D = s.in[0].width;
  float *out = io.out;
  const float *x = io.in(s, 0);
  if (!s.norm.empty()) {
    if (xn_.size() < size_t(rows * D))
      xn_.resize(size_t(rows * D));
    rmsNorm(s, x, xn_.data(), rows);
    x = xn_.data();
  }
  if (s.kernel == PlanKernel::NormMatmul) {
    products(pool, s, x, rows, out);
    return;
  }
  if (kv_.size() < size_t(rows * W))
    kv_.resize(size_t(rows * W));
  float *up = kv_.data();
  const MatmulJob jobs[2] = {{&s.w[0], out, W, nullptr}, {&s.w[1], up, W, nullptr}};
  const RowEpilogue act = gateEpilogue(s, out, up, rows, W);
  matmulMany(pool, jobs, 2, x, rows, D, &act, paths(s));
}

} // namespace llmc
