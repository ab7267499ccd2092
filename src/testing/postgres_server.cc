#include "testing/postgres_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "catalog/sql_catalog.h"
#include "testing/files.h"
#include "testing/free_port.h"

extern char** environ;

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kInstallHint =
    "run scripts/install-deps.sh (make test does) to install the PostgreSQL "
    "server (Debian package postgresql)";

// The newest /usr/lib/postgresql/N/bin with initdb, or $CKPT_PG_BIN.
std::string FindServerBinaries() {
  if (const char* env = std::getenv("CKPT_PG_BIN"); env && *env) return env;
  std::string best;
  int best_version = -1;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = d.path().filename().string();
    const int version = std::atoi(name.c_str());
    if (version > best_version && fs::exists(d.path() / "bin" / "initdb")) {
      best_version = version;
      best = (d.path() / "bin").string();
    }
  }
  return best;
}

// Runs argv (as the `postgres` user when we are root); output goes to `log`.
Status Run(std::vector<std::string> argv, const std::string& log) {
  if (geteuid() == 0) {
    const char* runuser =
        fs::exists("/usr/sbin/runuser") ? "/usr/sbin/runuser" : "runuser";
    argv.insert(argv.begin(), {runuser, "-u", "postgres", "--"});
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0666);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc =
      posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  if (rc != 0) return ErrnoError(rc, "run " + command);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return IOError(command + " failed:\n" + LogTail(log));
  }
  return Status();
}

// Forks a process that waits for `read_fd` to reach end of file (every copy
// of the write end closed: the test binary is gone), then stops the cluster
// in `dir` and removes the folder. It is detached (double fork, own session)
// so that whatever kills the test binary leaves it running.
Status StartWatchdog(int read_fd, int write_fd, const std::string& dir,
                     const std::string& bin) {
  const pid_t middle = fork();
  if (middle < 0) return ErrnoError(errno, "fork the watchdog");
  if (middle == 0) {
    setsid();
    if (fork() != 0) _exit(0);
    close(write_fd);
    const int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    char c;
    while (read(read_fd, &c, 1) < 0 && errno == EINTR) {
    }
    if (fs::exists(dir + "/data/postmaster.pid")) {
      Run({bin + "/pg_ctl", "-D", dir + "/data", "-m", "immediate", "-w",
           "stop"},
          "/dev/null")
          .IgnoreError();
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    _exit(0);
  }
  int status = 0;
  while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<PostgresServer>> PostgresServer::Start() {
  const std::string bin = FindServerBinaries();
  if (bin.empty() || !fs::exists(bin + "/initdb") ||
      !fs::exists(bin + "/pg_ctl")) {
    return FailedPreconditionError(
        "no PostgreSQL server binaries (initdb, pg_ctl) under "
        "/usr/lib/postgresql/*/bin: " +
        std::string(kInstallHint));
  }
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      return FailedPreconditionError("no user postgres to run initdb as: " +
                                     std::string(kInstallHint));
    }
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  // /tmp, not $TMPDIR: the postgres user must reach it, and the socket's
  // path must stay short.
  const std::string dir = MakeTempDir("pg", "/tmp");
  if (dir.empty()) {
    return ErrnoError(errno, "create a temp folder for PostgreSQL");
  }
  auto server = std::unique_ptr<PostgresServer>(new PostgresServer());
  server->dir_ = dir;
  server->bin_ = bin;
  server->owner_pid_ = getpid();
  if (chown(dir.c_str(), uid, gid) != 0) {
    return ErrnoError(errno, "chown " + dir + " to postgres");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe");
  CKPT_RETURN_IF_ERROR(StartWatchdog(fds[0], fds[1], dir, bin));
  close(fds[0]);
  server->watchdog_fd_ = fds[1];

  const std::string data = dir + "/data";
  const std::string log = dir + "/log";
  CKPT_RETURN_IF_ERROR(Run({bin + "/initdb", "-D", data, "-A", "trust", "-U",
                            "postgres", "-E", "UTF8", "--locale=C", "-N"},
                           dir + "/initdb.log"));
  {
    // First match wins: the password user's line goes before initdb's
    // "trust" lines.
    const std::string hba = data + "/pg_hba.conf";
    if (!WriteFile(hba, "host all " + std::string(kPasswordUser) +
                            " 127.0.0.1/32 scram-sha-256\n" + ReadFile(hba))) {
      return IOError("write " + hba);
    }
  }
  Status started;
  for (int attempt = 0; attempt < 3; ++attempt) {
    CKPT_ASSIGN_OR_RETURN(server->port_, FreePort());
    started =
        Run({bin + "/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
             "-c listen_addresses=127.0.0.1 -p " +
                 std::to_string(server->port_) + " -k " + dir +
                 " -c fsync=off -c synchronous_commit=off"
                 " -c full_page_writes=off -c max_connections=60",
             "start"},
            dir + "/pg_ctl.log");
    if (started.ok()) break;
  }
  if (!started.ok()) {
    return started.WithContext("start PostgreSQL (server log: " + LogTail(log) +
                               ")");
  }
  CKPT_ASSIGN_OR_RETURN(server->admin_, catalog::ConnectSql(server->Url()));
  // Two statements: CREATE DATABASE refuses to run inside the implicit
  // transaction of a multi-statement string.
  const std::string user(kPasswordUser);
  CKPT_RETURN_IF_ERROR(server->admin_->Exec("CREATE ROLE " + user +
                                            " LOGIN PASSWORD '" +
                                            std::string(kPassword) + "'"));
  CKPT_RETURN_IF_ERROR(
      server->admin_->Exec("CREATE DATABASE " + user + " OWNER " + user));
  return server;
}

PostgresServer::~PostgresServer() { Stop().IgnoreError(); }

Status PostgresServer::Stop() {
  if (getpid() != owner_pid_) return Status();  // a forked child
  admin_.reset();
  Status s;
  if (fs::exists(dir_ + "/data/postmaster.pid")) {
    s = Run(
        {bin_ + "/pg_ctl", "-D", dir_ + "/data", "-m", "fast", "-w", "stop"},
        dir_ + "/pg_ctl.log");
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (watchdog_fd_ >= 0) close(watchdog_fd_);
  watchdog_fd_ = -1;
  return s;
}

std::string PostgresServer::Url(std::string_view db) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" +
         std::string(db);
}

std::string PostgresServer::PasswordUrl(std::string_view password,
                                        std::string_view db) const {
  return "postgresql://" + std::string(kPasswordUser) + ":" +
         std::string(password) + "@127.0.0.1:" + std::to_string(port_) + "/" +
         std::string(db.empty() ? kPasswordUser : db);
}

Result<std::string> PostgresServer::NewDatabase() {
  const std::string name = "ckpt_test_" + std::to_string(getpid()) + "_" +
                           std::to_string(++databases_);
  CKPT_RETURN_IF_ERROR_CTX(admin_->Exec("CREATE DATABASE " + name),
                           "create database " + name);
  return Url(name);
}

Result<PostgresServer*> SharedPostgresServer() {
  static Result<std::unique_ptr<PostgresServer>> server =
      PostgresServer::Start();
  if (!server.ok()) {
    return server.status().WithContext("the test's PostgreSQL server");
  }
  return server->get();
}

}  // namespace ckpt::testing
