// Starting moto's S3 server:
//   1. Find the Python of the project's virtual environment (CKPT_MOTO_PYTHON:
//      set by CMake to .venv/bin/python; the environment variable of the
//      same name overrides it) and moto_s3.py beside this file.
//   2. Pick a free port: bind port 0 on 127.0.0.1, read it, close.
//   3. fork; the child asks for SIGKILL when its parent dies (so a crashed
//      test leaves no server behind) and execs moto_s3.py with the port and
//      the bucket, its output into a log file.
//   4. Poll until the server answers a ListObjectsV2 on the bucket, or the
//      child exits (then its log says why; another port is tried).
#include "testing/moto_s3.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/shared_server.h"

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

constexpr auto kStartTimeout = std::chrono::seconds(30);
constexpr int kStartTries = 3;

std::string MotoPython() {
  const char* env = std::getenv("CKPT_MOTO_PYTHON");
  return env != nullptr && *env != '\0' ? env : CKPT_MOTO_PYTHON;
}

}  // namespace

Result<std::unique_ptr<MotoS3>> MotoS3::Start(std::string bucket) {
  const std::string python = MotoPython();
  if (!fs::exists(python)) {
    return FailedPreconditionError(
        "moto's S3 server is not installed (no " + python +
        "): run scripts/install-deps.sh, which makes the project's virtual "
        "environment from requirements.txt");
  }
  std::string dir = MakeTempDir("moto-s3", TempParent());
  if (dir.empty()) return ErrnoError(errno, "make a directory for moto");
  std::unique_ptr<MotoS3> server(new MotoS3());
  server->dir_ = std::move(dir);
  server->bucket_ = std::move(bucket);
  const std::string log = server->dir_ + "/moto.log";

  Status last;
  for (int attempt = 0; attempt < kStartTries; ++attempt) {
    CKPT_ASSIGN_OR_RETURN(int port, FreePort());
    const std::string port_s = std::to_string(port);
    std::vector<std::string> args = {python, CKPT_MOTO_LAUNCHER, port_s,
                                     server->bucket_};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return ErrnoError(errno, "fork for moto");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      const int in = ::open("/dev/null", O_RDONLY);
      if (out >= 0) {
        ::dup2(out, 1);
        ::dup2(out, 2);
      }
      if (in >= 0) ::dup2(in, 0);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    server->pid_ = pid;
    server->endpoint_ = "http://127.0.0.1:" + port_s;

    StorageOptions options = server->MakeStorageOptions();
    options.create = false;
    options.s3.max_attempts = 1;
    options.s3.connect_timeout_ms = 1000;
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline) {
      int wstatus = 0;
      if (::waitpid(pid, &wstatus, WNOHANG) == pid) {
        exited = true;
        server->pid_ = -1;
        last = UnavailableError("moto's S3 server (" + python + " " +
                                CKPT_MOTO_LAUNCHER + ") exited at start" +
                                "; its log:\n" + LogTail(log));
        break;
      }
      Result<std::unique_ptr<Storage>> probe =
          OpenStorage("s3://" + server->bucket_, options);
      if (probe.ok()) return server;
      last = probe.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!exited) {
      return UnavailableError("moto did not answer on " + server->endpoint_ +
                              " within 30 s: " + last.ToString() +
                              "; its log:\n" + LogTail(log));
    }
  }
  return last;
}

Result<MotoS3*> MotoS3::Shared() { return SharedServer<MotoS3>(); }

MotoS3::~MotoS3() {
  if (pid_ > 0) {
    int early = 0;
    if (::waitpid(pid_, &early, WNOHANG) == pid_) {
      // It died under the tests: say why, or every later failure is a
      // mystery.
      std::fprintf(stderr, "moto on %s exited during the tests; its log:\n%s\n",
                   endpoint_.c_str(), LogTail(dir_ + "/moto.log").c_str());
      pid_ = -1;
    }
  }
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int wstatus = 0;
    while (::waitpid(pid_, &wstatus, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &wstatus, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

S3Options MotoS3::Options() const {
  S3Options o;
  o.endpoint = endpoint_;
  o.region = "us-east-1";
  o.access_key_id = "ckpt-test";
  o.secret_access_key = "ckpt-test";
  o.addressing = S3Options::Addressing::kPath;
  o.conditional_writes = false;
  return o;
}

std::string MotoS3::NewRoot(std::string_view name) {
  return UniqueS3Root(bucket_, name);
}

void MotoS3::ExportEnvironment() const { ExportS3Environment(Options()); }

}  // namespace ckpt::testing
