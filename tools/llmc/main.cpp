//===- main.cpp - The llmc command line ---------------------------------===//
#include "Commands.h"
#include <cstdio>

int main(int argc, char **argv) {
  CLI::App app{"llmc: compile decoder LLMs (GGUF, Hugging Face, llama2.c) into "
               "one deployable artifact and run it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "llmc 0.1.0");
  auto compile = llmc::tool::addCompileCommand(app);
  auto inspect = llmc::tool::addInspectCommand(app);
  auto run = llmc::tool::addRunCommand(app);
  auto import = llmc::tool::addImportCommand(app);
  auto eval = llmc::tool::addEvalCommand(app);
  auto bench = llmc::tool::addBenchCommand(app);
  auto evalLong = llmc::tool::addEvalLongCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : llmc::tool::kUsage;
  }
  try {
    if (app.got_subcommand("compile"))
      return compile();
    if (app.got_subcommand("inspect"))
      return inspect();
    if (app.got_subcommand("run"))
      return run();
    if (app.got_subcommand("import"))
      return import();
    if (app.got_subcommand("eval"))
      return eval();
    if (app.got_subcommand("bench"))
      return bench();
    if (app.got_subcommand("eval-long"))
      return evalLong();
  } catch (const std::exception &e) {
    fprintf(stderr, "llmc: error: %s\n", e.what());
    return llmc::tool::kError;
  }
  return llmc::tool::kUsage;
}
