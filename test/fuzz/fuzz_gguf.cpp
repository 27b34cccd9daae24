//===- fuzz_gguf.cpp - The GGUF reader on arbitrary bytes ----------------===//
#include "FuzzCommon.h"
#include "compiler/import/SourceModel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = llmc::fuzz::scratchPath("model.gguf");
  llmc::fuzz::writeFile(path, data, size);
  try {
    llmc::SourceModel m = llmc::readGguf(path);
    for (const auto &t : m.tensors) // touch what the reader vouched for
      (void)t.name.size();
  } catch (const std::exception &) {
  }
  return 0;
}
