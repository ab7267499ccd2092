// Starting a one-node Ceph cluster and radosgw, by hand, as Ceph's
// vstart.sh does, but smaller:
//   1. Write DIR/ceph.conf: a new fsid, the monitor on a free port of
//      127.0.0.1, no cephx (the S3 user's keys are checked by radosgw
//      itself, whatever the cluster's auth), one copy of everything, few
//      placement groups, an OSD that keeps objects in memory, and every
//      path (data, logs, sockets, pid files) under DIR.
//   2. monmaptool makes the monitor map; ceph-mon --mkfs its store; start
//      ceph-mon in the foreground (so this process holds its pid).
//   3. `ceph osd new` registers OSD 0; ceph-osd --mkfs makes its store;
//      start ceph-osd.
//   4. radosgw-admin creates the test user (and with it the gateway's
//      pools); start radosgw with a beast frontend on a free port.
//   5. Create the bucket through ckpt's own S3 client, retrying until the
//      gateway answers.
// Every daemon gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the test.
#include "testing/rgw.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "storage/s3/s3_client.h"
#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/shared_server.h"

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kStartTries = 2;
constexpr auto kGatewayTimeout = std::chrono::seconds(90);

std::string NewUuid() {
  std::random_device rd;
  std::mt19937_64 gen((uint64_t{rd()} << 32) ^ rd() ^
                      static_cast<uint64_t>(::getpid()));
  const uint64_t a = gen(), b = gen();
  char s[37];
  std::snprintf(
      s, sizeof(s), "%08x-%04x-4%03x-8%03x-%012llx",
      static_cast<unsigned>(a >> 32), static_cast<unsigned>((a >> 16) & 0xffff),
      static_cast<unsigned>(a & 0xfff), static_cast<unsigned>(b >> 52),
      static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return s;
}

// The cluster's configuration. Besides what a one-node cluster needs, it
// keeps the daemons small and quiet on an idle machine: few threads, no
// background lifecycle or quota work, monitor decisions proposed at once
// (the gateway's start-up makes a dozen of them, one after another).
std::string CephConf(const std::string& dir, const std::string& fsid,
                     int mon_port) {
  return "[global]\n"
         "fsid = " +
         fsid +
         "\n"
         "mon host = v2:127.0.0.1:" +
         std::to_string(mon_port) +
         "\n"
         "public addr = 127.0.0.1\n"
         "ms bind ipv6 = false\n"
         "auth cluster required = none\n"
         "auth service required = none\n"
         "auth client required = none\n"
         // Without cephx there is no session key, so the messengers cannot
         // use their 'secure' mode (a daemon's default towards the monitor).
         "ms mon client mode = crc\n"
         "ms mon service mode = crc\n"
         "ms mon cluster mode = crc\n"
         "ms client mode = crc\n"
         "ms service mode = crc\n"
         "ms cluster mode = crc\n"
         "run dir = " +
         dir +
         "/run\n"
         "admin socket = " +
         dir +
         "/run/$name.asok\n"
         "pid file = " +
         dir +
         "/run/$name.pid\n"
         "log file = " +
         dir +
         "/log/$name.log\n"
         "keyring = " +
         dir +
         "/keyring\n"
         "mon data = " +
         dir +
         "/mon\n"
         "osd data = " +
         dir +
         "/osd\n"
         "osd objectstore = memstore\n"
         "memstore device bytes = 4294967296\n"
         "osd pool default size = 1\n"
         "osd pool default min size = 1\n"
         "mon allow pool size one = true\n"
         "mon warn on pool no redundancy = false\n"
         "osd pool default pg num = 8\n"
         "osd pool default pgp num = 8\n"
         "osd pool default pg autoscale mode = off\n"
         "osd crush chooseleaf type = 0\n"
         "mon max pg per osd = 1000\n"
         // A nearly full /tmp must not stop the monitor: it refuses to start
         // when the integer percent of free space is <= crit, and under 1%
         // of a large disk (still GiBs, plenty for a test) rounds to 0.
         "mon data avail warn = 0\n"
         "mon data avail crit = -1\n"
         "paxos propose interval = 0.01\n"
         "paxos min wait = 0.001\n"
         "osd op num shards = 1\n"
         "osd op num threads per shard = 2\n"
         "rgw thread pool size = 32\n"
         "rgw enable lc threads = false\n"
         "rgw enable quota threads = false\n"
         "rgw enable usage log = false\n"
         // The tails of deleted objects go at once, not after radosgw's
         // default two hours: a bench or test that saves and deletes many
         // GiB would otherwise fill the OSD's memory.
         "rgw gc obj min wait = 0\n"
         "rgw gc processor period = 2\n";
}

// Removes the directories of clusters whose test process died without
// cleaning up (SIGKILLed, or killed by ctest's timeout): their daemons died
// with it, but the monitor's store and the logs stayed.
void RemoveOrphans() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(TempParent(), ec)) {
    if (!entry.path().filename().string().starts_with("ckpt-rgw-")) continue;
    const std::string owner = ReadFile(entry.path() / "owner.pid");
    const pid_t pid = static_cast<pid_t>(std::atoi(owner.c_str()));
    // No owner yet: another process may be starting one right now, so only
    // an old directory goes.
    const bool old_and_unowned =
        pid <= 0 &&
        fs::last_write_time(entry.path(), ec) <
            fs::file_time_type::clock::now() - std::chrono::minutes(10);
    if (old_and_unowned || (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

}  // namespace

Status Rgw::Spawn(const std::vector<std::string>& args, const std::string& log,
                  pid_t* pid) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return ErrnoError(errno, "fork for " + args[0]);
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    if (in >= 0) ::dup2(in, 0);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  *pid = child;
  return Status();
}

Status Rgw::RunStep(const std::vector<std::string>& args,
                    const std::string& log, int timeout_s) {
  pid_t pid = -1;
  CKPT_RETURN_IF_ERROR(Spawn(args, log, &pid));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::string command;
  for (const std::string& a : args) command += (command.empty() ? "" : " ") + a;
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wstatus, 0);
      return UnavailableError("`" + command + "` took over " +
                              std::to_string(timeout_s) + " s; its output:\n" +
                              LogTail(log) + Logs());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Status();
  const bool missing = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127;
  return UnavailableError(
      "`" + command + "` failed" +
      (missing ? " (not installed? scripts/install-deps.sh installs ceph-mon, "
                 "ceph-osd, radosgw and ceph-common)"
               : "") +
      "; its output:\n" + LogTail(log) + Logs());
}

std::string Rgw::Logs() const {
  std::string out;
  for (const char* name : {"mon.a", "osd.0", "client.rgw"}) {
    const fs::path log = fs::path(dir_) / "log" / (std::string(name) + ".log");
    if (fs::exists(log)) {
      out += "\n--- " + log.string() + ":\n" + LogTail(log, 1500);
    }
  }
  return out;
}

Status Rgw::CreateBucket() {
  S3Options options = Options();
  options.max_attempts = 1;
  options.connect_timeout_ms = 1000;
  Result<ParsedUrl> url = ParseUrl("s3://" + bucket_);
  if (!url.ok()) return url.status();
  CKPT_ASSIGN_OR_RETURN(
      s3::S3Config config,
      s3::ResolveS3Config(*url, options,
                          [](const char*) -> const char* { return nullptr; }));
  s3::S3Client client(std::move(config), s3::NewCurlTransport());
  s3::S3Request request;
  request.method = "PUT";
  const auto deadline = std::chrono::steady_clock::now() + kGatewayTimeout;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    for (pid_t* pid : {&mon_, &osd_, &rgw_}) {
      int wstatus = 0;
      if (::waitpid(*pid, &wstatus, WNOHANG) == *pid) {
        *pid = -1;
        return UnavailableError("a Ceph daemon exited while radosgw started;" +
                                Logs());
      }
    }
    Result<s3::S3Response> r = client.Send(request, "create bucket " + bucket_);
    if (r.ok() && (r->http.status == 200 || r->http.status == 409)) {
      return Status();
    }
    last = r.ok() ? s3::DescribeHttpError(r->http) : r.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return UnavailableError("radosgw on " + endpoint_ +
                          " did not create bucket " + bucket_ + " within " +
                          std::to_string(kGatewayTimeout.count()) +
                          " s: " + last + Logs());
}

Status Rgw::Boot() {
  if (!WriteFile(fs::path(dir_) / "owner.pid", std::to_string(::getpid()))) {
    return ErrnoError(errno, "write " + dir_ + "/owner.pid");
  }
  for (const char* sub : {"run", "log", "mon", "osd"}) {
    fs::create_directories(fs::path(dir_) / sub);
  }
  CKPT_ASSIGN_OR_RETURN(int mon_port, FreePort());
  CKPT_ASSIGN_OR_RETURN(int rgw_port, FreePort());
  const std::string fsid = NewUuid();
  conf_ = dir_ + "/ceph.conf";
  {
    std::ofstream out(conf_);
    out << CephConf(dir_, fsid, mon_port);
    if (!out) return ErrnoError(errno, "write " + conf_);
  }
  const std::string steps = dir_ + "/log/steps.log";
  const std::string monmap = dir_ + "/monmap";
  CKPT_RETURN_IF_ERROR(
      RunStep({"monmaptool", "--create", "--fsid", fsid, "--addv", "a",
               "[v2:127.0.0.1:" + std::to_string(mon_port) + "]", monmap},
              steps, 30));
  CKPT_RETURN_IF_ERROR(RunStep(
      {"ceph-mon", "-c", conf_, "--mkfs", "-i", "a", "--monmap", monmap}, steps,
      60));
  CKPT_RETURN_IF_ERROR(Spawn({"ceph-mon", "-c", conf_, "-i", "a", "-f"},
                             dir_ + "/log/mon.out", &mon_));
  const std::string osd_uuid = NewUuid();
  CKPT_RETURN_IF_ERROR(RunStep(
      {"ceph", "-c", conf_, "--connect-timeout", "60", "osd", "new", osd_uuid},
      steps, 90));
  CKPT_RETURN_IF_ERROR(RunStep(
      {"ceph-osd", "-c", conf_, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid},
      steps, 60));
  CKPT_RETURN_IF_ERROR(Spawn({"ceph-osd", "-c", conf_, "-i", "0", "-f"},
                             dir_ + "/log/osd.out", &osd_));
  CKPT_RETURN_IF_ERROR(
      RunStep({"radosgw-admin", "-c", conf_, "user", "create", "--uid",
               "ckpt-test", "--display-name", "ckpt test user", "--access-key",
               kAccessKeyId, "--secret-key", kSecretAccessKey},
              steps, 120));
  endpoint_ = "http://127.0.0.1:" + std::to_string(rgw_port);
  CKPT_RETURN_IF_ERROR(Spawn(
      {"radosgw", "-c", conf_, "-n", "client.rgw", "-f", "--rgw-frontends",
       "beast endpoint=127.0.0.1:" + std::to_string(rgw_port)},
      dir_ + "/log/rgw.out", &rgw_));
  return CreateBucket();
}

Result<std::unique_ptr<Rgw>> Rgw::Start(std::string bucket) {
  RemoveOrphans();
  Status last;
  for (int attempt = 0; attempt < kStartTries; ++attempt) {
    std::string dir = MakeTempDir("rgw", TempParent());
    if (dir.empty()) return ErrnoError(errno, "make a directory for Ceph");
    std::unique_ptr<Rgw> server(new Rgw());
    server->dir_ = std::move(dir);
    server->bucket_ = bucket;
    last = server->Boot();
    if (last.ok()) return server;
    // A port taken between FreePort and the daemon's bind is the likely
    // cause of a failed start: try once more on new ports.
  }
  return last;
}

Result<Rgw*> Rgw::Shared() { return SharedServer<Rgw>(); }

std::vector<pid_t> Rgw::pids() const { return {mon_, osd_, rgw_}; }

Rgw::~Rgw() {
  // SIGKILL: the data is thrown away, and a memstore OSD asked to stop
  // first writes every object it holds to disk.
  for (pid_t* pid : {&rgw_, &osd_, &mon_}) {
    if (*pid <= 0) continue;
    int wstatus = 0;
    if (::waitpid(*pid, &wstatus, WNOHANG) == *pid) {
      std::fprintf(stderr,
                   "a Ceph daemon (pid %d) exited during the tests;%s\n",
                   static_cast<int>(*pid), Logs().c_str());
    } else {
      ::kill(*pid, SIGKILL);
      ::waitpid(*pid, &wstatus, 0);
    }
    *pid = -1;
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

S3Options Rgw::Options() const {
  S3Options o;
  o.endpoint = endpoint_;
  o.region = "us-east-1";
  o.access_key_id = kAccessKeyId;
  o.secret_access_key = kSecretAccessKey;
  o.addressing = S3Options::Addressing::kPath;
  // Said, not left to the default: a CKPT_S3_CONDITIONAL_WRITES=0 that
  // another server exported must not turn them off here.
  o.conditional_writes = true;
  return o;
}

std::string Rgw::NewRoot(std::string_view name) {
  return UniqueS3Root(bucket_, name);
}

void Rgw::ExportEnvironment() const { ExportS3Environment(Options()); }

}  // namespace ckpt::testing
