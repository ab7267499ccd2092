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
// every 100 saves: the format's longest is 4096). Each save is timed
// alone. It prints the median save time over the --window saves after step
// 100 and over the last --window saves (with the default 100 and a step
// count that is a multiple of 100, each window is one whole chain, so the
// two compare chains alike), for each scheme and mode, and
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

Run Measure(const Args& args, const std::string& scheme, bool incremental,
            ckpt::testing::MotoS3* moto) {
  Run r;
  r.scheme = scheme;
  r.mode = incremental ? "incremental" : "full";
  r.steps = scheme == "s3" ? args.s3_steps : args.steps;
  const std::string name =
      "bench-root-growth-" + std::to_string(getpid()) + "-" + r.mode;
  const fs::path path = fs::path(args.dir) / name;
  const std::string url = scheme == "file" ? "file://" + path.string()
                          : scheme == "s3" ? moto->NewRoot(name)
                                           : "mem://" + name;
  if (scheme == "file") fs::remove_all(path);
  std::vector<double> times;
  times.reserve(static_cast<size_t>(r.steps));
  {
    ckpt::Options o;
    // Incremental chains restart before the format's limit on a chain.
    o.incremental.full_every = 100;
    auto m = ckpt::CheckpointManager::Open(url, o);
    if (!m.ok()) {
      std::fprintf(stderr, "bench_root_growth: open %s: %s\n", url.c_str(),
                   m.status().ToString().c_str());
      std::exit(1);
    }
    std::vector<float> weights(static_cast<size_t>(args.bytes) / 4);
    int64_t counter = 0;
    ckpt::SaveOptions save;
    save.incremental = incremental;
    const Clock::time_point start = Clock::now();
    for (int64_t step = 1; step <= r.steps; ++step) {
      // A few values change each step, as a training state's would.
      weights[static_cast<size_t>(step) % weights.size()] += 1.0f;
      counter = step;
      ckpt::State state;
      state.AddTensor("weights", ckpt::View(weights))
          .AddTensor("step", ckpt::View(std::span<int64_t>(&counter, 1), {}));
      const Clock::time_point t0 = Clock::now();
      auto saved = (*m)->Save(step, state, save);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (!saved.ok()) {
        std::fprintf(stderr, "bench_root_growth: save step %lld in %s: %s\n",
                     static_cast<long long>(step), url.c_str(),
                     saved.status().ToString().c_str());
        std::exit(1);
      }
    }
    r.total_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  r.at_100_s = Median(std::vector<double>(times.begin() + 100,
                                          times.begin() + 100 + args.window));
  r.at_end_s =
      Median(std::vector<double>(times.end() - args.window, times.end()));
  if (scheme == "file" && !args.keep) fs::remove_all(path);
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
            "(x%.2f); %lld saves in %.1f s\n",
            r.scheme.c_str(), r.mode.c_str(), r.at_100_s * 1e3,
            static_cast<long long>(r.steps), r.at_end_s * 1e3,
            r.at_end_s / r.at_100_s, static_cast<long long>(r.steps),
            r.total_s);
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
    std::printf("    \"%s_total_seconds\": %.3f%s\n", p.c_str(), r.total_s,
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
