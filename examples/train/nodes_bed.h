// The node bed of nodes_test (scripts/node-bed.sh: four nodes on this
// machine, each with its own network, host name and /dev/shm) and what its
// tests share: the trainer's command line across the nodes, the fixture, and
// the state of a run never stopped, made once per test binary.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/session_child.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt::nodes_bed {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::Contains;
using testing::ReadFile;

inline constexpr int kNodes = 4;
inline constexpr int kRanks = 8;  // two a node
// The local tier's root, the same URL on every node: each node's
// /dev/shm is its own.
inline constexpr char kLocalRoot[] = "/dev/shm/ckpt-nodes-test";

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

// mpirun -np 8 across the bed (`mpirun_options` before the program): the
// trainer, 4 epochs of 16 steps, a local save every step (replicated to the
// next node), a durable one every 8, and `extra` arguments.
inline std::vector<std::string> Trainer(
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

// Waits for `job` to exit, or ends it after `seconds`; its exit code, or -1
// if it had to be ended.
inline int WaitOrEnd(Child& job, int seconds) {
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
inline bool WaitPastStep16(Child& job, const std::string& root) {
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
inline void WipeLocalTiers() {
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(Bed::Get()
                  .Script({"exec", std::to_string(i), "rm", "-rf", kLocalRoot})
                  .exit_code,
              0);
  }
}

// What `ls` of the local tier's root shows on node `i` (one name a line).
inline std::string LocalTierOf(int i) {
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
inline const Reference& Uninterrupted() {
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

}  // namespace ckpt::nodes_bed
