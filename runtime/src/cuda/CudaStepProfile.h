//===- CudaStepProfile.h - LLMC_CUDA_PROFILE's per-step times -*- C++ -*-===//
// With LLMC_CUDA_PROFILE=1 in the environment, the GPU engine times each
// plan step of its eager (not graph-replayed) steps on the GPU, by event
// pairs around the step's launches, and the host phases of each step
// (uploads, launches or the graph replay, the logits' download and the
// synchronize); when the engine closes, two tables go to stderr, the
// costliest entries first. Eager steps are then synchronized per step, so a
// profiled run is slower than an unprofiled one: the shares, not the
// absolute times, are what it is for.
//===----------------------------------------------------------------------===//
#pragma once
#include "../exec/KernelPlan.h"

#include <cstdint>
#include <map>
#include <string>

namespace llmc::cuda {

class CudaStepProfile {
public:
  CudaStepProfile();
  ~CudaStepProfile(); // prints the tables when enabled and not empty
  bool enabled() const { return enabled_; }
  void addStep(const std::string &label, double ms) { add(steps_, label, ms); }
  void addHost(const std::string &label, double ms) { add(host_, label, ms); }

private:
  struct Entry {
    int64_t calls = 0;
    double ms = 0;
  };
  static void add(std::map<std::string, Entry> &m, const std::string &label, double ms) {
    Entry &e = m[label];
    ++e.calls;
    e.ms += ms;
  }
  static void print(const char *title, const std::map<std::string, Entry> &m);
  bool enabled_ = false;
  std::map<std::string, Entry> steps_, host_;
};

/// "norm_matmul T=1 q4_0[576x576] ..." : a step's kind, row count and weights.
std::string cudaStepLabel(const PlanStep &s, int64_t T);

} // namespace llmc::cuda
