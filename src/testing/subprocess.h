// Running a program from a test: the CLI tests drive the built `ckpt`
// binary (and a Python reader) and look at its exit code and output.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace ckpt::testing {

struct RunResult {
  int exit_code = -1;  // a signal shows as 128 + signal, never 0, 1 or 2
  std::string out;
  std::string err;
};

// Runs `program` with `args` and waits. stdout and stderr go to files in
// `scratch_dir` (pipes could fill up and deadlock on large output); stdin is
// /dev/null; the environment is this process's.
RunResult RunProgram(const std::string& program,
                     const std::vector<std::string>& args,
                     const std::filesystem::path& scratch_dir);

// Success when `part` occurs in `text`; the failure shows the whole text.
::testing::AssertionResult Contains(const std::string& text,
                                    std::string_view part);

}  // namespace ckpt::testing
