//===- fuzz_llama2c.cpp - The llama2.c checkpoint reader on arbitrary bytes -===//
#include "FuzzCommon.h"
#include "compiler/import/SourceModel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = llmc::fuzz::scratchPath("model.bin");
  llmc::fuzz::writeFile(path, data, size);
  try {
    llmc::readLlama2c(path, "");
  } catch (const std::exception &) {
  }
  return 0;
}
