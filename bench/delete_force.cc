// bench_delete_force: the memory and time `ckpt delete --force` takes to copy
// what a dependant inherits out of the step it deletes.
//
//   bench_delete_force [--gib N] [--chunk-mib C] [--dir DIR] [--keep]
//
// It saves N GiB (default 1) of F32 weights and a small counter as step 1 of
// a file:// root with chunks of C MiB (default 64), changes only the counter
// and saves step 2 incrementally, so step 2 inherits every chunk of the
// weights. It frees the state, then forks a child that opens the root and
// runs Delete(1, {.rewrite_dependants = true}), which copies those chunks into
// step 2. The child's peak resident set size is the delete's, plus the few
// MiB the child starts with (printed beside it): VmHWM from
// /proc/self/status, and ru_maxrss from wait4. Back in the parent it loads
// step 2 and checks every value. It prints the figures beside the target of
// issue #15 (256 MiB) and the bound the rewrite keeps (64 MiB plus one
// chunk). A measurement, not a test: it exits 0 whatever the figures, 1 when
// a save, the delete or the load fails or loads wrong bytes, 2 on a usage
// error. The page cache is counted in neither figure.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/ckpt.h"
#include "util/proc_status.h"

namespace {

using ckpt::ProcStatus;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kTargetMiB = 256.0;  // issue #15: delete --force of 1 GiB
constexpr double kFixedMiB = 64.0;    // the rewrite's bound: this + a chunk

struct Args {
  double gib = 1.0;
  uint64_t chunk_mib = 64;
  std::string dir;  // empty: a fresh directory under /var/tmp
  bool keep = false;
};

[[noreturn]] void Die(const std::string& what, const ckpt::Status& s) {
  std::fprintf(stderr, "bench_delete_force: %s: %s\n", what.c_str(),
               s.ToString().c_str());
  std::exit(1);
}

// Element `i` of the weights: never zero, different from its neighbours, so
// a misplaced chunk is caught.
float Pattern(uint64_t i) {
  const uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^
                     static_cast<uint32_t>(i >> 32) * 0x9e3779b9u;
  return 1.0f + static_cast<float>(x >> 9) * (1.0f / (1 << 23));
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// What the child reports through its pipe.
struct ChildReport {
  int ok = 0;
  double seconds = 0;
  uint64_t rss_at_start = 0;
  uint64_t hwm = 0;
  char error[512] = {};
};

// In the child: the delete, measured. Never returns.
[[noreturn]] void DeleteInChild(const std::string& url, int fd) {
  ChildReport report;
  report.rss_at_start = ProcStatus("VmRSS");
  const auto t0 = std::chrono::steady_clock::now();
  ckpt::Status s;
  {
    auto mgr = ckpt::CheckpointManager::Open(url);
    s = mgr.ok() ? (*mgr)->Delete(1, {.rewrite_dependants = true}).status()
                 : mgr.status();
  }
  report.seconds = Seconds(t0);
  report.hwm = ProcStatus("VmHWM");
  report.ok = s.ok();
  std::snprintf(report.error, sizeof(report.error), "%s", s.ToString().c_str());
  const bool sent = write(fd, &report, sizeof(report)) ==
                    static_cast<ssize_t>(sizeof(report));
  _exit(sent ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_delete_force: %s needs a value\n",
                     f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--gib") {
      a.gib = std::atof(next().c_str());
    } else if (f == "--chunk-mib") {
      a.chunk_mib = std::strtoull(next().c_str(), nullptr, 10);
    } else if (f == "--dir") {
      a.dir = next();
    } else if (f == "--keep") {
      a.keep = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench_delete_force [--gib N] [--chunk-mib C] "
                   "[--dir DIR] [--keep]\n");
      return 2;
    }
  }
  if (!(a.gib > 0) || a.gib > 1024 || a.chunk_mib < 1 || a.chunk_mib > 4096) {
    std::fprintf(stderr, "bench_delete_force: bad arguments\n");
    return 2;
  }
  std::string dir = a.dir;
  bool created_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/var/tmp/ckpt-bench-delete-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("bench_delete_force: mkdtemp /var/tmp");
      return 1;
    }
    dir = tmpl;
    created_dir = true;
  }
  const std::string url = "file://" + dir + "/root";
  const uint64_t chunk = a.chunk_mib << 20;
  const uint64_t elements =
      static_cast<uint64_t>(a.gib * (uint64_t{1} << 30)) / sizeof(float);
  const uint64_t weight_bytes = elements * sizeof(float);

  // Steps 1 and 2; step 2 inherits every chunk of the weights.
  double save_seconds = 0;
  {
    auto weights = std::make_unique_for_overwrite<float[]>(elements);
    for (uint64_t i = 0; i < elements; ++i) weights[i] = Pattern(i);
    std::vector<int64_t> counter = {1};
    ckpt::State state;
    state.AddTensor("weights",
                    ckpt::View(std::span<float>(weights.get(), elements),
                               {static_cast<int64_t>(elements)}));
    state.AddTensor("counter", ckpt::View(counter));
    if (!state.status().ok()) Die("build the state", state.status());
    ckpt::Options o;
    o.chunk_size = chunk;
    o.gc_after_save = false;
    auto mgr = ckpt::CheckpointManager::Open(url, o);
    if (!mgr.ok()) Die("open " + url, mgr.status());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = (*mgr)->Save(1, state);
    save_seconds = Seconds(t0);
    if (!r.ok()) Die("save step 1", r.status());
    counter[0] = 2;
    r = (*mgr)->Save(2, state, {.incremental = true});
    if (!r.ok()) Die("save step 2", r.status());
    if (r->info.depends_on != std::vector<int64_t>{1}) {
      Die("save step 2", ckpt::FailedPreconditionError(
                             "step 2 does not depend on step 1 alone"));
    }
  }  // the state and the manager are gone before the fork

  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("bench_delete_force: pipe");
    return 1;
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("bench_delete_force: fork");
    return 1;
  }
  if (pid == 0) {
    close(fds[0]);
    DeleteInChild(url, fds[1]);
  }
  close(fds[1]);
  ChildReport report;
  const bool got = read(fds[0], &report, sizeof(report)) ==
                   static_cast<ssize_t>(sizeof(report));
  close(fds[0]);
  int status = 0;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid || !got) {
    std::fprintf(stderr, "bench_delete_force: the delete's process failed\n");
    return 1;
  }
  if (!report.ok) Die("delete step 1 --force", ckpt::IOError(report.error));
  const uint64_t maxrss = static_cast<uint64_t>(ru.ru_maxrss) * 1024;

  // Step 2 now stands alone and holds the same values.
  uint64_t copied = 0;
  {
    auto mgr = ckpt::CheckpointManager::Open(url);
    if (!mgr.ok()) Die("open " + url, mgr.status());
    auto listed = (*mgr)->List();
    if (!listed.ok()) Die("list", listed.status());
    if (listed->size() != 1 || listed->front().step != 2 ||
        !listed->front().depends_on.empty()) {
      Die("check the root",
          ckpt::DataLossError("step 2 alone, depending on nothing, was "
                              "expected after the delete"));
    }
    copied = listed->front().bytes;
    auto loaded = (*mgr)->LoadAll(2);
    if (!loaded.ok()) Die("load step 2", loaded.status());
    const ckpt::Entry* w = loaded->state.Find("weights");
    if (w == nullptr || w->tensor.shape.size() != 1 ||
        static_cast<uint64_t>(w->tensor.shape[0]) != elements) {
      Die("load step 2", ckpt::DataLossError("weights missing or misshapen"));
    }
    const auto* got_weights = reinterpret_cast<const float*>(w->tensor.data);
    for (uint64_t i = 0; i < elements; ++i) {
      const float want = Pattern(i);
      if (std::memcmp(&got_weights[i], &want, sizeof(float)) != 0) {
        Die("load step 2",
            ckpt::DataLossError("element " + std::to_string(i) + " differs"));
      }
    }
  }

  if (!a.keep) {
    std::error_code ec;
    if (created_dir) {
      std::filesystem::remove_all(dir, ec);
    } else {
      std::filesystem::remove_all(dir + "/root", ec);
    }
  }

  const double peak_mib = std::max(report.hwm, maxrss) / kMiB;
  const double start_mib = report.rss_at_start / kMiB;
  const double bound_mib = kFixedMiB + chunk / kMiB;
  std::printf("ckpt delete --force: %.2f GiB inherited in chunks of %" PRIu64
              " MiB, root %s%s\n",
              weight_bytes / (kMiB * 1024), a.chunk_mib, url.c_str(),
              a.keep ? " (kept)" : " (removed)");
  std::printf("  save of step 1 (for scale)                 %10.3f s\n",
              save_seconds);
  std::printf(
      "  delete step 1, rewriting step 2            %10.3f s  %.3f GB/s\n",
      report.seconds, copied / report.seconds / 1e9);
  std::printf("  bytes step 2 owns afterwards               %10" PRIu64 "\n",
              copied);
  std::printf("  delete process RSS at its start            %10.1f MiB\n",
              start_mib);
  std::printf("  delete process peak RSS, VmHWM             %10.1f MiB\n",
              report.hwm / kMiB);
  std::printf("  delete process peak RSS, ru_maxrss         %10.1f MiB\n",
              maxrss / kMiB);
  std::printf("  peak above the start                       %10.1f MiB\n",
              peak_mib - start_mib);
  std::printf("  step 2 loaded, every value checked\n");
  std::printf(
      "peak %.1f MiB = %.2f of the %.0f MiB target; %.2f of the bound "
      "%.0f MiB + one chunk (%.0f MiB)\n",
      peak_mib, peak_mib / kTargetMiB, kTargetMiB, peak_mib / bound_mib,
      kFixedMiB, bound_mib);
  return 0;
}
