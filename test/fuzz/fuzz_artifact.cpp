//===- fuzz_artifact.cpp - The artifact loader and executor set-up ---------===//
// Artifact::fromBuffer checks the header, manifest and every tensor's
// bounds; an artifact that passes is then given to the Executor (program
// and kernel plan checked against the tensors) and, if that accepts it,
// run for one token: a malformed artifact must fail with an exception,
// never read outside its buffer.
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"
#include "llmc/artifact.h"
#include "llmc/executor.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    auto art = llmc::Artifact::fromBuffer(std::vector<uint8_t>(data, data + size), "fuzz.llmc");
    llmc::ExecutorOptions eo;
    eo.threads = 1;
    eo.max_context = 16;
    llmc::Executor exec(*art, eo);
    exec.forward({0});
  } catch (const std::exception &) {
  }
  return 0;
}
