//===- GenMatmul.h - Products through generated kernels ---------*- C++ -*-===//
// matmulMany (Matmul.h) for T <= codegen::kMaxRows tokens where every job's
// weight has a generated matrix-vector kernel: the same row-block work items
// over the thread pool, each calling the job's generated kernel on its rows.
//===----------------------------------------------------------------------===//
#pragma once
#include "../codegen/GeneratedKernels.h"
#include "Matmul.h"

namespace llmc {

void genMatmulMany(ThreadPool &pool, const MatmulJob *jobs, const codegen::MatvecFn *fns,
                   int njobs, const float *x, int64_t T, int64_t ldx,
                   const RowEpilogue *paired = nullptr);

} // namespace llmc
