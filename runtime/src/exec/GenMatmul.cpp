//===- GenMatmul.cpp - Products through generated kernels -----------------===//
#include "GenMatmul.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace llmc {

namespace {
constexpr int64_t kBlock = 16; // output rows per work item
}

void genMatmulMany(ThreadPool &pool, const MatmulJob *jobs, const codegen::MatvecFn *fns,
                   int njobs, const float *x, int64_t T, int64_t ldx, const RowEpilogue *paired) {
  if (njobs <= 0 || T <= 0)
    return;
  if (njobs > 8 || T > codegen::kMaxRows)
    throw std::runtime_error("genMatmulMany: at most 8 products of at most " +
                             std::to_string(codegen::kMaxRows) + " rows");
  // Accumulating jobs write to scratch first (the kernels store), then add.
  thread_local std::vector<float> scratch;
  MatmulJob js[8];
  int64_t total = 0;
  for (int j = 0; j < njobs; ++j)
    total += jobs[j].accumulate ? T * jobs[j].w->rows : 0;
  if (scratch.size() < size_t(total))
    scratch.resize(size_t(total));
  int64_t at = 0;
  for (int j = 0; j < njobs; ++j) {
    js[j] = jobs[j];
    if (jobs[j].accumulate) {
      js[j].y = scratch.data() + at;
      js[j].ldy = jobs[j].w->rows;
      at += T * jobs[j].w->rows;
    }
  }
  int64_t first[9] = {};
  for (int j = 0; j < (paired ? 1 : njobs); ++j)
    first[j + 1] = first[j] + (js[j].w->rows + kBlock - 1) / kBlock;
  const int64_t items = first[paired ? 1 : njobs];
  const int32_t rows = int32_t(T);
  auto run = [&](int j, int64_t r0, int64_t r1) {
    const MatmulJob &job = js[j];
    fns[j](job.w->data, job.w->rowStride, x, ldx, rows, job.y, job.ldy, r0, r1);
    if (job.bias)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r1; ++r)
          job.y[t * job.ldy + r] += job.bias[r];
    if (jobs[j].accumulate)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r1; ++r)
          jobs[j].y[t * jobs[j].ldy + r] += job.y[t * job.ldy + r];
  };
  const int64_t grain = std::max<int64_t>(1, items / (int64_t(pool.size()) * 8));
  pool.parallelFor(0, items, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      int j = 0;
      while (!paired && j + 1 < njobs && item >= first[j + 1])
        ++j;
      const int64_t r0 = (item - first[j]) * kBlock;
      const int64_t r1 = std::min(r0 + kBlock, js[j].w->rows);
      if (!paired) {
        run(j, r0, r1);
        continue;
      }
      for (int k = 0; k < njobs; ++k)
        run(k, r0, r1);
      (*paired)(r0, r1 - r0);
    }
  });
}

} // namespace llmc
