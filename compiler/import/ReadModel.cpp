//===- ReadModel.cpp - Pick the reader for a model path --------------------===//
// readModel(): a folder (or a config.json / *.safetensors inside one) is a
// Hugging Face model, a file starting with "GGUF" is GGUF, anything else is
// tried as a llama2.c checkpoint (whose reader validates the exact size).
//===----------------------------------------------------------------------===//
#include "compiler/import/ReaderUtil.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

namespace llmc {

namespace {
bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
} // namespace

SourceModel readModel(const std::string &path, const std::string &tokenizer_path) {
  struct stat st;
  if (path.empty())
    throw ImportError("no model path given");
  if (::stat(path.c_str(), &st) != 0)
    importFail(path, std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    return readHuggingFace(path);
  if (endsWith(path, ".safetensors") || endsWith(path, "/config.json") || path == "config.json")
    return readHuggingFace(parentDir(path));

  if (endsWith(path, ".onnx"))
    return readOnnx(path);
  char magic[4] = {0, 0, 0, 0};
  if (FILE *f = std::fopen(path.c_str(), "rb")) {
    size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0)
      return readGguf(path);
  } else {
    importFail(path, std::string("cannot open: ") + std::strerror(errno));
  }
  if (endsWith(path, ".gguf"))
    return readGguf(path); // reports the bad magic clearly
  return readLlama2c(path, tokenizer_path);
}

} // namespace llmc
