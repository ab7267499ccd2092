// bench_boundary: the C++ side of bench/boundary.py, which measures what
// the Python package's path through the C API (ctypes) adds to a save.
//
//   bench_boundary ROOT COUNT ELEMENTS RUNS
//
// Saves a state of COUNT float32 tensors of ELEMENTS elements each (the
// values fixed, as the Python side makes them) to ROOT, RUNS times (steps
// 1..RUNS, keeping the last one), and prints the seconds of each save, one
// per line. A measurement, not a test: it exits 1 only when a save fails.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bench_boundary ROOT COUNT ELEMENTS RUNS\n");
    return 2;
  }
  const std::string root = argv[1];
  const int64_t count = std::atoll(argv[2]);
  const int64_t elements = std::atoll(argv[3]);
  const int runs = std::atoi(argv[4]);
  std::vector<std::vector<float>> tensors(count);
  for (int64_t i = 0; i < count; ++i) {
    tensors[i].assign(elements, static_cast<float>(i));
  }
  ckpt::Options options;
  options.retention.keep_last = 1;
  auto manager = ckpt::CheckpointManager::Open(root, options);
  if (!manager.ok()) {
    std::fprintf(stderr, "bench_boundary: %s\n",
                 manager.status().ToString().c_str());
    return 1;
  }
  for (int run = 1; run <= runs; ++run) {
    // The state is built inside the timed part, as the Python side builds
    // its entries in every save.
    const auto t0 = std::chrono::steady_clock::now();
    ckpt::State state;
    for (int64_t i = 0; i < count; ++i) {
      state.AddTensor("layers." + std::to_string(i) + ".weight",
                      ckpt::View(tensors[i]));
    }
    auto saved = (*manager)->Save(run, state);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (!saved.ok()) {
      std::fprintf(stderr, "bench_boundary: save %d: %s\n", run,
                   saved.status().ToString().c_str());
      return 1;
    }
    std::printf("%.6f\n", s);
  }
  return 0;
}
