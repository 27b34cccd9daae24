//===- Dispatch.cpp - Parse the command line and run one subcommand -------===//
#include "Commands.h"
#include <cstdio>

namespace llmc::tool {

int dispatch(CLI::App &app, int argc, char **argv, const std::vector<Subcommand> &cmds,
             const char *tool) {
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kUsage;
  }
  try {
    for (const Subcommand &c : cmds)
      if (app.got_subcommand(c.name))
        return c.run();
  } catch (const std::exception &e) {
    fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return kError;
  }
  return kUsage;
}

} // namespace llmc::tool
