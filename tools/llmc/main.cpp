//===- main.cpp - The llmc command line ---------------------------------===//
#include "Commands.h"

int main(int argc, char **argv) {
  CLI::App app{"llmc: compile decoder LLMs (GGUF, Hugging Face, llama2.c) into "
               "one deployable artifact and run it"};
  app.set_version_flag("--version", "llmc 0.1.0");
  llmc::tool::useInMemoryCompiler();
  std::vector<llmc::tool::Subcommand> cmds = {
      {"compile", llmc::tool::addCompileCommand(app)},
      {"inspect", llmc::tool::addInspectCommand(app)},
      {"run", llmc::tool::addRunCommand(app)},
      {"generate", llmc::tool::addGenerateCommand(app)},
      {"serve", llmc::tool::addServeCommand(app)},
      {"import", llmc::tool::addImportCommand(app)},
      {"eval", llmc::tool::addEvalCommand(app)},
      {"bench", llmc::tool::addBenchCommand(app)},
      {"eval-long", llmc::tool::addEvalLongCommand(app)},
      {"keygen", llmc::tool::addKeygenCommand(app)},
      {"verify", llmc::tool::addVerifyCommand(app)},
      {"cuda-check", llmc::tool::addCudaCheckCommand(app)}};
  return llmc::tool::dispatch(app, argc, argv, cmds, "llmc");
}
