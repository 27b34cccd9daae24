//===- SpecTree.h - Speculative decoding over draft trees -------*- C++ -*-===//
#pragma once
#include "llmc/speculative.h"

namespace llmc::spec {

/// generate() with a branching drafter's trees, each verified in one
/// target pass with tree attention (Executor::verifyTree); the executor
/// must be treeVerifiable() (SpecTree.cpp).
int64_t generateTree(Executor &exec, Drafter &drafter, std::vector<int32_t> context,
                     std::vector<float> logits, int64_t n, const std::vector<int32_t> &stops,
                     const SpecOptions &opts, Sampler &sampler,
                     const std::function<bool(int32_t)> &emit, SpecStats &stats);

} // namespace llmc::spec
