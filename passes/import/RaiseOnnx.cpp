//===- RaiseOnnx.cpp - llm-raise-onnx: generic ONNX IR -> llm.model -------===//
// Reads the graph back from its generic form, raises it with the ONNX
// reader's patterns (compiler/import/onnx) and replaces the module's body
// by the llm.model SourceImporter builds from the result, weights owned by
// the IR (the raised tensors are copies; the generic blobs may go).
//===----------------------------------------------------------------------===//
#include "compiler/import/SourceImporter.h"
#include "passes/import/OnnxGenericForm.h"
#include "passes/import/Passes.h"

namespace llmc::import {
#define GEN_PASS_DEF_RAISEONNXPASS
#include "passes/import/Passes.h.inc"

namespace {
struct RaiseOnnxPass : impl::RaiseOnnxPassBase<RaiseOnnxPass> {
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    if (!isOnnxGeneric(module)) {
      module.emitError("llm-raise-onnx: the module holds no ONNX graph in generic form "
                       "(llmc import model.onnx --onnx-generic writes one)");
      return signalPassFailure();
    }
    mlir::OwningOpRef<mlir::ModuleOp> raised;
    try {
      const onnx_import::OnnxGraph g = onnxGraphOf(module);
      raised = importSourceModel(getContext(), onnx_import::raiseOnnxDecoder(g));
    } catch (const std::exception &e) {
      module.emitError("llm-raise-onnx: ") << e.what();
      return signalPassFailure();
    }
    module.getBody()->clear();
    module->removeAttr("llm.onnx_source");
    module->setLoc(raised->getLoc());
    module.getBody()->getOperations().splice(module.getBody()->end(),
                                             raised->getBody()->getOperations());
  }
};
} // namespace

} // namespace llmc::import
