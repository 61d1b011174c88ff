// onepass: generate text, benchmark, inspect and make models from the command line.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <CLI/CLI.hpp>

#include "common.h"
#include "onepass/core/error.h"
#include "onepass/version.h"

namespace {

// Prints one error line and returns the exit status of every failure.
int report(const std::string& line) {
  onepass::cli::clear_progress_lines();
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", onepass::cli::printable(line, false).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace onepass::cli;
#ifdef __GLIBC__
  // glibc raises its mmap threshold to the size of each large block freed, after which
  // loading's large temporaries (the vocabulary's arrays, recorded graphs' node lists) come
  // from the heap and leave holes that stay resident (~0.7 MB for the default model); a
  // fixed threshold (glibc's initial 128 KiB) returns them to the system when freed.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  CLI::App app("onepass: a GPU compute runtime for LLM inference (CUDA and CPU backends)",
               "onepass");
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       onepass::cat("onepass ", onepass::kVersion, " (commit ", onepass::kGitCommit,
                                    ", backends: ", onepass::kBackends, ")"));
  std::vector<Command> commands;
  commands.push_back(add_generate_command(app));
  commands.push_back(add_chat_command(app));
  commands.push_back(add_bench_command(app));
  commands.push_back(add_profile_command(app));
  commands.push_back(add_inspect_command(app));
  commands.push_back(add_make_model_command(app));
  commands.push_back(add_serve_command(app));
  commands.push_back(add_perplexity_command(app));
  check_integer_options(app);

  std::vector<std::string> names;
  for (const Command& command : commands) names.push_back(command.app->get_name());
  // The command (the first argument that is not an option), for the error's "[where]".
  std::string given;
  if (argc >= 2 && argv[1][0] != '-') given = argv[1];
  if (!given.empty() && std::find(names.begin(), names.end(), given) == names.end()) {
    const std::string close = closest_name(given, names);
    return report(onepass::cat("[onepass] unknown command '", given, "'",
                               close.empty() ? std::string() : onepass::cat("; did you mean '", close, "'?"),
                               " (commands: ", join(names), ")"));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    const std::string where = given.empty() ? "onepass" : given;
    std::string what = e.what();
    if (given.empty() && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      what = onepass::cat("a command is required (", join(names), ")");
    }
    return report(onepass::cat("[", where, "] ", what, "; see onepass ", given.empty() ? "" : given + " ",
                               "--help"));
  }
  // Every failure is one "[where] what" line on stderr and exit status 1.
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const onepass::Error& e) {
    return report(e.what());
  } catch (const std::exception& e) {
    return report(onepass::cat("[onepass] ", e.what()));
  }
  return 1;
}
