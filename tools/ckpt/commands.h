// The subcommands of `ckpt` (docs/cli.md).
//
// Each Add*Command registers one subcommand, with its help text and
// examples, on the top-level CLI11 app. When the command line selects it,
// parsing stores the code that runs it in `selected`; main runs that code
// only after the whole command line parsed, so a usage error never does half
// a job.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/status.h"

namespace ckpt::cli {

struct Command {
  std::string name;
  // Prints the command's output on stdout. An error is returned, not
  // printed: main prints it once, prefixed with "ckpt <name>: ".
  std::function<Status()> run;
};

void AddLsCommand(CLI::App& app, Command& selected);
void AddShowCommand(CLI::App& app, Command& selected);
void AddVerifyCommand(CLI::App& app, Command& selected);
void AddImportCommand(CLI::App& app, Command& selected);
void AddExportCommand(CLI::App& app, Command& selected);
void AddImportDcpCommand(CLI::App& app, Command& selected);

// Becomes the ckpt Python package's DCP converter with `args` (dcp.cc);
// returns only when it cannot be started.
Status RunDcpConverter(const std::vector<std::string>& args);
void AddDiffCommand(CLI::App& app, Command& selected);
void AddGcCommand(CLI::App& app, Command& selected);
void AddDeleteCommand(CLI::App& app, Command& selected);
void AddCatalogCommand(CLI::App& app, Command& selected);
void AddBenchCommand(CLI::App& app, Command& selected);
void AddReportCommand(CLI::App& app, Command& selected);

}  // namespace ckpt::cli
