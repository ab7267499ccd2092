// One root, many hands, with real processes (docs/concurrency.md): for every
// pair of the eight mutating operations (stress_util.h) many trials, each on
// a fresh root holding steps 10 to 40. Two parties (ckpt_stress_party for
// the saves, the ckpt CLI for delete, delete --force and gc), each either
// refused at once or waiting up to 3 s for the lease, are set off at random
// moments chosen so that their work on the root often overlaps, and in half
// the trials one of them, at random, is SIGKILLed at a random moment of its
// run. Then a reader of its own opens the root and judges it (stress_util.h,
// Judge): every checkpoint committed and not deleted by a successful
// request loads bit-identical, and every refusal said clearly why.
//
// On file:// every pair; on s3:// (moto) the pairs of full save, delete,
// delete --force and gc. CKPT_STRESS_TRIALS=N runs N trials per pair (by
// default 8, under a sanitizer 2; on s3:// a quarter, at least 1);
// CKPT_STRESS_SEED=S replays a run's choices (the seed is printed; the
// moments depend on how long processes take).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/files.h"
#include "testing/stress_util.h"
#include "testing/temp_dir.h"

extern char** environ;

namespace ckpt {
namespace {

using testing::Backend;
using testing::stress::End;
using testing::stress::Op;
using testing::stress::OpName;
using testing::stress::Outcome;
using testing::stress::Party;
using Clock = std::chrono::steady_clock;

int TrialsPerPair(int by_default) {
  const char* n = std::getenv("CKPT_STRESS_TRIALS");
  return n != nullptr ? std::max(1, std::atoi(n)) : by_default;
}

uint64_t Seed() {
  const char* s = std::getenv("CKPT_STRESS_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : std::random_device()();
}

// What every trial of a run added up to.
struct Totals {
  int trials = 0;
  int operations = 0;
  int kills = 0;      // parties SIGKILLed while they ran
  int committed = 0;  // saves that reported success
  int deleted = 0;    // deletes, gc runs that reported success
  int refused = 0;    // operations that failed, each with a clear reason
  int waited = 0;     // waited for the other party's lease, then ran
  int lost = 0;       // must stay 0
  std::map<std::string, int> reasons;  // of the refusals

  std::string Summary() const {
    std::string s =
        std::to_string(trials) + " trials, " + std::to_string(operations) +
        " operations, " + std::to_string(kills) +
        " kills: " + std::to_string(committed) + " saves committed, " +
        std::to_string(deleted) + " deletes and gc runs done, " +
        std::to_string(refused) + " refused (";
    const char* sep = "";
    for (const auto& [why, n] : reasons) {
      s += sep + why + " " + std::to_string(n);
      sep = ", ";
    }
    return s + "), " + std::to_string(waited) + " waited, then ran; " +
           std::to_string(lost) + " lost";
  }
};

// The command line of `p` on `url`.
std::vector<std::string> CommandOf(const Party& p, const std::string& url) {
  const std::string wait = std::to_string(p.lease_wait);
  switch (p.op) {
    case Op::kDelete:
    case Op::kDeleteForce: {
      std::vector<std::string> args = {CKPT_CLI_PATH,
                                       "delete",
                                       url,
                                       "--step",
                                       std::to_string(p.step),
                                       "--catalog",
                                       "none",
                                       "--lease-wait",
                                       wait};
      if (p.op == Op::kDeleteForce) args.push_back("--force");
      return args;
    }
    case Op::kGc:
      return {CKPT_CLI_PATH, "gc",           url, "--catalog",
              "none",        "--lease-wait", wait};
    default: {
      std::vector<std::string> args = {CKPT_STRESS_PARTY, url,
                                       std::to_string(p.step), wait};
      if (p.incremental) args.push_back("incremental");
      if (p.op == Op::kAsync) args.push_back("async");
      if (p.op == Op::kRetention) {
        args.push_back("keep_last=" +
                       std::to_string(testing::stress::kRetentionKeepLast));
      }
      return args;
    }
  }
}

// A party's process. A save party (ckpt_stress_party) is started early and
// let go (its stdin closed) at its trigger time; the CLI is started then.
struct Process {
  Party party;
  std::vector<std::string> argv;
  std::string out_path, err_path;
  bool waits_for_go = false;
  double trigger_us = 0;          // after the trial's start
  std::optional<double> kill_us;  // after the trigger
  Clock::time_point triggered_at, ended_at;
  pid_t pid = -1;
  int go_fd = -1;  // the write end of its stdin, until it is let go
  bool triggered = false;
  bool ended = false;
  int status = 0;
};

// This process's environment, with the library's warnings on (a party that
// waited for the lease says so there).
std::vector<std::string> ChildEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("CKPT_LOG=")) env.push_back(*e);
  }
  env.push_back("CKPT_LOG=warning");
  return env;
}

// Starts `p`, its stdin a pipe whose write end it keeps (go_fd) when it
// waits for go, else /dev/null.
bool Spawn(Process& p, const std::vector<std::string>& env) {
  int fds[2] = {-1, -1};
  if (p.waits_for_go && pipe2(fds, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (p.waits_for_go) {
    posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, 1, p.out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, p.err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv, envp;
  for (const std::string& a : p.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int rc =
      posix_spawn(&p.pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (p.waits_for_go) {
    close(fds[0]);
    p.go_fd = fds[1];
  }
  return rc == 0;
}

bool SaysReady(const Process& p) {
  std::error_code error;
  return std::filesystem::file_size(p.out_path, error) > 0 && !error;
}

// Runs both parties to their end (or their kill). The save parties start at
// once; when they are ready (or gone) the trial's clock starts, and each
// party is triggered at its time: a save party let go, the CLI started.
// Each is reaped at once: a party waiting for the lease sees a killed
// holder's pid gone only then.
void RunBoth(std::array<Process, 2>& procs) {
  const std::vector<std::string> env = ChildEnvironment();
  for (Process& p : procs) {
    if (p.waits_for_go && !Spawn(p, env)) {
      ADD_FAILURE() << "cannot start " << p.argv[0];
      return;
    }
  }
  std::optional<Clock::time_point> t0;
  // A party waits 3 s for the lease at most: one that runs for two minutes
  // hangs, and is killed so that the test can say so.
  const Clock::time_point hung = Clock::now() + std::chrono::minutes(2);
  while (!procs[0].ended || !procs[1].ended) {
    const Clock::time_point now = Clock::now();
    for (Process& p : procs) {
      if (p.pid < 0 || p.ended) continue;
      int status = 0;
      pid_t r = waitpid(p.pid, &status, WNOHANG);
      const bool due =
          p.triggered && p.kill_us &&
          now >= p.triggered_at + std::chrono::microseconds(
                                      static_cast<int64_t>(*p.kill_us));
      if (r == 0 && now > hung) {
        ADD_FAILURE() << p.argv[0] << " (" << OpName(p.party.op)
                      << ") still runs after two minutes";
      }
      if (r == 0 && (due || now > hung)) {
        kill(p.pid, SIGKILL);
        r = waitpid(p.pid, &status, 0);
      }
      if (r == p.pid) {
        p.ended = true;
        p.ended_at = Clock::now();
        p.status = status;
      }
    }
    if (!t0) {
      bool ready = true;
      for (const Process& p : procs) {
        ready &= !p.waits_for_go || p.ended || SaysReady(p);
      }
      if (ready) t0 = now;
    }
    for (Process& p : procs) {
      if (!t0 || p.triggered || p.ended ||
          now < *t0 + std::chrono::microseconds(
                          static_cast<int64_t>(p.trigger_us))) {
        continue;
      }
      p.triggered = true;
      p.triggered_at = Clock::now();
      if (p.waits_for_go) {
        close(p.go_fd);
        p.go_fd = -1;
      } else if (!Spawn(p, env)) {
        ADD_FAILURE() << "cannot start " << p.argv[0];
        p.ended = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (Process& p : procs) {
    if (p.go_fd >= 0) close(p.go_fd);
  }
}

// What `p`'s process reported, judged as stress_util.h's Outcome; adds to
// `totals`, and to `problems` what is wrong with the process itself.
Outcome OutcomeOf(const Process& p, Totals& totals,
                  std::vector<std::string>& problems) {
  Outcome o;
  o.party = p.party;
  std::string out = testing::ReadFile(p.out_path);
  if (out.starts_with("ready\n")) out.erase(0, 6);
  const std::string err = testing::ReadFile(p.err_path);
  ++totals.operations;
  if (WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL) {
    ++totals.kills;
    o.end = End::kCut;
    return o;
  }
  const int code = WIFEXITED(p.status) ? WEXITSTATUS(p.status) : -1;
  if (code == 1) {
    o.end = End::kFailed;
    o.error = err;
    const std::string why = testing::stress::ErrorKind(err);
    if (!why.empty()) {
      ++totals.refused;
      ++totals.reasons[why];
    }
    return o;
  }
  if (code != 0) {
    problems.push_back(std::string(OpName(p.party.op)) + " ended with " +
                       (WIFSIGNALED(p.status)
                            ? "signal " + std::to_string(WTERMSIG(p.status))
                            : "exit " + std::to_string(code)) +
                       ": " + err);
    o.end = End::kCut;  // judged as if killed: anything may have happened
    return o;
  }
  o.end = End::kDone;
  if (err.find("waiting up to") != std::string::npos) ++totals.waited;
  if (!testing::stress::Saves(p.party.op)) {
    ++totals.deleted;
    return o;
  }
  const std::string want = "committed " + std::to_string(p.party.step) + "\n";
  const size_t at = out.find(want);
  const size_t end = out.find('\n', at + want.size());
  if (at != 0 || end == std::string::npos ||
      out.compare(want.size(), 7, "deleted") != 0) {
    problems.push_back(std::string(OpName(p.party.op)) +
                       " succeeded but reported: " + out);
    return o;
  }
  ++totals.committed;
  std::istringstream deleted(
      out.substr(want.size() + 7, end - want.size() - 7));
  for (int64_t s; deleted >> s;) o.deleted.push_back(s);
  return o;
}

std::string Describe(const Party& p) {
  std::string s = OpName(p.op);
  if (p.step >= 0) s += " of step " + std::to_string(p.step);
  if (p.incremental && p.op != Op::kIncremental) s += " (incremental)";
  if (p.lease_wait > 0) {
    s += ", lease wait " + std::to_string(p.lease_wait) + " s";
  }
  return s;
}

class StressTest : public ::testing::Test {
 protected:
  // Every pair of `ops` (each with itself too), `per_pair` trials each, on
  // fresh roots of `backend`.
  void RunPairs(Backend backend, const std::vector<Op>& ops, int per_pair) {
    const uint64_t seed = Seed();
    std::printf("[ stress ] %s: %d trials per pair, CKPT_STRESS_SEED=%llu\n",
                testing::BackendName(backend).c_str(), per_pair,
                static_cast<unsigned long long>(seed));
    std::mt19937_64 gen(seed);
    const auto start = Clock::now();
    Totals totals;
    for (size_t i = 0; i < ops.size(); ++i) {
      for (size_t k = i; k < ops.size(); ++k) {
        for (int t = 0; t < per_pair; ++t) {
          Trial(backend, ops[i], ops[k], gen, totals);
          if (HasFatalFailure()) return;
        }
      }
    }
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("[ stress ] %s: %s, %.0f s\n",
                testing::BackendName(backend).c_str(), totals.Summary().c_str(),
                seconds);
    EXPECT_EQ(totals.lost, 0);
    // The races happened: parties were refused and killed (a short run may
    // by chance have neither).
    if (totals.trials >= 50) {
      EXPECT_GT(totals.refused, 0);
      EXPECT_GT(totals.kills, 0);
    }
  }

  void Trial(Backend backend, Op a, Op b, std::mt19937_64& gen,
             Totals& totals) {
    testing::TempDir scratch("stress");
    // file:// roots in /dev/shm: hundreds of trials take a minute, not ten.
    testing::TestRoot root(backend, "stress", "/dev/shm");
    {
      Result<std::unique_ptr<Storage>> storage = root.Open();
      ASSERT_TRUE(storage.ok()) << storage.status().ToString();
      Status prepared = testing::stress::Prepare(**storage);
      ASSERT_TRUE(prepared.ok()) << prepared.ToString();
    }
    const std::array<Party, 2> parties =
        testing::stress::PickParties(a, b, gen, /*wait=*/true);
    // A save party touches the root as soon as it is let go; the CLI at the
    // end of its run, most of which is starting up. How long each kind runs
    // from its trigger is learnt as the trials go. The second party is
    // triggered so that the two would end within 15% of the first's run
    // time of each other (either may go first), so that their work on the
    // root overlaps often; and in half the trials one of them is killed at a
    // random moment of its usual run (for the CLI, of its second half,
    // after it has started up).
    auto usual = [&](Op op) {
      const auto it = usual_us_.find(op);
      return it == usual_us_.end() ? 30000.0 : it->second;
    };
    auto uniform = [&](double from, double to) {
      return std::uniform_real_distribution<double>(from, to)(gen);
    };
    const int first = gen() % 2;
    const bool kill = gen() % 2;
    const int victim = gen() % 2;
    std::array<double, 2> trigger_us;
    trigger_us[first] = 0;
    trigger_us[1 - first] = usual(parties[first].op) -
                            usual(parties[1 - first].op) +
                            uniform(-0.15, 0.15) * usual(parties[first].op);
    const double earliest = std::min(trigger_us[0], trigger_us[1]);
    std::array<Process, 2> procs;
    for (int i = 0; i < 2; ++i) {
      Process& p = procs[i];
      p.party = parties[i];
      p.argv = CommandOf(p.party, root.url());
      p.waits_for_go = testing::stress::Saves(p.party.op);
      p.out_path =
          (scratch.path() / ("p" + std::to_string(i) + ".out")).string();
      p.err_path =
          (scratch.path() / ("p" + std::to_string(i) + ".err")).string();
      p.trigger_us = trigger_us[i] - earliest;
      if (kill && i == victim) {
        p.kill_us = uniform(p.waits_for_go ? 0 : 0.5, 1.1) * usual(p.party.op);
      }
    }
    RunBoth(procs);
    for (const Process& p : procs) {
      // A moving average of how long each operation runs from its trigger
      // when it neither waited for the lease nor was killed.
      if (!p.triggered || WIFSIGNALED(p.status) ||
          testing::ReadFile(p.err_path).find("waiting up to") !=
              std::string::npos) {
        continue;
      }
      const double us =
          std::chrono::duration<double, std::micro>(p.ended_at - p.triggered_at)
              .count();
      auto [it, fresh] = usual_us_.emplace(p.party.op, us);
      if (!fresh) it->second = 0.8 * it->second + 0.2 * us;
    }
    ++totals.trials;
    std::vector<std::string> problems;
    std::vector<Outcome> outcomes;
    for (const Process& p : procs) {
      outcomes.push_back(OutcomeOf(p, totals, problems));
    }
    Result<std::unique_ptr<Storage>> storage = root.Open();
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    auto reader = CheckpointManager::Open(*std::move(storage));
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    testing::stress::Judgement j = testing::stress::Judge(
        **reader, outcomes,
        (*reader)->storage().capabilities().atomic_create_if_absent);
    totals.lost += j.lost;
    problems.insert(problems.end(), j.problems.begin(), j.problems.end());
    if (problems.empty()) return;
    std::string what = std::string(OpName(a)) + " with " + OpName(b) + ":";
    for (int i = 0; i < 2; ++i) {
      const char* ends[] = {"done", "failed", "cut"};
      what += "\n  party " + std::to_string(i) + ": " +
              Describe(procs[i].party) + ", " +
              ends[static_cast<int>(outcomes[i].end)] +
              (procs[i].kill_us ? " (kill planned)" : "") +
              "\n    stdout: " + testing::ReadFile(procs[i].out_path) +
              "\n    stderr: " + testing::ReadFile(procs[i].err_path);
    }
    std::string listed;
    for (int64_t s : j.listed) listed += " " + std::to_string(s);
    what += "\n  listed:" + listed;
    for (const std::string& p : problems) what += "\n  " + p;
    ADD_FAILURE() << what;
  }

  // How long each operation's process usually runs, in microseconds.
  std::map<Op, double> usual_us_;
};

TEST_F(StressTest, EveryPairOfOperationsOnAFileRoot) {
  RunPairs(Backend::kFile,
           std::vector<Op>(std::begin(testing::stress::kAllOps),
                           std::end(testing::stress::kAllOps)),
           TrialsPerPair(testing::stress::kSanitized ? 2 : 8));
}

TEST_F(StressTest, SaveDeleteAndGcPairsOnAnS3Root) {
  RunPairs(Backend::kS3, {Op::kFull, Op::kDelete, Op::kDeleteForce, Op::kGc},
           std::max(1, TrialsPerPair(testing::stress::kSanitized ? 2 : 8) / 4));
}

}  // namespace
}  // namespace ckpt
