// bench_gc_scale: how garbage collection, retention and listing grow with the
// number of checkpoints in a root.
//
//   bench_gc_scale [--counts 1000,10000] [--dir DIR] [--keep] [--runs R]
//
// For each count N it saves N small checkpoints (a 64-byte tensor and a
// counter) through the API into a fresh file:// root under DIR (default
// /dev/shm where it exists, else /var/tmp), then times, best of R runs
// (default 3):
//   - `ckpt gc ROOT --keep-last 3 --dry-run` run as a process (the CLI
//     built beside this program), catalog off;
//   - GarbageCollect with the same policy and dry_run, in this process;
//   - List();
//   - retention after a save: a manager with keep_last N saves one more
//     step, and its retention deletes the oldest (the save's whole time,
//     its collection of the root included).
// It prints one line per count and the ratios of the largest count to the
// smallest; linear growth is about the ratio of the counts. A measurement,
// not a test: it exits 0 whatever the figures, 1 when a save, a collection
// or the CLI fails, 2 on a usage error.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<int64_t> counts = {1000, 10000};
  std::string dir;
  bool keep = false;
  int runs = 3;
};

[[noreturn]] void Die(const std::string& what, const ckpt::Status& s) {
  std::fprintf(stderr, "bench_gc_scale: %s: %s\n", what.c_str(),
               s.ToString().c_str());
  std::exit(1);
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_gc_scale: %s\nusage: bench_gc_scale [--counts "
               "N,N...] [--dir DIR] [--keep] [--runs R]\n",
               why.c_str());
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--counts") {
      a.counts.clear();
      std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const long long n = std::atoll(list.substr(at, comma - at).c_str());
        if (n < 4) Usage("each count must be at least 4");
        a.counts.push_back(n);
        at = comma + 1;
      }
    } else if (arg == "--dir") {
      a.dir = value();
    } else if (arg == "--keep") {
      a.keep = true;
    } else if (arg == "--runs") {
      a.runs = std::atoi(value().c_str());
      if (a.runs < 1) Usage("--runs must be at least 1");
    } else {
      Usage("unknown argument " + arg);
    }
  }
  if (a.dir.empty()) a.dir = fs::exists("/dev/shm") ? "/dev/shm" : "/var/tmp";
  return a;
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The best of `runs` timings of `fn`.
double Best(int runs, const std::function<void()>& fn) {
  double best = 1e300;
  for (int r = 0; r < runs; ++r) {
    const Clock::time_point t0 = Clock::now();
    fn();
    best = std::min(best, Seconds(Clock::now() - t0));
  }
  return best;
}

ckpt::State SmallState(int64_t step, std::vector<float>& weights,
                       int64_t& counter) {
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i] = static_cast<float>(step) + static_cast<float>(i);
  }
  counter = step;
  ckpt::State state;
  state.AddTensor("weights", ckpt::View(weights))
      .AddTensor("step", ckpt::View(std::span<int64_t>(&counter, 1), {}));
  return state;
}

void Save(ckpt::CheckpointManager& m, int64_t step) {
  std::vector<float> weights(16);
  int64_t counter = 0;
  auto saved = m.Save(step, SmallState(step, weights, counter));
  if (!saved.ok()) Die("save step " + std::to_string(step), saved.status());
}

// Runs the CLI with `args`, its output discarded; exits on failure.
void RunCli(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string program = CKPT_CLI_PATH;
  argv.push_back(program.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, program.c_str(), &actions, nullptr,
                              argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    Die("run " + program,
        ckpt::Status(ckpt::ErrorCode::kAborted, std::string(strerror(err))));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("ckpt gc",
        ckpt::Status(ckpt::ErrorCode::kAborted,
                     "exited with status " + std::to_string(status)));
  }
}

struct Figures {
  int64_t count = 0;
  double create_s = 0;
  double cli_gc_s = 0;
  double gc_s = 0;
  double list_s = 0;
  double retention_save_s = 0;
};

Figures Measure(const Args& args, int64_t count) {
  Figures f;
  f.count = count;
  const fs::path root =
      fs::path(args.dir) / ("bench-gc-scale-" + std::to_string(getpid()) + "-" +
                            std::to_string(count));
  fs::remove_all(root);
  const std::string url = "file://" + root.string();
  {
    // No collection after each save while the root is made: each would
    // walk the whole root, which is what the figures below measure.
    ckpt::Options o;
    o.gc_after_save = false;
    auto m = ckpt::CheckpointManager::Open(url, o);
    if (!m.ok()) Die("open " + url, m.status());
    const Clock::time_point t0 = Clock::now();
    for (int64_t step = 1; step <= count; ++step) Save(**m, step);
    f.create_s = Seconds(Clock::now() - t0);
  }
  ckpt::RetentionPolicy keep3;
  keep3.keep_last = 3;
  f.cli_gc_s = Best(args.runs, [&] {
    RunCli({"gc", url, "--keep-last", "3", "--dry-run", "--catalog", "none"});
  });
  {
    auto m = ckpt::CheckpointManager::Open(url);
    if (!m.ok()) Die("open " + url, m.status());
    f.gc_s = Best(args.runs, [&] {
      auto report = (*m)->GarbageCollect({.dry_run = true, .retention = keep3});
      if (!report.ok()) Die("gc " + url, report.status());
      if (report->deleted_steps.size() != static_cast<size_t>(count - 3)) {
        Die("gc " + url,
            ckpt::Status(ckpt::ErrorCode::kAborted,
                         "would delete " +
                             std::to_string(report->deleted_steps.size()) +
                             " steps"));
      }
    });
    f.list_s = Best(args.runs, [&] {
      auto listed = (*m)->List();
      if (!listed.ok()) Die("list " + url, listed.status());
    });
  }
  {
    // Each save's retention deletes the oldest step.
    ckpt::Options o;
    o.retention.keep_last = static_cast<int>(count);
    auto m = ckpt::CheckpointManager::Open(url, o);
    if (!m.ok()) Die("open " + url, m.status());
    int64_t step = count;
    f.retention_save_s = Best(args.runs, [&] { Save(**m, ++step); });
  }
  if (!args.keep) fs::remove_all(root);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  setenv("CKPT_CATALOG", "none", 1);
  std::printf("%-8s %10s %14s %12s %10s %16s\n", "steps", "create s",
              "ckpt gc -n s", "gc (API) s", "list s", "save+retain s");
  std::vector<Figures> all;
  for (int64_t count : args.counts) {
    const Figures f = Measure(args, count);
    std::printf("%-8lld %10.2f %14.3f %12.3f %10.3f %16.4f\n",
                static_cast<long long>(f.count), f.create_s, f.cli_gc_s, f.gc_s,
                f.list_s, f.retention_save_s);
    std::fflush(stdout);
    all.push_back(f);
  }
  if (all.size() >= 2) {
    const Figures& a = all.front();
    const Figures& b = all.back();
    std::printf(
        "ratio %lld/%lld (steps x%.0f): ckpt gc -n x%.1f, gc (API) x%.1f, "
        "list x%.1f, save+retain x%.1f\n",
        static_cast<long long>(b.count), static_cast<long long>(a.count),
        static_cast<double>(b.count) / static_cast<double>(a.count),
        b.cli_gc_s / a.cli_gc_s, b.gc_s / a.gc_s, b.list_s / a.list_s,
        b.retention_save_s / a.retention_save_s);
  }
  return 0;
}
