// The tiers on nodes of their own: scripts/node-bed.sh makes four nodes on
// this machine, each with its own network (an address on a bridge), host
// name (node0..node3) and memory (its own tmpfs on /dev/shm), and the
// trainer runs across them under mpirun (2 ranks a node, over TCP). The
// tiers find the nodes by host name alone (no --nodes); a node killed
// mid-training (every process, its memory gone) and replaced by an empty
// one costs nothing of the durable tier: the job resumes from the peer
// replicas, bit-identical to a run never stopped. A node capped to a sliver
// of a CPU is named the slowest writer of a save that still commits, and a
// torchrun job of one agent a node saves and loads with ckpt.torch.
//
// Needs root (network namespaces), ip, unshare and nsenter; where they are
// missing the tests are skipped, saying why.
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/session_child.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::Contains;
using testing::ReadFile;

constexpr int kNodes = 4;
constexpr int kRanks = 8;  // two a node
// The local tier's root, the same URL on every node: each node's
// /dev/shm is its own.
constexpr char kLocalRoot[] = "/dev/shm/ckpt-nodes-test";

// The bed, up for the whole suite (one per test binary, named after its
// process so that beds of tests run side by side do not meet).
class Bed {
 public:
  static Bed& Get() {
    static Bed bed;
    return bed;
  }

  // Why the bed cannot be made here (no root, no namespaces), or why
  // making it failed; both empty when it is up.
  const std::string& unavailable() const { return unavailable_; }
  const std::string& broken() const { return broken_; }

  // Runs the bed script with `args` and waits.
  testing::RunResult Script(const std::vector<std::string>& args) {
    std::vector<std::string> all = {name_};
    all.insert(all.end(), args.begin(), args.end());
    return testing::RunProgram(CKPT_NODE_BED, all, scratch_.path());
  }

  // The script's command line, for a child of the test's own.
  std::vector<std::string> Command(const std::vector<std::string>& args) {
    std::vector<std::string> all = {CKPT_NODE_BED, name_};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  // The bed's name, which its namespaces and cgroups carry.
  const std::string& name() const { return name_; }

  ~Bed() {
    if (up_) Script({"down"});
  }

 private:
  Bed() : name_("nt" + std::to_string(getpid())), scratch_("node-bed") {
    // The mpirun the build found, which the script runs in node0.
    setenv("CKPT_MPIRUN", CKPT_MPIRUN, 1);
    if (geteuid() != 0) {
      unavailable_ = "needs root to make network namespaces";
      return;
    }
    for (const char* tool : {"ip", "unshare", "nsenter"}) {
      if (std::system(
              ("command -v " + std::string(tool) + " >/dev/null").c_str()) !=
          0) {
        unavailable_ = std::string("needs ") + tool + " on the PATH";
        return;
      }
    }
    const testing::RunResult up = Script(
        {"up", std::to_string(kNodes), "--owner", std::to_string(getpid())});
    if (up.exit_code != 0) {
      // Root without the capabilities (a container): skipped; any other
      // failure of the bed is the test's.
      (up.err.find("not permitted") != std::string::npos ||
               up.err.find("Permission denied") != std::string::npos
           ? unavailable_
           : broken_) = "cannot make the node bed: " + up.err;
      return;
    }
    up_ = true;
  }

  std::string name_;
  testing::TempDir scratch_;
  std::string unavailable_, broken_;
  bool up_ = false;
};

using Child = testing::SessionChild;

// After the tests, when some were skipped (no cpu cgroup, no PyTorch) and
// none failed, a line that ctest reads as "skipped" (not "passed"): the
// skips' own messages cannot be that line, or they would hide a failure
// of another test in the same run.
class ReportSkips : public ::testing::Environment {
 public:
  void TearDown() override {
    const ::testing::UnitTest& all = *::testing::UnitTest::GetInstance();
    if (all.failed_test_count() > 0 || all.skipped_test_count() == 0) return;
    for (int i = 0; i < all.total_test_suite_count(); ++i) {
      const ::testing::TestSuite& suite = *all.GetTestSuite(i);
      for (int j = 0; j < suite.total_test_count(); ++j) {
        const ::testing::TestResult& r = *suite.GetTestInfo(j)->result();
        if (!r.Skipped()) continue;
        std::printf(
            "nodes_test skipped %s, none failed: %s\n",
            suite.GetTestInfo(j)->name(),
            r.total_part_count() > 0 ? r.GetTestPartResult(0).message() : "");
      }
    }
  }
};
::testing::Environment* const kReportSkips =
    ::testing::AddGlobalTestEnvironment(new ReportSkips);

// mpirun -np 8 across the bed (`mpirun_options` before the program): the
// trainer, 4 epochs of 16 steps, a local save every step (replicated to the
// next node), a durable one every 8, and `extra` arguments.
std::vector<std::string> Trainer(
    const std::string& root, const std::string& out,
    const std::vector<std::string>& mpirun_options = {},
    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(kRanks)};
  args.insert(args.end(), mpirun_options.begin(), mpirun_options.end());
  for (const std::string& a : {std::string(CKPT_TRAIN), std::string("--root"),
                               root, std::string("--out"), out}) {
    args.push_back(a);
  }
  for (const char* a : {"--epochs", "4", "--samples", "512", "--batch", "32",
                        "--save-every-steps", "3", "--local-tier"}) {
    args.push_back(a);
  }
  args.push_back(std::string("file://") + kLocalRoot);
  for (const char* a :
       {"--local-every", "1", "--durable-every", "8", "--replicas", "1"}) {
    args.push_back(a);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return Bed::Get().Command(args);
}

// mpirun -np 8 across the bed: the trainer without tiers, one epoch of 4
// steps, saved at steps 0, 2 and 4. Each step lasts at least 300 ms, so
// that a node slowed once step 0 is saved is slow before step 4's save
// however loaded the machine (slowing takes a fraction of that).
std::vector<std::string> ShortTrainer(const std::string& root,
                                      const std::string& out) {
  return Bed::Get().Command(
      {"mpirun", "-np", std::to_string(kRanks), CKPT_TRAIN, "--root", root,
       "--out", out, "--epochs", "1", "--samples", "128", "--batch", "32",
       "--save-every-steps", "2", "--step-sleep-ms", "300"});
}

// Waits for `job` to exit, or ends it after `seconds`; its exit code, or -1
// if it had to be ended.
int WaitOrEnd(Child& job, int seconds) {
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (!job.Exited() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (job.Exited()) return job.Wait();
  job.KillSession();
  return -1;
}

// Waits until the trainer has committed durable step 16, then a random
// moment of the next few local saves. False if it ended first.
bool WaitPastStep16(Child& job, const std::string& root) {
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (!fs::exists(root + "/step-000000000016") && !job.Exited() &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::mt19937 gen(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::milliseconds(
      std::uniform_int_distribution<int>(0, 300)(gen)));
  return !job.Exited();
}

// Empties the local tier on every node.
void WipeLocalTiers() {
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(Bed::Get()
                  .Script({"exec", std::to_string(i), "rm", "-rf", kLocalRoot})
                  .exit_code,
              0);
  }
}

// What `ls` of the local tier's root shows on node `i` (one name a line).
std::string LocalTierOf(int i) {
  return Bed::Get()
      .Script({"exec", std::to_string(i), "ls", "-1", kLocalRoot})
      .out;
}

class NodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(std::string(CKPT_MPIRUN).empty())
        << "built without MPI: run scripts/install-deps.sh and configure "
           "again";
    if (!Bed::Get().unavailable().empty()) {
      GTEST_SKIP() << "no node bed: " << Bed::Get().unavailable();
    }
    ASSERT_EQ(Bed::Get().broken(), "");
    // Whatever an earlier test left (a failure mid-way): links up, nothing
    // running, every node alive, every local tier empty.
    ASSERT_EQ(Bed::Get().Script({"reset"}).exit_code, 0);
    WipeLocalTiers();
  }
};

// The final state of a run never stopped, and its log, made once.
struct Reference {
  testing::TempDir dir{"nodes-ref"};
  int exit_code = -1;
  std::string log, state;
  // What each node's local tier held at the end (then emptied: another
  // job's shares in it would stop the next job, which refuses them).
  std::vector<std::string> local;
};
const Reference& Uninterrupted() {
  static Reference ref;
  if (ref.exit_code == -1) {
    const std::string log = ref.dir.string() + "/log";
    ref.exit_code = Child(Trainer(ref.dir.string() + "/root",
                                  ref.dir.string() + "/final.bin"),
                          log)
                        .Wait();
    ref.log = ReadFile(log);
    ref.state = ReadFile(ref.dir.string() + "/final.bin");
    for (int i = 0; i < kNodes; ++i) ref.local.push_back(LocalTierOf(i));
    WipeLocalTiers();
  }
  return ref;
}

// A killed node's holder id may be taken by a host process before the node
// is replaced; the bed then finds no process of that node's, rather than
// every process of the machine (whose UTS namespace the new owner of the id
// shares), and refuses to enter it. `reset` brings it back.
TEST_F(NodesTest, AKilledNodesReusedHolderIdNamesNoHostProcess) {
  Bed& bed = Bed::Get();
  ASSERT_EQ(bed.Script({"kill", "node3"}).exit_code, 0);
  const std::string pidfile = "/run/ckpt-node-bed/" + bed.name() + "/node3.pid";
  ASSERT_TRUE(fs::exists(pidfile));
  // This test's own process stands for the one that took the id.
  ASSERT_TRUE(testing::WriteFile(pidfile, std::to_string(getpid()) + "\n"));
  const testing::RunResult pids = bed.Script({"pids", "node3"});
  EXPECT_EQ(pids.exit_code, 0) << pids.err;
  EXPECT_EQ(pids.out, "");
  const testing::RunResult entered = bed.Script({"exec", "node3", "true"});
  EXPECT_NE(entered.exit_code, 0);
  EXPECT_TRUE(Contains(entered.err, "node 3 is down")) << entered.err;
  // The live nodes' processes are still found.
  EXPECT_NE(bed.Script({"pids", "node2"}).out, "");
  ASSERT_EQ(bed.Script({"reset"}).exit_code, 0);
  const testing::RunResult host = bed.Script({"exec", "node3", "hostname"});
  EXPECT_EQ(host.exit_code, 0) << host.err;
  EXPECT_EQ(host.out, "node3\n");
}

// Every rank's host name is its node's: the durable checkpoint records
// node0, node0, node1, ... and each node's local tier holds its own two
// ranks' shares and the replicas of the node before it (found by host
// name: the trainer is given no map of ranks to nodes).
TEST_F(NodesTest, EachNodeIsAHostOfItsOwn) {
  const Reference& ref = Uninterrupted();
  ASSERT_EQ(ref.exit_code, 0) << ref.log;
  const testing::RunResult show = testing::RunProgram(
      CKPT_CLI_PATH, {"show", ref.dir.string() + "/root"}, ref.dir.path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_TRUE(Contains(show.out,
                       "world size  8 (node0, node0, node1, node1, node2, "
                       "node2, node3, node3)"));
  for (int i = 0; i < kNodes; ++i) {
    std::set<std::string> want;
    for (int r :
         {2 * i, 2 * i + 1, (2 * i + 6) % kRanks, (2 * i + 7) % kRanks}) {
      char name[16];
      std::snprintf(name, sizeof(name), "r%05d", r);
      want.insert(name);
    }
    std::set<std::string> got;
    std::istringstream listed(ref.local[i]);
    for (std::string name; std::getline(listed, name);) got.insert(name);
    EXPECT_EQ(got, want) << "node" << i << "'s local tier";
  }
  // The machine's own /dev/shm has none of it.
  EXPECT_FALSE(fs::exists(kLocalRoot));
}

// Counts opens of the tensor data (*.safetensors) in every folder of a
// file root that exists when it starts: a restore that reads the durable
// tier opens them.
class DataOpens {
 public:
  explicit DataOpens(const fs::path& root) : fd_(inotify_init1(IN_NONBLOCK)) {
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_directory() &&
          inotify_add_watch(fd_, e.path().c_str(), IN_OPEN) >= 0) {
        watched_.push_back(e.path());
      }
    }
  }

  // A data object in a watched folder that still exists ("" if none).
  fs::path AnyWatchedData() const {
    std::error_code ec;
    for (const fs::path& d : watched_) {
      for (const auto& e : fs::directory_iterator(d, ec)) {
        if (e.path().extension() == ".safetensors") return e.path();
      }
    }
    return {};
  }
  ~DataOpens() { close(fd_); }

  // Opens since the last call.
  int Count() {
    alignas(inotify_event) char buf[1 << 16];
    int n = 0;
    for (ssize_t len; (len = read(fd_, buf, sizeof(buf))) > 0;) {
      for (char* p = buf; p < buf + len;) {
        auto* ev = reinterpret_cast<inotify_event*>(p);
        if (ev->len > 0 && std::string(ev->name).ends_with(".safetensors")) {
          ++n;
        }
        p += sizeof(inotify_event) + ev->len;
      }
    }
    return n;
  }

 private:
  int fd_;
  std::vector<fs::path> watched_;
};

// Node 2 dies mid-training: every process in it is killed and its memory
// (the tmpfs on /dev/shm, its local tier) is gone; an empty node takes
// its place. The job resumes from the newest step of the local tier,
// node 2's ranks' shares fetched from node 3's replicas, opens no tensor
// data of the durable tier, and ends bit-identical to a run never stopped.
TEST_F(NodesTest, NodeKilledMidTrainingResumesFromPeerReplicas) {
  const Reference& ref = Uninterrupted();
  ASSERT_EQ(ref.exit_code, 0) << ref.log;
  const testing::TempDir dir("nodes-kill");
  const std::string root = dir.string() + "/root";
  const std::string out = dir.string() + "/final.bin";
  {
    Child job(Trainer(root, out), dir.string() + "/killed.log");
    ASSERT_TRUE(WaitPastStep16(job, root))
        << ReadFile(dir.string() + "/killed.log");
    const testing::RunResult killed = Bed::Get().Script({"kill", "2"});
    ASSERT_EQ(killed.exit_code, 0) << killed.err;
    // mpirun sees its daemon on node 2 gone and ends the job (or, on a
    // machine too slow to notice in a minute, the test does).
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!job.Exited() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (job.Exited()) {
      EXPECT_NE(job.Wait(), 0);
    } else {
      job.KillSession();
    }
  }
  // Whatever of the job the other nodes still run goes too; then an empty
  // node 2, its /dev/shm a fresh tmpfs.
  ASSERT_EQ(Bed::Get().Script({"reap"}).exit_code, 0);
  ASSERT_EQ(Bed::Get().Script({"replace", "2"}).exit_code, 0);
  EXPECT_EQ(LocalTierOf(2), "");

  DataOpens opens(root);
  // The count sees an open of one (the watch works).
  const fs::path some = opens.AnyWatchedData();
  ASSERT_FALSE(some.empty());
  EXPECT_FALSE(ReadFile(some).empty());
  EXPECT_EQ(opens.Count(), 1);
  const std::string log = dir.string() + "/resumed.log";
  EXPECT_EQ(Child(Trainer(root, out), log).Wait(), 0) << ReadFile(log);
  const std::string text = ReadFile(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      text, m,
      std::regex("restored step ([0-9]+) from the local tier \\(2 ranks' "
                 "shares fetched from peers\\)")))
      << text;
  EXPECT_GE(std::stoll(m[1]), 16);
  EXPECT_EQ(opens.Count(), 0)
      << "the resume opened tensor data of the durable tier";
  EXPECT_TRUE(ReadFile(out) == ref.state)
      << "final state differs from the uninterrupted run's";
  const size_t at = ref.log.find("final state sha256");
  ASSERT_NE(at, std::string::npos) << ref.log;
  EXPECT_TRUE(Contains(text, ref.log.substr(at, 84)));
}

// Node 1's link goes down mid-save (a network partition; its processes
// live on). With --peer-timeout 3, every rank fails within the timeout and a
// second of pings, and names node 1's ranks as the ones that do not answer
// (node 1's own ranks name every other); nothing partial is committed:
// with the link back, the next start restores the newest whole local step,
// older than the one in flight, and ends bit-identical.
TEST_F(NodesTest, PartitionedNodeFailsEveryRankInBoundedTimeNamingIt) {
  const Reference& ref = Uninterrupted();
  ASSERT_EQ(ref.exit_code, 0) << ref.log;
  const testing::TempDir dir("nodes-partition");
  const std::string root = dir.string() + "/root";
  const std::string out = dir.string() + "/final.bin";
  // Each rank's output, written on its own node (mpirun, in node0, cannot
  // hear node 1 any more); ranks go on to fail on their own after the first
  // exits.
  const std::string outputs = dir.string() + "/ranks";
  constexpr double kTimeout = 3;
  std::vector<std::string> lines(kRanks);
  double seconds = 0;
  {
    Child job(Trainer(root, out,
                      {"--output-filename", outputs, "--mca",
                       "orte_abort_on_non_zero_status", "0"},
                      {"--peer-timeout", "3"}),
              dir.string() + "/mpirun.log");
    ASSERT_TRUE(WaitPastStep16(job, root))
        << ReadFile(dir.string() + "/mpirun.log");
    const auto t0 = Clock::now();
    ASSERT_EQ(Bed::Get().Script({"partition", "1"}).exit_code, 0);
    for (int done = 0;
         done < kRanks && Clock::now() < t0 + std::chrono::seconds(60);) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = 0;
      for (int r = 0; r < kRanks; ++r) {
        const std::string err =
            ReadFile(outputs + "/1/rank." + std::to_string(r) + "/stderr");
        const size_t at = err.find("train: rank");
        if (at == std::string::npos) continue;
        if (lines[r].empty()) {
          seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        }
        lines[r] = err.substr(at, err.find('\n', at) - at);
        ++done;
      }
    }
    // mpirun waits for node 1's daemon, which it cannot reach.
    job.KillSession();
  }
  ASSERT_EQ(Bed::Get().Script({"heal", "1"}).exit_code, 0);
  ASSERT_EQ(Bed::Get().Script({"reap"}).exit_code, 0);
  int64_t in_flight = -1;
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_FALSE(lines[r].empty()) << "no error from rank " << r;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        lines[r], m, std::regex("; (.*) do(es)? not answer a ping")))
        << lines[r];
    if (r == 2 || r == 3) {
      EXPECT_TRUE(Contains(m[1], "ranks 0, 1 (node0)"));
      EXPECT_TRUE(Contains(m[1], "ranks 6, 7 (node3)"));
    } else {
      EXPECT_TRUE(Contains(m[1], "ranks 2, 3 (node1)"));
    }
    if (std::regex_search(lines[r], m,
                          std::regex("transferring step ([0-9]+)"))) {
      in_flight = std::stoll(m[1]);
    }
  }
  // The last rank's error came within the timeout, a second of pings, and
  // room for a loaded machine.
  EXPECT_LT(seconds, kTimeout + 1 + 10);
  std::printf("every rank failed within %.1f s of the partition\n", seconds);

  const std::string log = dir.string() + "/resumed.log";
  EXPECT_EQ(Child(Trainer(root, out), log).Wait(), 0) << ReadFile(log);
  const std::string text = ReadFile(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      text, m, std::regex("restored step ([0-9]+) from the local tier")))
      << text;
  EXPECT_GE(std::stoll(m[1]), 16);
  if (in_flight >= 0) {
    EXPECT_LT(std::stoll(m[1]), in_flight);
  }
  EXPECT_TRUE(ReadFile(out) == ref.state)
      << "final state differs from the uninterrupted run's";
}

// Node 2 is slow: once the job has started (its first save, step 0), its
// processes get half a percent of one CPU between them, in 1 ms slices
// (node-bed.sh slow: a cpu cgroup), while the other nodes run free. The
// job still ends, its saves committed; `ckpt show` names one of node 2's
// ranks (4, 5) as the slowest writer of the newest save; and that step,
// loaded by a new job on nodes all free again, is bit-identical to the
// state the slow job ended with. The cgroup goes with `unslow`.
TEST_F(NodesTest, SlowNodeIsNamedTheSlowestWriter) {
  const testing::TempDir dir("nodes-slow");
  const std::string root = dir.string() + "/root";
  const std::string out = dir.string() + "/final.bin";
  const std::string log = dir.string() + "/slow.log";
  {
    Child job(ShortTrainer(root, out), log);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!fs::exists(root + "/step-000000000000") && !job.Exited() &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_FALSE(job.Exited()) << ReadFile(log);
    const testing::RunResult slowed = Bed::Get().Script({"slow", "2", "0.5"});
    if (Contains(slowed.err, "no cpu cgroup to use")) {
      GTEST_SKIP() << slowed.err;
    }
    ASSERT_EQ(slowed.exit_code, 0) << slowed.err;
    // The newest save starts with node 2 slow already.
    EXPECT_FALSE(fs::exists(root + "/step-000000000004"))
        << "the job saved its last step before node 2 was slowed";
    EXPECT_EQ(WaitOrEnd(job, 120), 0) << ReadFile(log);
  }
  const testing::RunResult show =
      testing::RunProgram(CKPT_CLI_PATH, {"show", root}, dir.path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_TRUE(Contains(show.out, "step        4\n")) << show.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      show.out, m, std::regex("slowest     rank ([0-9]+): write ([0-9]+) ms")))
      << show.out;
  EXPECT_TRUE(m[1] == "4" || m[1] == "5")
      << "the slowest writer is not on node 2:\n"
      << show.out;
  std::printf("with node 2 slow, %s\n", m[0].str().c_str());

  // The node's cgroup, and none once it is fast again.
  const auto cgroup = [] {
    for (const char* base : {"/sys/fs/cgroup/", "/sys/fs/cgroup/cpu/"}) {
      const fs::path p = base + ("ckpt-node-bed-" + Bed::Get().name() + "-n2");
      if (fs::exists(p)) return p;
    }
    return fs::path();
  };
  EXPECT_FALSE(cgroup().empty());
  ASSERT_EQ(Bed::Get().Script({"unslow", "2"}).exit_code, 0);
  EXPECT_TRUE(cgroup().empty()) << cgroup();

  const std::string again = dir.string() + "/loaded.bin";
  const std::string log2 = dir.string() + "/loaded.log";
  Child loaded(ShortTrainer(root, again), log2);
  EXPECT_EQ(WaitOrEnd(loaded, 120), 0) << ReadFile(log2);
  EXPECT_TRUE(Contains(ReadFile(log2), "resumed from step 4"))
      << ReadFile(log2);
  EXPECT_FALSE(ReadFile(out).empty());
  EXPECT_TRUE(ReadFile(again) == ReadFile(out))
      << "step 4 loads other than the state the slow job ended with";
}

// A torchrun job on two nodes, one agent each (c10d rendezvous at node0's
// address), 2 ranks a node over gloo on the bed's network: every rank
// saves a replicated model and optimizer and its rows of a sharded tensor
// with ckpt.torch into a folder both nodes see, loads them back into fresh
// objects bit for bit, and the checkpoint records the ranks' hosts as the
// nodes they ran on, two each. Only in builds with the Python package (not
// the sanitizers' builds, which have no python_test either).
#ifdef CKPT_PYTHON_DIR
TEST_F(NodesTest, TorchrunAgentOnEachNodeSavesAndLoads) {
  const testing::TempDir dir("nodes-torchrun");
  const testing::RunResult torch = testing::RunProgram(
      "/usr/bin/python3", {"-c", "import torch, torch.distributed.run"},
      dir.path());
  if (torch.exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch.distributed.run: "
                 << torch.err;
  }
  const std::string root = dir.string() + "/root";
  std::vector<std::string> logs;
  // One agent a node, as on a cluster: the same command on each.
  std::vector<std::string> agent = {"env", "PYTHONPATH=" CKPT_PYTHON_DIR,
                                    "OMP_NUM_THREADS=1",
                                    "PYTHONDONTWRITEBYTECODE=1"};
  // An instrumented libckpt.so needs its sanitizer loaded first.
  if (std::string(CKPT_PYTHON_PRELOAD) != "") {
    agent.push_back("LD_PRELOAD=" CKPT_PYTHON_PRELOAD);
  }
  for (const char* a :
       {"/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes", "2",
        "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
        "10.77.0.1:29400", "--rdzv_id", "nodes-test",
        // torchrun 1.13 under Python 3.11 cannot parse its own defaults of
        // these (python/tests/torchrun_util.py).
        "--redirects", "1", "--tee", "1", CKPT_TORCHRUN_JOB}) {
    agent.push_back(a);
  }
  agent.push_back(root);
  {
    std::vector<std::unique_ptr<Child>> agents;
    for (int node = 0; node < 2; ++node) {
      logs.push_back(dir.string() + "/agent" + std::to_string(node) + ".log");
      std::vector<std::string> cmd = {"exec", std::to_string(node)};
      cmd.insert(cmd.end(), agent.begin(), agent.end());
      agents.push_back(
          std::make_unique<Child>(Bed::Get().Command(cmd), logs.back()));
    }
    for (int node = 0; node < 2; ++node) {
      EXPECT_EQ(WaitOrEnd(*agents[node], 120), 0) << ReadFile(logs[node]);
    }
  }
  // Each agent's ranks ran on its node and loaded what they saved.
  std::vector<std::string> host_of(4);
  for (int node = 0; node < 2; ++node) {
    const std::string text = ReadFile(logs[node]);
    const std::regex line("rank ([0-9]) of 4 on (\\S+): (.*)");
    int ranks = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line);
         it != std::sregex_iterator(); ++it, ++ranks) {
      SCOPED_TRACE((*it)[0].str());
      EXPECT_EQ((*it)[2], "node" + std::to_string(node));
      EXPECT_EQ((*it)[3], "loaded step 1 bit-identical");
      host_of.at(std::stoi((*it)[1])) = (*it)[2];
    }
    EXPECT_EQ(ranks, 2) << text;
  }
  const testing::RunResult show =
      testing::RunProgram(CKPT_CLI_PATH, {"show", root}, dir.path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  std::string hosts;
  for (const std::string& h : host_of) hosts += (hosts.empty() ? "" : ", ") + h;
  EXPECT_TRUE(Contains(show.out, "world size  4 (" + hosts + ")")) << show.out;
  EXPECT_EQ(std::set<std::string>(host_of.begin(), host_of.end()),
            (std::set<std::string>{"node0", "node1"}));
}
#endif  // CKPT_PYTHON_DIR

}  // namespace
}  // namespace ckpt
