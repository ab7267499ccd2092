// bench_save_memory: how fast a Save and a Load of a large state run, and how
// much memory they need beyond the state itself.
//
//   bench_save_memory [--gib N] [--tensors T] [--dir DIR] [--keep]
//                     [--drop-caches] [--json]
//
// It builds a state of N GiB (default 1) of F32 tensors filled with non-zero
// data, every page touched so the state is resident, then:
//   1. records the peak resident set size (getrusage's ru_maxrss and
//      /proc/self/status's VmHWM),
//   2. runs CheckpointManager::Save to a file:// root,
//   3. records the peak again,
//   4. zeroes the buffers, Loads into them, checks every value, and records
//      the peak a third time.
// The save streams from the caller's buffers, so its peak should rise only by
// small fixed buffers: the figure "peak memory above the state < 64 MiB" is
// printed as PASS or FAIL. It is a measurement, not a test: the program exits
// 0 either way, and 1 only when a save or a load fails.
//
// VmHWM can be reset (writing 5 to /proc/self/clear_refs), so it gives each
// phase its own peak; ru_maxrss cannot, so for the load it is the peak of the
// whole run so far. The page cache is not part of either.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/ckpt.h"
#include "util/proc_status.h"

namespace {

using ckpt::ProcStatus;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kLimitMiB = 64.0;

struct Args {
  double gib = 1.0;
  int tensors = 16;
  std::string dir;  // empty: a fresh directory under /var/tmp
  bool keep = false;
  bool drop_caches = false;
  bool json = false;
};

void Usage(FILE* out) {
  std::fprintf(
      out,
      "usage: bench_save_memory [--gib N] [--tensors T] [--dir DIR] [--keep]\n"
      "                         [--drop-caches] [--json]\n"
      "  --gib N         state size in GiB (default 1; fractions allowed)\n"
      "  --tensors T     number of F32 tensors (default 16)\n"
      "  --dir DIR       checkpoint root (default: a fresh dir under "
      "/var/tmp)\n"
      "  --keep          keep the checkpoint afterwards\n"
      "  --drop-caches   sync and drop the page cache before the load (root)\n"
      "  --json          print one JSON object instead of a table\n");
}

// Returns nullopt (after printing why) on a bad command line.
std::optional<Args> ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_save_memory: %s needs a value\n", argv[i]);
        return nullptr;
      }
      return argv[++i];
    };
    if (arg == "--gib") {
      const char* v = value();
      if (v == nullptr) return std::nullopt;
      char* end = nullptr;
      a.gib = std::strtod(v, &end);
      if (*end != '\0' || !(a.gib > 0) || a.gib > 1024) {
        std::fprintf(stderr, "bench_save_memory: bad --gib %s\n", v);
        return std::nullopt;
      }
    } else if (arg == "--tensors") {
      const char* v = value();
      if (v == nullptr) return std::nullopt;
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (*end != '\0' || n < 1 || n > 100000) {
        std::fprintf(stderr, "bench_save_memory: bad --tensors %s\n", v);
        return std::nullopt;
      }
      a.tensors = static_cast<int>(n);
    } else if (arg == "--dir") {
      const char* v = value();
      if (v == nullptr) return std::nullopt;
      a.dir = v;
    } else if (arg == "--keep") {
      a.keep = true;
    } else if (arg == "--drop-caches") {
      a.drop_caches = true;
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--help" || arg == "-h") {
      Usage(stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "bench_save_memory: unknown argument %s\n", argv[i]);
      Usage(stderr);
      return std::nullopt;
    }
  }
  return a;
}

// Peak resident set size from getrusage, in bytes (ru_maxrss is in KiB).
uint64_t MaxRss() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

// Resets VmHWM to the current RSS. False where the kernel does not allow it.
bool ResetHighWaterMark() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

bool DropCaches() {
  sync();
  std::ofstream out("/proc/sys/vm/drop_caches");
  out << "3";
  out.flush();
  return static_cast<bool>(out);
}

// The value of element `i` of tensor `t`: in [1, 2), never zero, and
// different from element to element so a misplaced chunk is caught.
float Pattern(int t, uint64_t i) {
  const uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^
                     static_cast<uint32_t>(t) * 0x9e3779b9u;
  return 1.0f + static_cast<float>(x >> 9) * (1.0f / (1 << 23));
}

struct Tensor {
  std::unique_ptr<float[]> data;
  uint64_t elements = 0;
};

struct Phase {
  double seconds = 0;
  uint64_t maxrss_before = 0;
  uint64_t maxrss_after = 0;
  uint64_t hwm_before = 0;
  uint64_t hwm_after = 0;
  bool hwm_reset = false;  // VmHWM was reset just before the phase
  double gbps(uint64_t bytes) const { return bytes / seconds / 1e9; }
  // How far the phase raised the peak, by the better of the two measures.
  double above_mib() const {
    const uint64_t before = hwm_reset ? hwm_before : maxrss_before;
    const uint64_t after = hwm_reset ? hwm_after : maxrss_after;
    return after > before ? (after - before) / kMiB : 0.0;
  }
};

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int Fail(std::string_view what, const ckpt::Status& s) {
  std::fprintf(stderr, "bench_save_memory: %.*s: %s\n",
               static_cast<int>(what.size()), what.data(),
               s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Args> parsed = ParseArgs(argc, argv);
  if (!parsed) return 2;
  const Args& args = *parsed;

  // The root: a fresh directory, or the one given.
  std::string dir = args.dir;
  bool created_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/var/tmp/ckpt-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("bench_save_memory: mkdtemp /var/tmp");
      return 1;
    }
    dir = tmpl;
    created_dir = true;
  } else {
    std::error_code ec;
    created_dir = !std::filesystem::exists(dir, ec);
  }

  const uint64_t baseline_rss = ProcStatus("VmRSS");

  // The state: every page written, so it is resident before the save.
  const uint64_t total_elements =
      static_cast<uint64_t>(args.gib * (uint64_t{1} << 30)) / sizeof(float);
  std::vector<Tensor> tensors(args.tensors);
  ckpt::State state;
  uint64_t state_bytes = 0;
  for (int t = 0; t < args.tensors; ++t) {
    Tensor& x = tensors[t];
    x.elements = total_elements / args.tensors +
                 (t == args.tensors - 1 ? total_elements % args.tensors : 0);
    x.data = std::make_unique_for_overwrite<float[]>(x.elements);
    for (uint64_t i = 0; i < x.elements; ++i) x.data[i] = Pattern(t, i);
    state_bytes += x.elements * sizeof(float);
    char name[32];
    std::snprintf(name, sizeof(name), "layer%03d.weight", t);
    state.AddTensor(name, ckpt::View(std::span<float>(x.data.get(), x.elements),
                                     {static_cast<int64_t>(x.elements)}));
  }
  if (!state.status().ok()) return Fail("build the state", state.status());

  auto mgr = ckpt::CheckpointManager::Open(dir, {.create_root = true});
  if (!mgr.ok()) return Fail("open " + dir, mgr.status());
  auto latest = (*mgr)->Latest();
  if (!latest.ok()) return Fail("find the newest step", latest.status());
  const int64_t step = *latest ? **latest + 1 : 0;

  // Save.
  Phase save;
  save.hwm_reset = ResetHighWaterMark();
  save.maxrss_before = MaxRss();
  save.hwm_before = ProcStatus("VmHWM");
  auto t0 = std::chrono::steady_clock::now();
  auto saved = (*mgr)->Save(step, state);
  save.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  save.maxrss_after = MaxRss();
  save.hwm_after = ProcStatus("VmHWM");
  if (!saved.ok()) return Fail("save", saved.status());

  // Load into the same (zeroed, still resident) buffers.
  for (Tensor& x : tensors) {
    std::memset(x.data.get(), 0, x.elements * sizeof(float));
  }
  bool cold = false;
  if (args.drop_caches) {
    cold = DropCaches();
    if (!cold) {
      std::fprintf(stderr,
                   "bench_save_memory: could not drop the page cache (not "
                   "root?); the load reads a warm cache\n");
    }
  }
  Phase load;
  load.hwm_reset = ResetHighWaterMark();
  load.maxrss_before = MaxRss();
  load.hwm_before = ProcStatus("VmHWM");
  t0 = std::chrono::steady_clock::now();
  auto loaded = (*mgr)->Load(step, state);
  load.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  load.maxrss_after = MaxRss();
  load.hwm_after = ProcStatus("VmHWM");
  if (!loaded.ok()) return Fail("load", loaded.status());
  for (int t = 0; t < args.tensors; ++t) {
    const Tensor& x = tensors[t];
    for (uint64_t i = 0; i < x.elements; ++i) {
      const float want = Pattern(t, i);
      if (std::memcmp(&x.data[i], &want, sizeof(float)) != 0) {
        return Fail("load", ckpt::DataLossError(
                                "tensor " + std::to_string(t) + " element " +
                                std::to_string(i) + " differs after the load"));
      }
    }
  }

  const uint64_t on_disk = saved->info.bytes;
  const double above = std::max(
      save.above_mib(), save.maxrss_after > save.maxrss_before
                            ? (save.maxrss_after - save.maxrss_before) / kMiB
                            : 0.0);
  const bool pass = above < kLimitMiB;

  // Clean up: a directory this run created goes entirely; in a directory
  // that was there before, only the checkpoint it wrote.
  if (!args.keep) {
    if (created_dir) {
      mgr->reset();
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    } else if (ckpt::Status s = (*mgr)->Delete(step).status(); !s.ok()) {
      std::fprintf(stderr, "bench_save_memory: delete the checkpoint: %s\n",
                   s.ToString().c_str());
    }
  }

  if (args.json) {
    auto phase = [&](const Phase& p) {
      char buf[512];
      std::snprintf(buf, sizeof(buf),
                    "{\"seconds\": %.4f, \"gb_per_s\": %.4f, "
                    "\"maxrss_before_bytes\": %llu, "
                    "\"maxrss_after_bytes\": %llu, "
                    "\"vmhwm_before_bytes\": %llu, "
                    "\"vmhwm_after_bytes\": %llu, \"vmhwm_reset\": %s, "
                    "\"above_state_mib\": %.2f}",
                    p.seconds, p.gbps(state_bytes),
                    static_cast<unsigned long long>(p.maxrss_before),
                    static_cast<unsigned long long>(p.maxrss_after),
                    static_cast<unsigned long long>(p.hwm_before),
                    static_cast<unsigned long long>(p.hwm_after),
                    p.hwm_reset ? "true" : "false", p.above_mib());
      return std::string(buf);
    };
    std::printf(
        "{\"root\": %s, \"kept\": %s, \"tensors\": %d, \"dtype\": \"F32\", "
        "\"state_bytes\": %llu, \"bytes_written\": %llu, "
        "\"baseline_rss_bytes\": %llu, \"save\": %s, \"load\": %s, "
        "\"load_cold\": %s, \"load_verified\": true, "
        "\"peak_above_state_mib\": %.2f, \"limit_mib\": %.0f, "
        "\"pass\": %s}\n",
        JsonString(dir).c_str(), args.keep ? "true" : "false", args.tensors,
        static_cast<unsigned long long>(state_bytes),
        static_cast<unsigned long long>(on_disk),
        static_cast<unsigned long long>(baseline_rss), phase(save).c_str(),
        phase(load).c_str(), cold ? "true" : "false", above, kLimitMiB,
        pass ? "true" : "false");
    return 0;
  }

  auto mib = [](uint64_t b) { return b / kMiB; };
  std::printf("ckpt save/load memory: %.2f GiB in %d F32 tensors, root %s%s\n",
              state_bytes / (kMiB * 1024), args.tensors, dir.c_str(),
              args.keep ? " (kept)" : " (removed)");
  std::printf("  %-38s %14s %14s\n", "", "save", "load");
  std::printf("  %-38s %14llu %14llu\n", "state bytes",
              static_cast<unsigned long long>(state_bytes),
              static_cast<unsigned long long>(state_bytes));
  std::printf("  %-38s %14.3f %14.3f\n", "seconds", save.seconds, load.seconds);
  std::printf("  %-38s %14.3f %14.3f\n", "GB/s", save.gbps(state_bytes),
              load.gbps(state_bytes));
  std::printf("  %-38s %14.1f %14.1f\n", "peak RSS before, ru_maxrss (MiB)",
              mib(save.maxrss_before), mib(load.maxrss_before));
  std::printf("  %-38s %14.1f %14.1f\n", "peak RSS after, ru_maxrss (MiB)",
              mib(save.maxrss_after), mib(load.maxrss_after));
  std::printf("  %-38s %14.1f %14.1f\n", "peak RSS before, VmHWM (MiB)",
              mib(save.hwm_before), mib(load.hwm_before));
  std::printf("  %-38s %14.1f %14.1f\n", "peak RSS after, VmHWM (MiB)",
              mib(save.hwm_after), mib(load.hwm_after));
  std::printf("  %-38s %14.1f %14.1f\n", "memory above the state (MiB)",
              save.above_mib(), load.above_mib());
  std::printf("  baseline RSS before the state was built: %.1f MiB\n",
              mib(baseline_rss));
  std::printf("  bytes written (data file, with header): %llu\n",
              static_cast<unsigned long long>(on_disk));
  std::printf("  load: %s page cache, every value checked\n",
              cold ? "cold (dropped)" : "warm");
  if (!save.hwm_reset || !load.hwm_reset) {
    std::printf("  (VmHWM could not be reset: figures are whole-run peaks)\n");
  }
  std::printf("peak memory above the state < %.0f MiB: %s (%.1f MiB)\n",
              kLimitMiB, pass ? "PASS" : "FAIL", above);
  return 0;
}
