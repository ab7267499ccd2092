// The tiers on nodes of their own: scripts/node-bed.sh makes four nodes on
// this machine, each with its own network (an address on a bridge), host
// name (node0..node3) and memory (its own tmpfs on /dev/shm), and the
// trainer runs across them under mpirun (2 ranks a node, over TCP). The
// tiers find the nodes by host name alone (no --nodes); a node killed
// mid-training (every process, its memory gone) and replaced by an empty
// one costs nothing of the durable tier: the job resumes from the peer
// replicas, bit-identical to a run never stopped. A node capped to a sliver
// of a CPU is named the slowest writer of a save that still commits, and a
// torchrun job of one agent a node saves and loads with ckpt.torch. A node
// cut off by the network: nodes_partition_test.cc, in the same binary.
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
#include "nodes_bed.h"
#include "testing/files.h"
#include "testing/session_child.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

using namespace nodes_bed;

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
      CKPT_TEST_PYTHON, {"-c", "import torch, torch.distributed.run"},
      dir.path());
  if (torch.exit_code != 0) {
    GTEST_SKIP() << CKPT_TEST_PYTHON " cannot import torch.distributed.run: "
                 << torch.err;
  }
  const std::string root = dir.string() + "/root";
  std::vector<std::string> logs;
  // One agent a node, as on a cluster: the same command on each.
  // torchrun's agents make a torchelastic_* folder in TMPDIR and leave it
  // behind: in the test's folder, removed with it.
  const std::string tmp = dir.string() + "/tmp";
  std::filesystem::create_directories(tmp);
  std::vector<std::string> agent = {
      "env", "PYTHONPATH=" CKPT_PYTHON_DIR, "OMP_NUM_THREADS=1",
      "PYTHONDONTWRITEBYTECODE=1", "TMPDIR=" + tmp};
  // An instrumented libckpt.so needs its sanitizer loaded first.
  if (std::string(CKPT_PYTHON_PRELOAD) != "") {
    agent.push_back("LD_PRELOAD=" CKPT_PYTHON_PRELOAD);
  }
  for (const char* a :
       {CKPT_TEST_PYTHON, "-m", "torch.distributed.run", "--nnodes", "2",
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
