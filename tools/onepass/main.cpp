// onepass: generate text, benchmark, inspect and make models from the command line.
#include <cstdio>
#include <exception>
#include <vector>

#include <CLI/CLI.hpp>

#include "common.h"
#include "onepass/core/error.h"
#include "onepass/version.h"

int main(int argc, char** argv) {
  using namespace onepass::cli;
  CLI::App app("onepass: a GPU compute runtime for LLM inference (CUDA and CPU backends)",
               "onepass");
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       onepass::cat("onepass ", onepass::kVersion, " (commit ", onepass::kGitCommit,
                                    ", backends: ", onepass::kBackends, ")"));
  std::vector<Command> commands;
  commands.push_back(add_generate_command(app));
  commands.push_back(add_bench_command(app));
  commands.push_back(add_profile_command(app));
  commands.push_back(add_inspect_command(app));
  commands.push_back(add_make_model_command(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Every failure is one "[where] what" line on stderr and exit status 1.
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const onepass::Error& e) {
    clear_progress_lines();
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.what());
  } catch (const std::exception& e) {
    clear_progress_lines();
    std::fflush(stdout);
    std::fprintf(stderr, "[onepass] %s\n", e.what());
  }
  return 1;
}
