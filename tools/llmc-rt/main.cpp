//===- main.cpp - llmc-rt: the runtime-only command line ----------------===//
// Runs, benchmarks, evaluates and checks compiled artifacts; links the
// runtime and no MLIR or compiler, so a deployment machine needs nothing
// else (no C++ compiler either: artifacts carry objects for every x86-64
// level). Source models are compiled elsewhere with `llmc compile`.
//===----------------------------------------------------------------------===//
#include "Commands.h"

int main(int argc, char **argv) {
  CLI::App app{"llmc-rt: run compiled llmc artifacts (.llmc) with the runtime alone"};
  app.set_version_flag("--version", "llmc-rt 0.1.0");
  std::vector<llmc::tool::Subcommand> cmds = {
      {"inspect", llmc::tool::addInspectCommand(app)},
      {"run", llmc::tool::addRunCommand(app)},
      {"generate", llmc::tool::addGenerateCommand(app)},
      {"serve", llmc::tool::addServeCommand(app)},
      {"eval", llmc::tool::addEvalCommand(app)},
      {"bench", llmc::tool::addBenchCommand(app)},
      {"eval-long", llmc::tool::addEvalLongCommand(app)},
      {"keygen", llmc::tool::addKeygenCommand(app)},
      {"verify", llmc::tool::addVerifyCommand(app)},
      {"cuda-check", llmc::tool::addCudaCheckCommand(app)}};
  return llmc::tool::dispatch(app, argc, argv, cmds, "llmc-rt");
}
