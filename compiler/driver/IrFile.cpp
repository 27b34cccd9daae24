//===- IrFile.cpp - llm IR files that carry their model ------------------===//
#include "compiler/driver/IrFile.h"
#include "compiler/driver/Compile.h"
#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include <unistd.h>

using namespace mlir;

namespace llmc {

namespace {
bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
} // namespace

bool isIrFile(const std::string &path) { return endsWith(path, ".mlir") || endsWith(path, ".mlirbc"); }

OwningOpRef<ModuleOp> readIrFile(MLIRContext &ctx, const std::string &path) {
  // Bytecode is read in place (its blobs then point into the mapping); text
  // needs a terminating NUL.
  char magic[4] = {0, 0, 0, 0};
  if (FILE *f = fopen(path.c_str(), "rb")) {
    size_t got = fread(magic, 1, 4, f);
    (void)got;
    fclose(f);
  }
  const bool bytecode = magic[0] == 'M' && magic[1] == 'L' && magic[2] == '\xef' && magic[3] == 'R';
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/!bytecode);
  if (!buffer)
    throw CompileError(path + ": cannot read: " + buffer.getError().message());
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(*sourceMgr, &ctx);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&ctx));
  if (!module)
    throw CompileError(path + ": not a valid llm IR file (see the diagnostics above)");
  if (failed(verify(*module)))
    throw CompileError(path + ": the IR does not verify");
  return module;
}

void writeIrFile(ModuleOp module, const std::string &path, bool bytecode) {
  auto emit = [&](llvm::raw_ostream &os) -> bool {
    if (bytecode)
      return succeeded(writeBytecodeToFile(module, os));
    module.print(os);
    os << "\n";
    return true;
  };
  if (path == "-") {
    if (!emit(llvm::outs()))
      throw CompileError("cannot write the IR as bytecode");
    llvm::outs().flush();
    return;
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec)
      throw CompileError(path + ": cannot write: " + ec.message());
    const bool ok = emit(os);
    os.close();
    if (!ok || os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      throw CompileError(path + ": writing the IR failed");
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    throw CompileError(path + ": cannot write: " + ec.message());
  }
}

} // namespace llmc
