//===- fuzz_onnx.cpp - The ONNX reader and raising on arbitrary bytes -----===//
// The input becomes model.onnx in a scratch folder (no config.json or
// external data beside it): protobuf parsing, constant decoding and the
// decoder raising must refuse, never crash, whatever the bytes say.
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"
#include "compiler/import/SourceModel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = llmc::fuzz::scratchPath("model.onnx");
  llmc::fuzz::writeFile(path, data, size);
  try {
    llmc::SourceModel m = llmc::readOnnx(path);
    for (const auto &t : m.tensors) // touch what the reader vouched for
      (void)t.name.size();
  } catch (const std::exception &) {
  }
  return 0;
}
