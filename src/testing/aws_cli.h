// Where the AWS command-line client is, for the tests and benchmarks that
// run it beside ckpt against the same S3 server.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace ckpt::testing {

// Debian's awscli (scripts/install-deps.sh installs it), else the first
// `aws` on PATH; empty if there is none. Debian's comes first: an `aws`
// of another Python on PATH may be an older major version, without the
// options the tests pass.
inline std::string AwsCli() {
  if (::access("/usr/bin/aws", X_OK) == 0) return "/usr/bin/aws";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/aws").c_str(), X_OK) == 0) {
      return dir + "/aws";
    }
  }
  return "";
}

}  // namespace ckpt::testing
