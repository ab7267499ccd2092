// bench_root_growth: whether the cost of one save grows with the number of
// committed steps in its root.
//
//   bench_root_growth [--steps 10000] [--s3-steps 1000] [--dir DIR]
//                     [--schemes file,mem,s3] [--window 100] [--bytes 65536]
//                     [--keep] [--json]
//
// For each scheme (file://: a fresh root under DIR, default /dev/shm where
// it exists, so the disk's flushes do not hide what grows, else /var/tmp;
// mem://: the in-process store; s3://: a moto server from the project's
// virtual environment, which the bench starts, --s3-steps steps since each
// save is a dozen HTTP requests) it opens one manager with the default
// options (collection after every save, the lease on; catalog off) and
// saves steps 1 to --steps of a small state (a float tensor of --bytes and
// a counter), each a full save, then does the same with incremental saves
// (every one of a chain incremental against the one before, a new chain
// every 100 saves: the format's longest is 4096), into two roots: one is
// grown to --steps - --window steps and one to 100, then the two save by
// turns, each save timed alone, steps 101 to 100 + --window into the small
// one and the last --window steps into the large one, so that what else the
// machine does weighs on both alike (with the default window of 100 and a
// step count that is a multiple of 100, each window is one whole chain). It
// prints the median save time of each window, for each scheme and mode, and
// ratios.save_at_<steps>_vs_100: the larger of those medians' quotients
// (1.0: a save costs the same in a root of --steps steps as in one of
// 100). A measurement, not a test: it exits 0 whatever the figures, 1 when
// a save fails, 2 on a usage error.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "testing/moto_s3.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  int64_t steps = 10000;
  int64_t s3_steps = 1000;
  std::string dir;
  std::vector<std::string> schemes = {"file", "mem", "s3"};
  int64_t window = 100;
  int64_t bytes = 65536;
  bool keep = false;
  bool json = false;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_root_growth: %s\nusage: bench_root_growth [--steps N] "
               "[--s3-steps N] [--dir DIR] [--schemes file,mem,s3] "
               "[--window W] [--bytes B] [--keep] [--json]\n",
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
    if (arg == "--steps") {
      a.steps = std::atoll(value().c_str());
    } else if (arg == "--s3-steps") {
      a.s3_steps = std::atoll(value().c_str());
    } else if (arg == "--dir") {
      a.dir = value();
    } else if (arg == "--schemes") {
      a.schemes.clear();
      const std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string s = list.substr(at, comma - at);
        if (s != "file" && s != "mem" && s != "s3") {
          Usage("unknown scheme " + s);
        }
        a.schemes.push_back(s);
        at = comma + 1;
      }
    } else if (arg == "--window") {
      a.window = std::atoll(value().c_str());
    } else if (arg == "--bytes") {
      a.bytes = std::atoll(value().c_str());
    } else if (arg == "--keep") {
      a.keep = true;
    } else if (arg == "--json") {
      a.json = true;
    } else {
      Usage("unknown argument " + arg);
    }
  }
  if (a.window < 1) Usage("--window must be at least 1");
  if (std::min(a.steps, a.s3_steps) < 100 + a.window) {
    Usage("--steps and --s3-steps must be at least 100 + window");
  }
  if (a.bytes < 4) Usage("--bytes must be at least 4");
  if (a.dir.empty()) a.dir = fs::exists("/dev/shm") ? "/dev/shm" : "/var/tmp";
  return a;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Run {
  std::string scheme;
  std::string mode;  // "full" or "incremental"
  int64_t steps = 0;
  double at_100_s = 0;
  double at_end_s = 0;
  double total_s = 0;
};

// One root being saved into: its manager and the state it saves.
struct Root {
  std::string url;
  fs::path path;  // file:// only
  std::unique_ptr<ckpt::CheckpointManager> manager;
  std::vector<float> weights;
  int64_t counter = 0;
  int64_t step = 0;  // the last step saved
};

Root OpenRoot(const Args& args, const std::string& scheme,
              const std::string& name, ckpt::testing::MotoS3* moto) {
  Root root;
  root.path = fs::path(args.dir) / name;
  root.url = scheme == "file" ? "file://" + root.path.string()
             : scheme == "s3" ? moto->NewRoot(name)
                              : "mem://" + name;
  if (scheme == "file") fs::remove_all(root.path);
  ckpt::Options o;
  // Incremental chains restart before the format's limit on a chain.
  o.incremental.full_every = 100;
  auto m = ckpt::CheckpointManager::Open(root.url, o);
  if (!m.ok()) {
    std::fprintf(stderr, "bench_root_growth: open %s: %s\n", root.url.c_str(),
                 m.status().ToString().c_str());
    std::exit(1);
  }
  root.manager = std::move(m).value();
  root.weights.resize(static_cast<size_t>(args.bytes) / 4);
  return root;
}

// Saves the next step of `root`; returns the seconds the save took.
double SaveNext(Root& root, bool incremental) {
  const int64_t step = ++root.step;
  // A few values change each step, as a training state's would.
  root.weights[static_cast<size_t>(step) % root.weights.size()] += 1.0f;
  root.counter = step;
  ckpt::State state;
  state.AddTensor("weights", ckpt::View(root.weights))
      .AddTensor("step", ckpt::View(std::span<int64_t>(&root.counter, 1), {}));
  ckpt::SaveOptions save;
  save.incremental = incremental;
  const Clock::time_point t0 = Clock::now();
  auto saved = root.manager->Save(step, state, save);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!saved.ok()) {
    std::fprintf(stderr, "bench_root_growth: save step %lld in %s: %s\n",
                 static_cast<long long>(step), root.url.c_str(),
                 saved.status().ToString().c_str());
    std::exit(1);
  }
  return took;
}

Run Measure(const Args& args, const std::string& scheme, bool incremental,
            ckpt::testing::MotoS3* moto) {
  Run r;
  r.scheme = scheme;
  r.mode = incremental ? "incremental" : "full";
  r.steps = scheme == "s3" ? args.s3_steps : args.steps;
  const std::string name =
      "bench-root-growth-" + std::to_string(getpid()) + "-" + r.mode;
  // Two roots, saved into by turns once grown, so that whatever else the
  // machine does at that moment weighs on both alike: one that holds 100
  // steps (then saves steps 101 to 100 + window) and one that holds
  // steps - window (then saves the last window steps).
  Root small = OpenRoot(args, scheme, name + "-small", moto);
  Root large = OpenRoot(args, scheme, name + "-large", moto);
  const Clock::time_point start = Clock::now();
  while (large.step < r.steps - args.window) SaveNext(large, incremental);
  r.total_s = std::chrono::duration<double>(Clock::now() - start).count();
  while (small.step < 100) SaveNext(small, incremental);
  std::vector<double> at_100, at_end;
  for (int64_t k = 0; k < args.window; ++k) {
    at_100.push_back(SaveNext(small, incremental));
    at_end.push_back(SaveNext(large, incremental));
  }
  r.at_100_s = Median(at_100);
  r.at_end_s = Median(at_end);
  for (Root* root : {&small, &large}) {
    root->manager.reset();
    if (scheme == "file" && !args.keep) fs::remove_all(root->path);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  setenv("CKPT_CATALOG", "none", 1);
  std::vector<Run> runs;
  std::unique_ptr<ckpt::testing::MotoS3> moto;
  std::string s3_skipped;
  for (const std::string& scheme : args.schemes) {
    if (scheme == "s3") {
      auto started = ckpt::testing::MotoS3::Start("growth");
      if (!started.ok()) {
        // Said, not hidden: the figures below then have no s3 line.
        s3_skipped = started.status().ToString();
        std::fprintf(stderr, "bench_root_growth: s3 left out: %s\n",
                     s3_skipped.c_str());
        continue;
      }
      moto = std::move(started).value();
      moto->ExportEnvironment();
    }
    for (bool incremental : {false, true}) {
      runs.push_back(Measure(args, scheme, incremental, moto.get()));
      if (!args.json) {
        const Run& r = runs.back();
        std::printf(
            "%-5s %-12s save at step 100: %8.3f ms, at step %lld: %8.3f ms "
            "(x%.2f); grown in %.1f s\n",
            r.scheme.c_str(), r.mode.c_str(), r.at_100_s * 1e3,
            static_cast<long long>(r.steps), r.at_end_s * 1e3,
            r.at_end_s / r.at_100_s, r.total_s);
        std::fflush(stdout);
      }
    }
  }
  // The headline ratio is over the runs of --steps steps (file, mem); s3's
  // own keys name its step count.
  double worst = 0;
  for (const Run& r : runs) {
    if (r.scheme != "s3") worst = std::max(worst, r.at_end_s / r.at_100_s);
  }
  const std::string key = "save_at_" + std::to_string(args.steps) + "_vs_100";
  if (!args.json) {
    std::printf("ratios.%s (the largest): %.2f\n", key.c_str(), worst);
    return 0;
  }
  std::printf(
      "{\n  \"config\": {\"steps\": %lld, \"window\": %lld, "
      "\"bytes\": %lld, \"dir\": \"%s\", \"cpus\": %ld},\n",
      static_cast<long long>(args.steps), static_cast<long long>(args.window),
      static_cast<long long>(args.bytes), args.dir.c_str(),
      sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("  \"figures\": {\n");
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const std::string p = r.scheme + "_" + r.mode;
    std::printf("    \"%s_save_at_100_seconds\": %.6f,\n", p.c_str(),
                r.at_100_s);
    std::printf("    \"%s_save_at_end_seconds\": %.6f,\n", p.c_str(),
                r.at_end_s);
    std::printf("    \"%s_grow_seconds\": %.3f%s\n", p.c_str(), r.total_s,
                i + 1 < runs.size() ? "," : "");
  }
  std::printf("  },\n  \"ratios\": {\n");
  for (const Run& r : runs) {
    std::printf("    \"%s_%s_save_at_%lld_vs_100\": %.4f,\n", r.scheme.c_str(),
                r.mode.c_str(), static_cast<long long>(r.steps),
                r.at_end_s / r.at_100_s);
  }
  std::printf("    \"%s\": %.4f\n  }\n}\n", key.c_str(), worst);
  return 0;
}
