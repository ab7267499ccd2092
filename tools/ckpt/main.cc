// `ckpt`: inspect, verify, convert and clean up checkpoints from the shell.
//
// Exit status: 0 on success, 1 on failure (one message on stderr, prefixed
// "ckpt <command>: "), 2 on a usage error (CLI11's message and a hint).

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "commands.h"
#include "common.h"
#include "util/names.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// `app` and the commands selected under it, down to the deepest ("ckpt",
// "catalog", "best").
std::vector<CLI::App*> Chain(CLI::App& app) {
  std::vector<CLI::App*> chain = {&app};
  while (!chain.back()->get_subcommands().empty()) {
    chain.push_back(chain.back()->get_subcommands().front());
  }
  return chain;
}

// The first option on the command line that neither the command nor the
// commands above it know, or "". CLI11 checks that required arguments are
// there before it looks at what is left over, so `ckpt catalog latest
// --jobb x` would be reported as a missing JOB, hiding the typo.
std::string UnknownOption(CLI::App& app, int argc, char** argv) {
  const std::vector<CLI::App*> chain = Chain(app);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;  // the rest are positional
    if (arg.size() < 2 || arg[0] != '-') continue;
    // A negative number is a value ("--step -1"), reported by its check.
    if (std::isdigit(static_cast<unsigned char>(arg[1]))) continue;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      arg.resize(eq);
    }
    // Short flags may be grouped ("-ab"): the first names the group.
    if (arg[1] != '-') arg.resize(2);
    bool known = false;
    for (CLI::App* a : chain) {
      if (a->get_option_no_throw(arg) != nullptr) known = true;
    }
    if (!known) return arg;
  }
  return "";
}

// The command as typed, down to the deepest subcommand selected ("catalog
// best"), so that a usage error and its hint name the one that was wrong,
// not its group.
std::string CommandName(const std::vector<CLI::App*>& chain) {
  std::string name;
  for (size_t i = 1; i < chain.size(); ++i) {
    name += (i > 1 ? " " : "") + chain[i]->get_name();
  }
  return name;
}

int UsageError(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const std::vector<CLI::App*> chain = Chain(app);
  const bool selected = chain.size() > 1;
  if (const std::string unknown = UnknownOption(app, argc, argv);
      selected && !unknown.empty()) {
    const std::string name = CommandName(chain);
    fmt::print(stderr, "ckpt {}: unknown option {}\n", name,
               ckpt::Quote(unknown));
    fmt::print(stderr, "Run 'ckpt {} --help' for usage.\n", name);
    return kExitUsage;
  }
  if (!selected) {
    // CLI11 reports an unknown command as "A subcommand is required"; name
    // what was typed instead.
    if (argc > 1 && argv[1][0] != '-') {
      fmt::print(stderr, "ckpt: unknown command {}\n", ckpt::Quote(argv[1]));
    } else {
      fmt::print(stderr, "ckpt: {}\n", e.what());
    }
    fmt::print(stderr, "Run 'ckpt --help' for the commands.\n");
  } else {
    const std::string name = CommandName(chain);
    CLI::App* deepest = chain.back();
    // A group (`ckpt catalog`) given no command of its own, or one it
    // does not have: CLI11 says "A subcommand is required" to both; name
    // what was typed and the group's commands.
    const std::vector<CLI::App*> group =
        deepest->get_subcommands([](CLI::App*) { return true; });
    if (!group.empty() &&
        std::string_view(e.what()).find("subcommand") != std::string::npos) {
      std::string typed, names;
      for (int i = 1; i + 1 < argc; ++i) {
        if (argv[i] == deepest->get_name() && argv[i + 1][0] != '-') {
          typed = argv[i + 1];
        }
      }
      for (CLI::App* c : group) {
        names += (names.empty() ? "" : ", ") + c->get_name();
      }
      fmt::print(stderr, "ckpt {}: {} (its commands: {})\n", name,
                 typed.empty() ? "which command?"
                               : "unknown command " + ckpt::Quote(typed),
                 names);
      fmt::print(stderr, "Run 'ckpt {} --help' for usage.\n", name);
      return kExitUsage;
    }
    fmt::print(stderr, "ckpt {}: {}\n", name, e.what());
    fmt::print(stderr, "Run 'ckpt {} --help' for usage.\n", name);
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("", "ckpt");
  ckpt::cli::UseSummaryFormatter(app);
  app.description(
      "ckpt - inspect, verify, convert and clean up checkpoints.\n\n"
      "A checkpoint is named by its ROOT (a URL such as file:///data/run42 or\n"
      "s3://bucket/run42, or a plain path) and --step N (default: the newest\n"
      "committed step). Every command prints for people, or JSON with --json\n"
      "(report, whose output is an HTML page, has no --json).\n"
      "Exit status: 0 success, 1 failure, 2 usage error.\n");
  app.footer(
      "Examples:\n"
      "  ckpt --version\n"
      "  ckpt ls /data/run42\n"
      "  ckpt show /data/run42 --step 1200\n"
      "  ckpt verify /data/run42 --all\n"
      "  ckpt export /data/run42 model.safetensors\n"
      "  ckpt import-dcp /data/dcp/step_1200 /data/run42 --step 1200\n"
      "  ckpt gc /data/run42 --keep-last 3 --dry-run\n"
      "  ckpt delete /data/run42 --step 1200\n"
      "  ckpt catalog latest run42\n"
      "  ckpt bench --size 512MiB --json\n"
      "  ckpt report /data/run42 -o run42.html\n"
      "Run 'ckpt <command> --help' for a command's options.\n");
  // Checked before the subcommand is required, as --help is.
  app.set_version_flag("-V,--version", "ckpt " CKPT_VERSION_STRING);
  app.require_subcommand(1);

  ckpt::cli::Command command;
  ckpt::cli::AddLsCommand(app, command);
  ckpt::cli::AddShowCommand(app, command);
  ckpt::cli::AddVerifyCommand(app, command);
  ckpt::cli::AddImportCommand(app, command);
  ckpt::cli::AddExportCommand(app, command);
  ckpt::cli::AddImportDcpCommand(app, command);
  ckpt::cli::AddDiffCommand(app, command);
  ckpt::cli::AddGcCommand(app, command);
  ckpt::cli::AddDeleteCommand(app, command);
  ckpt::cli::AddCatalogCommand(app, command);
  ckpt::cli::AddBenchCommand(app, command);
  ckpt::cli::AddReportCommand(app, command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is reported as a "parse error" with exit code 0.
    if (e.get_exit_code() == 0) return app.exit(e);
    return UsageError(app, e, argc, argv);
  }

  ckpt::Status status;
  try {
    status = command.run();
  } catch (const std::exception& e) {
    // Printing throws where standard output takes no more (a full disk): a
    // failure of the output, said as such, as when it shows at the flush.
    // Anything else is a bug or out of memory, and still deserves a
    // message rather than an abort.
    status = std::ferror(stdout)
                 ? ckpt::IOError(std::string("write standard output failed: ") +
                                 e.what())
                 : ckpt::Status(ckpt::ErrorCode::kAborted,
                                std::string("internal error: ") + e.what());
  }
  // Output that did not reach its file (a full disk, a closed pipe) is a
  // failure too.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    if (status.ok()) status = ckpt::IOError("write standard output failed");
  }
  if (!status.ok()) {
    fmt::print(stderr, "ckpt {}: {}\n", command.name, status.ToString());
    return kExitFailure;
  }
  return 0;
}
