// The saver the kill test SIGKILLs: saves StepModel(step, 1) for step =
// FIRST, FIRST+1, ... into ROOT (keeping the last 3), and after each save
// returns success writes "committed STEP\n" to stdout, unbuffered, so the
// test knows which saves it must find again.
//
//   ckpt_kill_saver ROOT FIRST [COUNT]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/checkpoint_manager.h"
#include "testing/step_model.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ROOT FIRST [COUNT]\n", argv[0]);
    return 2;
  }
  const int64_t first = std::atoll(argv[2]);
  const int64_t count = argc > 3 ? std::atoll(argv[3]) : 1000;
  ckpt::Options options;
  options.retention.keep_last = 3;
  options.chunk_size = 4096;
  auto mgr = ckpt::CheckpointManager::Open(argv[1], options);
  if (!mgr.ok()) {
    std::fprintf(stderr, "%s\n", mgr.status().ToString().c_str());
    return 1;
  }
  for (int64_t step = first; step < first + count; ++step) {
    ckpt::testing::StepModel model(step, 1);
    auto saved = (*mgr)->Save(step, model.ForRank(0));
    if (!saved.ok()) {
      std::fprintf(stderr, "%s\n", saved.status().ToString().c_str());
      return 1;
    }
    const std::string line = "committed " + std::to_string(step) + "\n";
    if (::write(1, line.data(), line.size()) !=
        static_cast<ssize_t>(line.size())) {
      return 1;
    }
  }
  return 0;
}
