//===- InMemoryModel.cpp - Run the model being compiled -----------------===//
#include "compiler/weights/InMemoryModel.h"
#include "compiler/artifact/ProgramExport.h"
#include <stdexcept>

namespace llmc {

std::unique_ptr<Artifact> buildInMemoryArtifact(mlir::ModuleOp module,
                                                const WeightStore &store) {
  auto exported = exportProgram(module);
  if (mlir::failed(exported))
    throw std::runtime_error("cannot export the model to run it");
  std::vector<ArtifactWriter::Tensor> tensors;
  for (const ExportedWeight &w : exported->weights) {
    const WeightStore::Entry *e = store.find(w.name);
    if (!e || !e->data)
      throw std::runtime_error("weight '" + w.name + "' has no data in the IR (a types-only "
                               "module cannot run: import with --emit-resources)");
    tensors.push_back({w.name, e->dtype, e->shape, e->nbytes, e->data});
    if (!e->aux.empty())
      tensors.push_back({w.name + kAuxSuffix, DType::U8, {int64_t(e->aux.size())},
                         int64_t(e->aux.size()), e->aux.data()});
  }
  nlohmann::json manifest;
  manifest["config"] = exported->config;
  manifest["program"] = exported->program.toJson();
  if (!exported->speculation.is_null())
    manifest["speculation"] = exported->speculation;
  manifest["tokenizer"] = tokenizerToJson(store.tokenizer());
  ArtifactWriter writer(std::move(manifest), std::move(tensors));
  return Artifact::fromBuffer(writer.toBuffer(), "<model being compiled>",
                              /*verify_tensors=*/false);
}

} // namespace llmc
