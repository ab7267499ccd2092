// Running a program from a test: the CLI tests drive the built `ckpt`
// binary (and a Python reader) and look at its exit code and output.
#pragma once

#include <cstdint>
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
  uint64_t peak_rss_bytes = 0;  // the most memory it held at once
};

// Runs `program` with `args` and waits. stdout and stderr go to files in
// `scratch_dir` (pipes could fill up and deadlock on large output); stdin is
// /dev/null; the environment is this process's. With `address_space_bytes`,
// the program runs under that RLIMIT_AS, so one that tries to hold more
// fails (an allocation fails, typically an abort) instead of taking the
// machine's memory.
RunResult RunProgram(const std::string& program,
                     const std::vector<std::string>& args,
                     const std::filesystem::path& scratch_dir,
                     uint64_t address_space_bytes = 0);

// Success when `part` occurs in `text`; the failure shows the whole text.
::testing::AssertionResult Contains(const std::string& text,
                                    std::string_view part);

}  // namespace ckpt::testing
