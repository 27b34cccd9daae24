//===- PassRecording.cpp - The IR remembers the passes run on it ---------===//
#include "compiler/pipelines/PassRecording.h"
#include "dialects/llm/IR/LlmOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "llvm/Support/raw_ostream.h"
#include <mutex>

using namespace mlir;

namespace llmc {
namespace {

class RecordPasses : public PassInstrumentation {
public:
  void runAfterPass(Pass *pass, Operation *op) override {
    if (pass->getArgument().empty()) // pass-manager adaptors
      return;
    SmallVector<llm::ModelOp> models;
    if (auto m = dyn_cast<llm::ModelOp>(op))
      models.push_back(m);
    else if (auto module = dyn_cast<ModuleOp>(op))
      for (auto m : module.getOps<llm::ModelOp>())
        models.push_back(m);
    if (models.empty())
      return;
    std::string text;
    llvm::raw_string_ostream os(text);
    pass->printAsTextualPipeline(os);
    std::lock_guard<std::mutex> lock(mutex);
    for (llm::ModelOp m : models) {
      if (!m.getSourceAttr())
        continue; // a hand-written, types-only model: nothing to record
      Builder b(m.getContext());
      SmallVector<Attribute> passes;
      if (ArrayAttr old = m.getPassesAttr())
        passes.append(old.begin(), old.end());
      passes.push_back(b.getStringAttr(os.str()));
      m.setPassesAttr(b.getArrayAttr(passes));
    }
  }

private:
  std::mutex mutex;
};

} // namespace

void recordPassesInModel(PassManager &pm) {
  pm.addInstrumentation(std::make_unique<RecordPasses>());
}

int setDefaultCalibration(OpPassManager &pm, const std::string &path) {
  int set = 0;
  for (Pass &pass : pm.getPasses()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    pass.printAsTextualPipeline(os);
    os.flush();
    const size_t at = text.find(" calib=") != std::string::npos ? text.find(" calib=")
                                                                : text.find("{calib=");
    if (at == std::string::npos)
      continue;
    const char next = at + 7 < text.size() ? text[at + 7] : '}';
    if (next != ' ' && next != '}')
      continue; // the user gave this pass its own calibration text
    if (failed(pass.initializeOptions("calib={" + path + "}",
                                      [](const Twine &) { return failure(); })))
      continue;
    ++set;
  }
  return set;
}

} // namespace llmc
