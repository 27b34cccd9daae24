//===- threads.h - How many worker threads "all cores" means ----*- C++ -*-===//
#pragma once

namespace llmc {

/// The worker count that "all cores" (a thread count of 0) means:
/// LLMC_THREADS when it is set to an integer in [1, 256], as OMP_NUM_THREADS
/// is for OpenMP programs (several llmc processes sharing a machine, e.g. a
/// test suite run two at a time, should not each start a thread per core);
/// else the hardware's thread count. Any other LLMC_THREADS value is ignored
/// with one warning on stderr.
int defaultThreadCount();

/// LLMC_THREADS's reading: the count `text` names (an integer in [1, 256]),
/// or 0 when `text` is null or empty, or (after a warning on stderr) when it
/// names anything else.
int threadCountFromEnvText(const char *text);

} // namespace llmc
