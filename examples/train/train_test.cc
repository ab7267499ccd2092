// The demo trainer, killed and resumed: whatever moment SIGKILL strikes, a
// run resumed as often as it takes ends with the final state of a run that
// was never stopped, bit for bit — on one rank and under mpirun -np 2. And
// SIGTERM (SIGUSR1 through mpirun) stops it after saving the step it was
// in, with exit code 75.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckpt.h"
#include "format/tier_layout.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/session_child.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::ReadFile;
using testing::WriteFile;

// Every run of the trainer (Command): 4 epochs of 16 steps.
constexpr int64_t kTotalSteps = 64;

// The build found MPI, as it does where scripts/install-deps.sh ran (it
// installs Open MPI): the tests under mpirun need it.
void ExpectMpirun() {
  ASSERT_FALSE(std::string(CKPT_MPIRUN).empty())
      << "built without MPI, so the trainer cannot run under mpirun: run "
         "scripts/install-deps.sh (it installs Open MPI) and configure again";
}

// Where mpirun's ranks keep their shared-memory segments: a folder of this
// test's, removed at its end. In /dev/shm (Open MPI's default) a job killed
// with SIGKILL leaves them behind, thousands over a run of these tests.
const std::string& VaderDir() {
  static const testing::TempDir dir("train-vader", "/dev/shm");
  return dir.string();
}

// Where mpirun keeps its session folder (contact file, PMIx segments): a
// folder of this test's too, for the same reason: a job killed with
// SIGKILL leaves its folder in /tmp, 8 MiB each.
const std::string& SessionDir() {
  static const testing::TempDir dir("train-mpi-sessions", "/tmp");
  return dir.string();
}

// The trainer's command line at `world` ranks (1: no mpirun).
std::vector<std::string> Command(int world, const std::string& root,
                                 const std::string& out,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> cmd;
  if (world > 1) {
    cmd = {CKPT_MPIRUN,
           "--allow-run-as-root",
           "--oversubscribe",
           "--mca",
           "btl",
           "self,vader",
           "--mca",
           "btl_vader_backing_directory",
           VaderDir(),
           "--mca",
           "orte_tmpdir_base",
           SessionDir(),
           "--mca",
           "plm_rsh_agent",
           "false",
           "-np",
           std::to_string(world)};
  }
  // 4 epochs of 16 steps, a save every 3 steps and at every boundary.
  cmd.insert(cmd.end(),
             {CKPT_TRAIN, "--root", root, "--out", out, "--epochs", "4",
              "--samples", "512", "--batch", "32", "--save-every-steps", "3"});
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  return cmd;
}

using Child = testing::SessionChild;

int RunToEnd(const std::vector<std::string>& cmd, const std::string& log) {
  Child c(cmd, log);
  return c.Wait();
}

// The newest step committed in the file root `root` (a step folder with
// its manifest) or marked complete in a local tier under `local` (a
// "tier-committed-" marker in a node's rank folder); -1 for none.
int64_t NewestCommitted(const std::string& root,
                        const std::string& local = "") {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("step-") &&
        fs::exists(e.path() / "MANIFEST.json", ec)) {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
    }
  }
  if (local.empty()) return newest;
  for (const auto& node : fs::directory_iterator(local, ec)) {
    for (const auto& rank : fs::directory_iterator(node.path(), ec)) {
      for (const auto& e : fs::directory_iterator(rank.path(), ec)) {
        int64_t step = 0;
        int world = 0;
        if (format::ParseTierMarkerKey(e.path().filename().string(), &step,
                                       &world)) {
          newest = std::max(newest, step);
        }
      }
    }
  }
  return newest;
}

// Every "resumed from step N" a log shows.
std::vector<int64_t> ResumedSteps(const std::string& log) {
  std::vector<int64_t> out;
  const std::regex re("resumed from step ([0-9]+)");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end;
       ++it) {
    out.push_back(std::stoll((*it)[1]));
  }
  return out;
}

// The lines of `text` holding any of `words`, each indented.
std::string Lines(const std::string& text,
                  const std::vector<std::string>& words) {
  std::string out, line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    for (const std::string& w : words) {
      if (line.find(w) != std::string::npos) {
        out += "  " + line + "\n";
        break;
      }
    }
  }
  return out;
}

// Seconds until `log` shows the runner's first line (it has loaded or
// initialized the state), or the child exited.
double WaitForRunner(Child& c, const std::string& log, Clock::time_point t0) {
  while (ReadFile(log).find("ckpt runner:") == std::string::npos &&
         !c.Exited()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Kills the trainer (with `extra` arguments) `kills` times, runs it to the
// end (after `before_last`), and compares with an uninterrupted run
// without them. `local` is the trainer's local tier folder, if it has one.
// Returns the last run's log.
std::string KillAndCompare(int world, int kills,
                           const std::vector<std::string>& extra = {},
                           const std::function<void()>& before_last = {},
                           const std::string& local = "") {
  const testing::TempDir temp("train-kill" + std::to_string(world));
  const std::string dir = temp.string();
  const std::string reference = dir + "/reference.bin";
  const std::string ref_log_path = dir + "/ref.log";
  const auto t0 = Clock::now();
  Child ref(Command(world, dir + "/ref_root", reference), ref_log_path);
  const double startup = WaitForRunner(ref, ref_log_path, t0);
  EXPECT_EQ(ref.Wait(), 0) << ReadFile(ref_log_path);
  const double training =
      std::chrono::duration<double>(Clock::now() - t0).count() - startup;
  const std::string ref_log = ReadFile(ref_log_path);
  if (ref_log.find("epoch 3: loss") == std::string::npos) {
    ADD_FAILURE() << ref_log;
    return "";
  }

  // One kill in four strikes at a random moment while the trainer starts
  // or loads its checkpoint. The others wait until the run has committed a
  // step newer than the one it resumed from, then strike a random moment
  // within about a step more (as long as the reference took for them):
  // wherever the training, a save or a replication is then. Each of these
  // moves the job on, however much slower than the reference a loaded
  // machine runs it, so the kills land at many different steps, from the
  // first to the last save.
  std::mt19937 gen(std::random_device{}());
  std::uniform_real_distribution<double> early(0.0, startup);
  std::uniform_real_distribution<double> later(0.0, training / kTotalSteps);
  const std::string root = dir + "/root", out = dir + "/final.bin";
  std::set<int64_t> resumed_at;
  int killed_running = 0;
  // One line per run, shown if the kills did not spread: when it was
  // killed, whether it still ran, and what its log said about resuming
  // and saving.
  std::string runs;
  // The kills asked for; where some found the job finished or between
  // steps, up to twenty more until they have landed at several steps.
  auto spread = [&] { return resumed_at.size() >= 4 && killed_running >= 10; };
  for (int kill = 0; kill < kills || (kill < kills + 20 && !spread()); ++kill) {
    const std::string log = dir + "/kill" + std::to_string(kill) + ".log";
    const auto start = Clock::now();
    Child c(Command(world, root, out, extra), log);
    if (kill % 4 == 3 && kill < kills) {
      std::this_thread::sleep_for(std::chrono::duration<double>(early(gen)));
    } else {
      WaitForRunner(c, log, start);
      const std::vector<int64_t> from = ResumedSteps(ReadFile(log));
      const int64_t resumed = from.empty() ? -1 : from.back();
      while (!c.Exited() && NewestCommitted(root, local) <= resumed) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(later(gen)));
    }
    const bool running = !c.Exited();
    if (running) ++killed_running;
    const double at =
        std::chrono::duration<double>(Clock::now() - start).count();
    c.KillSession();
    const std::string text = ReadFile(log);
    for (int64_t s : ResumedSteps(text)) resumed_at.insert(s);
    runs += "run " + std::to_string(kill) + ": killed at " +
            std::to_string(at) + " s" + (running ? "" : " (had exited)") +
            ", newest committed " +
            std::to_string(NewestCommitted(root, local)) + "\n" +
            Lines(text,
                  {"resumed", "restored", "tier", "lease", "warning", "error"});
  }
  if (before_last) before_last();
  const std::string last_log = dir + "/last.log";
  EXPECT_EQ(RunToEnd(Command(world, root, out, extra), last_log), 0)
      << ReadFile(last_log);
  EXPECT_GE(killed_running, 10) << "most kills must hit a running trainer";
  EXPECT_GE(resumed_at.size(), 4u)
      << "the kills should land at many different steps; the runs:\n"
      << runs;
  const std::string a = ReadFile(reference), b = ReadFile(out);
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "final state differs from the uninterrupted run's";
  // The final run prints the same digest as the reference.
  const size_t at = ref_log.find("final state sha256");
  EXPECT_NE(at, std::string::npos) << ref_log;
  if (at == std::string::npos) return "";
  EXPECT_NE(ReadFile(last_log).find(ref_log.substr(at, 84)), std::string::npos)
      << ReadFile(last_log);
  return ReadFile(last_log);
}

TEST(TrainTest, KilledTwentyTimesEndsBitIdentical) { KillAndCompare(1, 20); }

TEST(TrainTest, KilledTwentyTimesUnderMpirunEndsBitIdentical) {
  ASSERT_NO_FATAL_FAILURE(ExpectMpirun());
  KillAndCompare(2, 20);
}

// Tiers under mpirun -np 4 on two simulated nodes, each with its own local
// tier under /dev/shm: a local save every step replicated to the other
// node, a durable one every 8 steps. Killed fifty times, it resumes each
// time from the newest complete step of either tier; then node 1's memory
// is wiped (the node replaced) and the last run recovers its shares from
// node 0's replicas; the end is bit-identical to an uninterrupted run.
TEST(TrainTest, TieredKilledFiftyTimesUnderMpirunEndsBitIdentical) {
  ASSERT_NO_FATAL_FAILURE(ExpectMpirun());
  const testing::TempDir shm("train-tiers", "/dev/shm");
  const std::string local = "file://" + shm.string() + "/node{node}";
  const std::string last = KillAndCompare(
      4, 50,
      {"--local-tier", local, "--local-every", "1", "--durable-every", "8",
       "--replicas", "1", "--nodes", "0,0,1,1"},
      [&] {
        std::error_code ec;
        fs::remove_all(shm.path() / "node1", ec);
        ASSERT_FALSE(ec) << ec.message();
      },
      shm.string());
  EXPECT_NE(last.find("from the local tier (2 ranks' shares fetched from "
                      "peers)"),
            std::string::npos)
      << last;
}

// A catalog file that cannot be opened does not keep the trainer from
// starting: one warning, and it saves and resumes from the root alone.
// --require-catalog refuses to start, naming the catalog.
TEST(TrainTest, AnUnreadableCatalogIsAWarningUnlessRequired) {
  const testing::TempDir temp("train-bad-catalog");
  const std::string dir = temp.string();
  const std::string catalog = dir + "/catalog.sqlite";
  ASSERT_TRUE(WriteFile(catalog, std::string(4096, 'x')));
  const std::string root = dir + "/root", out = dir + "/out.bin";
  const std::string log = dir + "/log";
  ASSERT_EQ(
      RunToEnd(Command(1, root, out, {"--catalog", catalog, "--epochs", "2"}),
               log),
      0)
      << ReadFile(log);
  std::string text = ReadFile(log);
  size_t warnings = 0;
  for (size_t at = text.find("warning"); at != std::string::npos;
       at = text.find("warning", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << text;
  EXPECT_NE(text.find(catalog), std::string::npos) << text;

  ASSERT_EQ(RunToEnd(Command(1, root, out, {"--catalog", catalog}), log), 0)
      << ReadFile(log);
  EXPECT_EQ(ResumedSteps(ReadFile(log)).size(), 1u) << ReadFile(log);

  EXPECT_EQ(RunToEnd(Command(1, root, out,
                             {"--catalog", catalog, "--require-catalog"}),
                     log),
            1);
  text = ReadFile(log);
  EXPECT_NE(text.find("the catalog is required"), std::string::npos) << text;
  EXPECT_NE(text.find(catalog), std::string::npos) << text;
}

// The loss really falls: the last epoch's is well below the first's.
TEST(TrainTest, LossFalls) {
  const testing::TempDir temp("train-loss");
  const std::string dir = temp.string();
  ASSERT_EQ(RunToEnd(Command(1, dir + "/root", dir + "/out.bin"), dir + "/log"),
            0);
  const std::string log = ReadFile(dir + "/log");
  const std::regex re("epoch ([0-9]+): loss ([0-9.]+)");
  std::vector<double> losses;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end;
       ++it) {
    losses.push_back(std::stod((*it)[2]));
  }
  ASSERT_EQ(losses.size(), 4u) << log;
  EXPECT_LT(losses.back(), 0.6 * losses.front()) << log;
}

// SIGTERM in the middle of an epoch, twice: the trainer saves the step it
// is in and exits with 75; the root's newest checkpoint is that step, and
// it verifies. Returns the root, in `dir`.
std::string PreemptAndCheck(int world, int sig, const std::string& dir) {
  const std::string root = dir + "/root", log = dir + "/log";
  Child c(Command(world, root, dir + "/out.bin", {"--step-sleep-ms", "20"}),
          log);
  // Wait until epoch 0 is over, then signal in the middle of epoch 1.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (ReadFile(log).find("epoch 0: loss") == std::string::npos &&
         Clock::now() < deadline && !c.Exited()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  // A second signal right after the first (during that step or its save;
  // runner_test pins one inside the save) must change nothing.
  c.Signal(sig);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  c.Signal(sig);
  const int code = c.Wait();
  const std::string text = ReadFile(log);
  EXPECT_EQ(code, kExitPreempted) << text;
  std::smatch m;
  if (!std::regex_search(text, m,
                         std::regex("preempted: stopped at step ([0-9]+)"))) {
    ADD_FAILURE() << text;
    return root;
  }
  const int64_t step = std::stoll(m[1]);
  EXPECT_GT(step, 16);  // epoch 1 ...
  EXPECT_LT(step, 32);  // ... not at its boundary
  auto mgr = CheckpointManager::Open(root, {.create = false}).value();
  EXPECT_EQ(mgr->Latest().value(), step);
  auto info = mgr->List().value().back();
  EXPECT_EQ(info.metadata["runner.saved_at"], "preemption");
  EXPECT_EQ(info.world_size, world);
  EXPECT_TRUE(mgr->Verify(step)->ok());
  return root;
}

TEST(TrainTest, SigtermMidEpochSavesThatStepAndExits75) {
  const testing::TempDir dir("train-preempt1");
  PreemptAndCheck(1, SIGTERM, dir.string());
}

// mpirun forwards SIGUSR1 to the ranks; all of them stop at the same step.
// The job, saved at 4 ranks, then resumes and finishes at 2: the embedding
// is resharded and the sampler continues where the 4 ranks stopped.
TEST(TrainTest, PreemptedAtFourRanksUnderMpirunFinishesAtTwo) {
  ASSERT_NO_FATAL_FAILURE(ExpectMpirun());
  const testing::TempDir dir("train-preempt4");
  const std::string root = PreemptAndCheck(4, SIGUSR1, dir.string());
  const std::string log = root + "/../resume.log";
  ASSERT_EQ(RunToEnd(Command(2, root, root + "/../out2.bin"), log), 0)
      << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_TRUE(std::regex_search(
      text, std::regex("resumed from step [0-9]+: continuing epoch 1")))
      << text;
  EXPECT_NE(text.find("epoch 3: loss"), std::string::npos) << text;
  auto mgr = CheckpointManager::Open(root, {.create = false}).value();
  EXPECT_EQ(mgr->List().value().back().world_size, 2);
}

}  // namespace
}  // namespace ckpt
