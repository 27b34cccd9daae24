//===- CudaStepProfile.cpp - LLMC_CUDA_PROFILE's per-step times -----------===//
#include "CudaStepProfile.h"

#include "llmc/dtype.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace llmc::cuda {

CudaStepProfile::CudaStepProfile() {
  const char *p = std::getenv("LLMC_CUDA_PROFILE");
  enabled_ = p && *p && std::string(p) != "0";
}

CudaStepProfile::~CudaStepProfile() {
  if (!enabled_ || (steps_.empty() && host_.empty()))
    return;
  print("GPU time of eager plan steps (event pairs)", steps_);
  print("host time of step() phases", host_);
}

void CudaStepProfile::print(const char *title, const std::map<std::string, Entry> &m) {
  std::vector<std::pair<std::string, Entry>> rows(m.begin(), m.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto &a, const auto &b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (const auto &r : rows)
    total += r.second.ms;
  fprintf(stderr, "[llmc] cuda profile, %s: %.3f ms in all\n", title, total);
  for (const auto &r : rows)
    fprintf(stderr, "[llmc]   %9.3f ms %5.1f%% %7lld calls %9.2f us/call  %s\n", r.second.ms,
            total > 0 ? 100.0 * r.second.ms / total : 0.0, (long long)r.second.calls,
            1000.0 * r.second.ms / double(std::max<int64_t>(1, r.second.calls)), r.first.c_str());
}

std::string cudaStepLabel(const PlanStep &s, int64_t T) {
  static const char *names[] = {"embed",          "norm_matmul", "norm_gated_matmul",
                                "matmul_add",     "rope_kv_append", "attend",
                                "rms_norm",       "add"};
  const int k = int(s.kernel);
  std::string l = std::string(k >= 0 && k < 8 ? names[k] : "step") + " T=" + std::to_string(T);
  for (const WeightMatrix &w : s.w)
    l += " " + std::string(dtypeName(w.dtype)) + "[" + std::to_string(w.rows) + "x" +
         std::to_string(w.cols) + "]";
  return l;
}

} // namespace llmc::cuda
