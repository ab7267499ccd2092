// bench_load_transactional: what the all-or-nothing load costs beside the
// streaming one, on the same checkpoint in one run.
//
//   bench_load_transactional [--gib N] [--rounds R] [--tensors T] [--dir DIR]
//                            [--json]
//
// Saves a state of N GiB (default 1) of F32 tensors to a file:// root (a
// fresh folder under /var/tmp unless --dir), then loads it back, R rounds
// (default 5) of seven modes:
//   streaming      LoadOptions::transactional = false: straight into the
//                  state's buffers (O_DIRECT reads of 1 MiB and more);
//   transactional  the default, in place, by a manager opened with the
//                  default options: the objects not in the page cache, every
//                  chunk read with O_DIRECT into staging memory (mapped by
//                  the manager's first load and kept), checked there, then
//                  copied into the buffers;
//   prepared       the same by a manager opened with
//                  Options::async_staging_prepare_bytes = the state's size:
//                  its staging memory faulted in on a thread from Open on;
//   in_cache       the default with the root's files read into the page
//                  cache first (not timed): every chunk checked where it
//                  lies in the objects' mapped pages, then copied;
//   staged         transactional through a StorageWrapper, which offers no
//                  object views, as an s3:// root loads: every chunk read
//                  into the manager's staging memory, checked, then copied;
//   new_memory     LoadAll: every tensor into new memory of the load's own,
//                  all or nothing (a failed load frees it);
//   streaming_new  streaming into new buffers (allocated, not touched, for
//                  each load): what new memory costs a streaming load.
// Each mode loads cold (the root's pages dropped from the page cache first,
// as after a restart) and warm (right after; O_DIRECT reads leave the page
// cache as it was, so for them this is a second cold read). One cold load
// of each mode comes first and is reported apart: it is the first use of
// the memory the mode needs. The first transactional and prepared loads
// are a resume's: the manager is opened, then the job's state is
// allocated anew (as a restarted job builds its model, here new buffers of
// the state's size, touched), then loaded into, cold; a prepared load
// right after Open, with nothing in between, is printed beside them
// (first_right_after_open_s). After the rounds, R resumes more of each of
// streaming, transactional and prepared, each in a process of its own (this
// program run again with --resume MODE), as a restarted job is: its first
// load, with nothing in the process before it; their medians are the
// resume_s figures (the first loads above come right after the save, in a
// process that has used memory before). It also times the
// library's parallel copy of the state between two buffers already faulted
// in. Prints the medians, the ratios to streaming, and each mode's peak
// resident memory above the state (VmHWM, reset before every load), and
// (--json) the ratios of docs/benchmarks.md:
//   new_memory_vs_streaming   new_memory over streaming_new, the worse of
//                             cold and warm;
//   in_place_vs_floor         transactional over the floor, streaming + the
//                             parallel copy, the worse of cold and warm;
//   first_in_place_vs_floor   the median of the transactional resumes
//                             (each a process's first load) over the cold
//                             floor;
// and prepared_vs_floor, first_prepared_vs_floor the same for prepared,
// in_cache_vs_floor in_cache's (worse of its two) over the warm floor.
// Every load's bytes are checked. A measurement: exits 0 unless a save or a
// load fails.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "util/parallel_copy.h"
#include "util/proc_status.h"

namespace {

using ckpt::ProcStatus;
using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;

void ResetPeak() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Drops the cached pages of every file under `dir`: the next load reads
// them from the disk, as a restarted job does.
void DropCache(const std::string& dir) {
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (!f.is_regular_file()) continue;
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Reads every file under `dir` into the page cache.
void FillCache(const std::string& dir) {
  std::vector<char> buffer(1 << 20);
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (!f.is_regular_file()) continue;
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    while (::read(fd, buffer.data(), buffer.size()) > 0) {
    }
    ::close(fd);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The value element `i` of tensor `t` is saved with.
float Expected(int t, size_t i) {
  return static_cast<float>(t * 7 + i % 1000 + 1);
}

// Exits 1 if a sample of tensor `t`'s `floats` values is not as saved.
void Check(const float* got, int t, size_t floats) {
  for (size_t i = 0; i < floats; i += 4097) {
    if (got[i] != Expected(t, i)) {
      std::fprintf(stderr, "load: wrong value in t%d[%zu]\n", t, i);
      std::exit(1);
    }
  }
}

// The resume of a restarted job (--resume MODE), the first load of this
// process: opens the root as the job does (`prepare_bytes` of staging
// memory from Open for "prepared"), builds its state (new buffers,
// touched, as a job builds its model), drops the root's pages from the
// page cache and loads, cold, all or nothing unless MODE is "streaming".
// Prints the load's seconds.
int ResumeChild(const std::string& dir, const std::string& mode, int tensors,
                size_t floats, uint64_t prepare_bytes) {
  ckpt::Options options;
  options.lease_seconds = 0;
  if (mode == "prepared") options.async_staging_prepare_bytes = prepare_bytes;
  auto opened = ckpt::CheckpointManager::Open("file://" + dir, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::vector<std::vector<float>> built;
  ckpt::State state;
  for (int t = 0; t < tensors; ++t) {
    built.emplace_back(floats);
    state.AddTensor("t" + std::to_string(t), ckpt::View(built.back()));
  }
  DropCache(dir);
  const auto start = Clock::now();
  auto r = (*opened)->Load(1, state, {.transactional = mode != "streaming"});
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  if (!r.ok()) {
    std::fprintf(stderr, "load: %s\n", r.status().ToString().c_str());
    return 1;
  }
  for (int t = 0; t < tensors; ++t) Check(built[t].data(), t, floats);
  std::printf("%.6f\n", seconds);
  return 0;
}

// Runs this program again as ResumeChild in `mode`; its load's seconds.
// Exits 1 if it fails.
double SpawnResume(const std::vector<std::string>& args) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    std::exit(1);
  }
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr,
                                argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (err != 0) {
    std::fprintf(stderr, "spawn a resume: %s\n", std::strerror(err));
    std::exit(1);
  }
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) {
    text.append(buffer, n);
  }
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty()) {
    std::fprintf(stderr, "a resume (%s) failed\n", args[2].c_str());
    std::exit(1);
  }
  return std::atof(text.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1.0;
  int rounds = 5, tensors = 16;
  std::string dir, resume_mode;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--resume" && i + 1 < argc) {  // this program's own use
      resume_mode = argv[++i];
    } else if (a == "--gib" && i + 1 < argc) {
      gib = std::atof(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--tensors" && i + 1 < argc) {
      tensors = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_load_transactional [--gib N] [--rounds R] "
                   "[--tensors T] [--dir DIR] [--json]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const size_t floats = static_cast<size_t>(gib * (1 << 30) / 4 / tensors);
  // Staging memory for the state: each tensor on pages of its own.
  const uint64_t prepare_bytes =
      static_cast<uint64_t>(tensors) * ((floats * 4 + 4095) / 4096 * 4096);
  if (!resume_mode.empty()) {
    return ResumeChild(dir, resume_mode, tensors, floats, prepare_bytes);
  }
  const bool own_dir = dir.empty();
  if (own_dir) {
    std::string t = "/var/tmp/ckpt-bench-load-XXXXXX";
    dir = mkdtemp(t.data());
  }
  std::vector<std::vector<float>> data(tensors, std::vector<float>(floats));
  ckpt::State state;
  for (int t = 0; t < tensors; ++t) {
    for (size_t i = 0; i < floats; ++i) {
      data[t][i] = Expected(t, i);
    }
    state.AddTensor("t" + std::to_string(t), ckpt::View(data[t]));
  }
  const double state_bytes = static_cast<double>(tensors) * floats * 4;
  ckpt::Options options;
  options.lease_seconds = 0;
  auto mgr = ckpt::CheckpointManager::Open("file://" + dir, options);
  if (!mgr.ok()) {
    std::fprintf(stderr, "%s\n", mgr.status().ToString().c_str());
    return 1;
  }
  if (auto s = (*mgr)->Save(1, state); !s.ok()) {
    std::fprintf(stderr, "save: %s\n", s.status().ToString().c_str());
    return 1;
  }
  // The same root through a wrapper: no object views, so transactional
  // loads go through the staging memory.
  auto storage = ckpt::OpenStorage("file://" + dir);
  auto staged_mgr =
      storage.ok()
          ? ckpt::CheckpointManager::Open(
                std::make_unique<ckpt::StorageWrapper>(std::move(*storage)),
                options)
          : ckpt::Result<std::unique_ptr<ckpt::CheckpointManager>>(
                storage.status());
  if (!staged_mgr.ok()) {
    std::fprintf(stderr, "%s\n", staged_mgr.status().ToString().c_str());
    return 1;
  }
  // The managers of the transactional and prepared modes, opened as a
  // resuming job opens them; prepared with the state's size for its
  // staging memory (each tensor on pages of its own).
  ckpt::Options prepared = options;
  prepared.async_staging_prepare_bytes = prepare_bytes;
  std::unique_ptr<ckpt::CheckpointManager> resumed, resumed_prepared;
  enum Mode {
    kStreaming,
    kTransactional,
    kPrepared,
    kInCache,
    kStaged,
    kNewMemory,
    kStreamingNew,
    kModes
  };
  const char* kNames[kModes] = {"streaming",    "transactional", "prepared",
                                "in_cache",     "staged",        "new_memory",
                                "streaming_new"};
  double peak[kModes] = {0, 0, 0, 0, 0, 0, 0};
  // One load: its seconds; the peak resident memory above the state.
  auto load = [&](Mode mode, bool cold) -> double {
    for (auto& v : data) std::memset(v.data(), 0, v.size() * 4);
    // New buffers, not touched: the load's reads fault them in.
    std::vector<std::unique_ptr<float[]>> fresh;
    ckpt::State fresh_state;
    if (mode == kStreamingNew) {
      for (int t = 0; t < tensors; ++t) {
        fresh.push_back(std::make_unique_for_overwrite<float[]>(floats));
        fresh_state.AddTensor(
            "t" + std::to_string(t),
            ckpt::TensorView{ckpt::DType::kF32,
                             {static_cast<int64_t>(floats)},
                             reinterpret_cast<std::byte*>(fresh.back().get()),
                             true});
      }
    }
    if (mode == kInCache) {
      FillCache(dir);
    } else if (cold) {
      DropCache(dir);
    }
    ResetPeak();
    const uint64_t before = ProcStatus("VmRSS");
    const auto start = Clock::now();
    ckpt::CheckpointManager& m = mode == kStaged ? **staged_mgr
                                 : mode == kTransactional || mode == kInCache
                                     ? *resumed
                                 : mode == kPrepared ? *resumed_prepared
                                                     : **mgr;
    ckpt::Status status;
    ckpt::LoadedCheckpoint loaded;
    if (mode == kNewMemory) {
      auto r = m.LoadAll(1);
      status = r.status();
      if (r.ok()) loaded = std::move(*r);
    } else {
      auto r = m.Load(
          1, mode == kStreamingNew ? fresh_state : state,
          {.transactional = mode != kStreaming && mode != kStreamingNew});
      status = r.status();
    }
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    if (!status.ok()) {
      std::fprintf(stderr, "load: %s\n", status.ToString().c_str());
      std::exit(1);
    }
    peak[mode] = std::max(peak[mode], static_cast<double>(ProcStatus("VmHWM")) -
                                          static_cast<double>(before));
    for (int t = 0; t < tensors; ++t) {
      const float* got = data[t].data();
      if (mode == kNewMemory) {
        got = reinterpret_cast<const float*>(
            loaded.state.Find("t" + std::to_string(t))->tensor.data);
      } else if (mode == kStreamingNew) {
        got = fresh[t].get();
      }
      Check(got, t, floats);
    }
    return seconds;
  };
  // A resume: a manager opened on the root with `opts`, the job's state
  // allocated anew and touched (`build`, as a restarted job builds its
  // model) or the buffers there are, then one cold load. Keeps the manager
  // in `keep` (unless null).
  double kept = 0;  // resident memory the last resume's load left
  auto resume = [&](const ckpt::Options& opts, bool build,
                    std::unique_ptr<ckpt::CheckpointManager>* keep) -> double {
    DropCache(dir);
    auto opened = ckpt::CheckpointManager::Open("file://" + dir, opts);
    if (!opened.ok()) {
      std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
      std::exit(1);
    }
    std::vector<std::vector<float>> built;
    ckpt::State built_state;
    if (build) {
      for (int t = 0; t < tensors; ++t) {
        built.emplace_back(floats);
        built_state.AddTensor("t" + std::to_string(t),
                              ckpt::View(built.back()));
      }
    }
    const uint64_t rss = ProcStatus("VmRSS");
    const auto start = Clock::now();
    auto r = (*opened)->Load(1, build ? built_state : state);
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    kept = static_cast<double>(ProcStatus("VmRSS")) - static_cast<double>(rss);
    if (!r.ok()) {
      std::fprintf(stderr, "load: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    for (int t = 0; t < tensors; ++t) {
      Check(build ? built[t].data() : data[t].data(), t, floats);
    }
    if (keep != nullptr) *keep = std::move(*opened);
    return seconds;
  };
  double first[kModes];
  double first_kept = 0;  // by the transactional mode's first load
  for (int m = 0; m < kModes; ++m) {
    first[m] = m == kTransactional ? resume(options, true, &resumed)
               : m == kPrepared    ? resume(prepared, true, &resumed_prepared)
                                   : load(Mode(m), true);
    if (m == kTransactional) first_kept = kept;
  }
  const double first_right_after_open = resume(prepared, false, nullptr);
  std::vector<double> cold[kModes], warm[kModes];
  for (int r = 0; r < rounds; ++r) {
    for (int m = 0; m < kModes; ++m) {
      cold[m].push_back(load(Mode(m), true));
      warm[m].push_back(load(Mode(m), false));
    }
  }
  // Resumes, each the first load of a process of its own, the modes taking
  // turns.
  const char* kResumed[3] = {"streaming", "transactional", "prepared"};
  std::vector<double> resumes[3];
  char gib_text[32];
  std::snprintf(gib_text, sizeof gib_text, "%.17g", gib);
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 3; ++k) {
      resumes[k].push_back(
          SpawnResume({argv[0], "--resume", kResumed[k], "--dir", dir, "--gib",
                       gib_text, "--tensors", std::to_string(tensors)}));
    }
  }
  // The floor's copy: the state into buffers already faulted in, by the
  // parallel copy the transactional load ends with.
  std::vector<std::vector<float>> copies(tensors, std::vector<float>(floats));
  std::vector<ckpt::CopyJob> jobs;
  for (int t = 0; t < tensors; ++t) {
    jobs.push_back({reinterpret_cast<std::byte*>(copies[t].data()),
                    reinterpret_cast<const std::byte*>(data[t].data()),
                    floats * 4});
  }
  std::vector<double> copy_times;
  for (int r = 0; r < std::max(3, rounds); ++r) {
    const auto start = Clock::now();
    if (!ckpt::ParallelCopy(jobs).ok()) return 1;
    copy_times.push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double copy = Median(copy_times);
  const double c0 = Median(cold[kStreaming]), w0 = Median(warm[kStreaming]);
  const double floor_cold = c0 + copy, floor_warm = w0 + copy;
  const double new_vs_streaming =
      std::max(Median(cold[kNewMemory]) / Median(cold[kStreamingNew]),
               Median(warm[kNewMemory]) / Median(warm[kStreamingNew]));
  auto vs_floor = [&](Mode m) {
    return std::max(Median(cold[m]) / floor_cold, Median(warm[m]) / floor_warm);
  };
  const double in_place_vs_floor = vs_floor(kTransactional);
  const double first_in_place_vs_floor = Median(resumes[1]) / floor_cold;
  const double first_prepared_vs_floor = Median(resumes[2]) / floor_cold;
  const double in_cache_vs_floor =
      std::max(Median(cold[kInCache]), Median(warm[kInCache])) / floor_warm;
  std::printf("state: %.0f MiB in %d tensors, %d rounds, %ld cores\n",
              state_bytes / kMiB, tensors, rounds,
              sysconf(_SC_NPROCESSORS_ONLN));
  for (int m = 0; m < kModes; ++m) {
    const double c = Median(cold[m]), w = Median(warm[m]);
    std::printf(
        "%-13s first %.3f s | cold %.3f s (%.2f GB/s, x%.3f) | warm %.3f s "
        "(%.2f GB/s, x%.3f) | peak +%.1f MiB\n",
        kNames[m], first[m], c, state_bytes / c / 1e9, c / c0, w,
        state_bytes / w / 1e9, w / w0, peak[m] / kMiB);
  }
  std::printf(
      "transactional: its first load mapped staging memory and kept it: "
      "resident memory +%.1f MiB\n",
      first_kept / kMiB);
  std::printf(
      "prepared: staging memory %.0f MiB from Open; its first load right "
      "after Open %.3f s\n",
      prepared.async_staging_prepare_bytes / kMiB, first_right_after_open);
  std::printf("resumes, each a process's first load (median of %d):", rounds);
  for (int k = 0; k < 3; ++k) {
    std::printf("%s %s %.3f s (", k ? "," : "", kResumed[k],
                Median(resumes[k]));
    for (size_t r = 0; r < resumes[k].size(); ++r) {
      std::printf("%s%.3f", r ? " " : "", resumes[k][r]);
    }
    std::printf(")");
  }
  std::printf("\n");
  std::printf(
      "parallel copy of the state %.3f s; floor (streaming + copy): cold "
      "%.3f s, warm %.3f s\n",
      copy, floor_cold, floor_warm);
  std::printf(
      "ratios: new_memory_vs_streaming %.3f, in_place_vs_floor %.3f, "
      "first_in_place_vs_floor %.3f (prepared: %.3f, first %.3f; in_cache "
      "%.3f; staged / floor: cold %.3f, warm %.3f)\n",
      new_vs_streaming, in_place_vs_floor, first_in_place_vs_floor,
      vs_floor(kPrepared), first_prepared_vs_floor, in_cache_vs_floor,
      Median(cold[kStaged]) / floor_cold, Median(warm[kStaged]) / floor_warm);
  if (json) {
    std::printf("{\"state_bytes\": %.0f, \"rounds\": %d, \"modes\": {",
                state_bytes, rounds);
    for (int m = 0; m < kModes; ++m) {
      std::printf(
          "%s\"%s\": {\"first_s\": %.4f, \"cold_s\": %.4f, \"warm_s\": "
          "%.4f, \"peak_mib\": %.1f}",
          m ? ", " : "", kNames[m], first[m], Median(cold[m]), Median(warm[m]),
          peak[m] / kMiB);
    }
    std::printf("}, \"resume_s\": {");
    for (int k = 0; k < 3; ++k) {
      std::printf("%s\"%s\": {\"median\": %.4f, \"runs\": [", k ? ", " : "",
                  kResumed[k], Median(resumes[k]));
      for (size_t r = 0; r < resumes[k].size(); ++r) {
        std::printf("%s%.4f", r ? ", " : "", resumes[k][r]);
      }
      std::printf("]}");
    }
    std::printf(
        "}, \"first_right_after_open_s\": %.4f, \"first_load_kept_mib\": "
        "%.1f, \"staging_prepare_bytes\": "
        "%llu, \"floor\": {\"streaming_cold_s\": %.4f, "
        "\"streaming_warm_s\": %.4f, \"parallel_copy_s\": %.4f, \"cold_s\": "
        "%.4f, \"warm_s\": %.4f}, \"ratios\": {\"new_memory_vs_streaming\": "
        "%.4f, \"in_place_vs_floor\": %.4f, \"first_in_place_vs_floor\": "
        "%.4f, \"prepared_vs_floor\": %.4f, \"first_prepared_vs_floor\": "
        "%.4f, \"in_cache_vs_floor\": %.4f}}\n",
        first_right_after_open, first_kept / kMiB,
        static_cast<unsigned long long>(prepared.async_staging_prepare_bytes),
        c0, w0, copy, floor_cold, floor_warm, new_vs_streaming,
        in_place_vs_floor, first_in_place_vs_floor, vs_floor(kPrepared),
        first_prepared_vs_floor, in_cache_vs_floor);
  }
  resumed.reset();
  resumed_prepared.reset();
  staged_mgr->reset();
  mgr->reset();
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
