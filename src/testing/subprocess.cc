#include "testing/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "testing/files.h"

extern char** environ;

namespace ckpt::testing {

::testing::AssertionResult Contains(const std::string& text,
                                    std::string_view part) {
  if (text.find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "\"" << part << "\" is not in:\n"
                                       << text;
}

namespace {

// fork and exec with RLIMIT_AS set in between (posix_spawn cannot set a
// limit). Only async-signal-safe calls run in the child: the parent may
// have threads.
pid_t SpawnLimited(const char* program, char* const argv[], const char* out,
                   const char* err, uint64_t address_space_bytes) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int in_fd = open("/dev/null", O_RDONLY);
  const int out_fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in_fd < 0 || out_fd < 0 || err_fd < 0 || dup2(in_fd, 0) < 0 ||
      dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) {
    _exit(127);
  }
  const rlimit limit{address_space_bytes, address_space_bytes};
  if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(127);
  execve(program, argv, environ);
  _exit(127);
}

// posix_spawn with stdin /dev/null and stdout, stderr to the files.
bool Spawn(const std::string& program, std::vector<char*>& argv,
           const std::string& out_path, const std::string& err_path,
           pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(pid, program.c_str(), &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << program << ": " << rc;
    return false;
  }
  return true;
}

}  // namespace

RunResult RunProgram(const std::string& program,
                     const std::vector<std::string>& args,
                     const std::filesystem::path& scratch_dir,
                     uint64_t address_space_bytes) {
  const std::string out_path = (scratch_dir / ".stdout").string();
  const std::string err_path = (scratch_dir / ".stderr").string();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  RunResult result;
  if (address_space_bytes > 0) {
    pid = SpawnLimited(program.c_str(), argv.data(), out_path.c_str(),
                       err_path.c_str(), address_space_bytes);
    if (pid < 0) {
      ADD_FAILURE() << "fork " << program << ": " << errno;
      return result;
    }
  } else if (!Spawn(program, argv, out_path, err_path, &pid)) {
    return result;
  }
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) {
      ADD_FAILURE() << "wait4 failed";
      return result;
    }
  }
  result.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.peak_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

}  // namespace ckpt::testing
