// bench_load_transactional: what the all-or-nothing load costs beside the
// streaming one, on the same checkpoint in one run.
//
//   bench_load_transactional [--gib N] [--rounds R] [--tensors T] [--dir DIR]
//
// Saves a state of N GiB (default 1) of F32 tensors to a file:// root (a
// fresh folder under /var/tmp unless --dir), then loads it back into the
// same buffers R times (default 5) each way, alternating: transactional
// (LoadOptions::transactional, the default: every chunk into the manager's
// staging memory, checked, then one parallel copy into the buffers) and
// streaming (transactional = false: straight into the buffers). One load of
// each mode comes first and is reported apart: the first transactional load
// maps its staging memory, later ones reuse it. Prints the median seconds
// of each mode, their ratio, and each mode's peak resident memory above the
// state (VmHWM, reset before every load). Every load's bytes are checked.
// A measurement: exits 0 unless a save or a load fails.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "proc_status.h"

namespace {

using ckpt::bench::ProcStatus;
using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;

void ResetPeak() { std::ofstream("/proc/self/clear_refs") << "5"; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1.0;
  int rounds = 5, tensors = 16;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gib" && i + 1 < argc) {
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
                   "[--tensors T] [--dir DIR]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const bool own_dir = dir.empty();
  if (own_dir) {
    std::string t = "/var/tmp/ckpt-bench-load-XXXXXX";
    dir = mkdtemp(t.data());
  }
  const size_t floats = static_cast<size_t>(gib * (1 << 30) / 4 / tensors);
  std::vector<std::vector<float>> data(tensors, std::vector<float>(floats));
  ckpt::State state;
  for (int t = 0; t < tensors; ++t) {
    for (size_t i = 0; i < floats; ++i) {
      data[t][i] = static_cast<float>(t * 7 + i % 1000 + 1);
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
  // One load: its seconds and the peak resident memory above the state.
  auto load = [&](bool transactional, double* peak) -> double {
    for (auto& v : data) std::memset(v.data(), 0, v.size() * 4);
    ResetPeak();
    const uint64_t before = ProcStatus("VmRSS");
    const auto start = Clock::now();
    auto r = (*mgr)->Load(1, state, {.transactional = transactional});
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    if (!r.ok()) {
      std::fprintf(stderr, "load: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    *peak = std::max(*peak, static_cast<double>(ProcStatus("VmHWM")) -
                                static_cast<double>(before));
    for (int t = 0; t < tensors; ++t) {
      for (size_t i = 0; i < floats; i += 4097) {
        if (data[t][i] != static_cast<float>(t * 7 + i % 1000 + 1)) {
          std::fprintf(stderr, "load: wrong value in t%d[%zu]\n", t, i);
          std::exit(1);
        }
      }
    }
    return seconds;
  };
  double peak_streaming = 0, peak_transactional = 0;
  const double first_streaming = load(false, &peak_streaming);
  const double first_transactional = load(true, &peak_transactional);
  std::vector<double> streaming, transactional;
  for (int r = 0; r < rounds; ++r) {
    streaming.push_back(load(false, &peak_streaming));
    transactional.push_back(load(true, &peak_transactional));
  }
  const double ms = Median(streaming), mt = Median(transactional);
  std::printf("state: %.0f MiB in %d tensors, %d rounds, %ld cores\n",
              state_bytes / kMiB, tensors, rounds,
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("first load:   streaming %.3f s, transactional %.3f s\n",
              first_streaming, first_transactional);
  std::printf(
      "median load:  streaming %.3f s (%.2f GB/s), transactional "
      "%.3f s (%.2f GB/s)\n",
      ms, state_bytes / ms / 1e9, mt, state_bytes / mt / 1e9);
  std::printf("ratio transactional / streaming: %.3f\n", mt / ms);
  std::printf(
      "peak memory above the state: streaming %.1f MiB, "
      "transactional %.1f MiB\n",
      peak_streaming / kMiB, peak_transactional / kMiB);
  mgr->reset();
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
