// The README's "C++ in ten lines", then a check that the newest step loads
// back as saved: run twice on one root, it saves steps 1 to 10, then
// resumes at epoch 10 and saves nothing.
//
//   app [ROOT]     (default: run42)
#include <cstdio>

#include "ckpt/ckpt.h"

int main(int argc, char** argv) {
  const char* root = argc > 1 ? argv[1] : "run42";
  std::vector<float> weights(1 << 20, 0.5f);
  int64_t epoch = 0;  // the next epoch to run
  ckpt::State state;  // borrows the buffers: no copy of the model is made
  state.AddTensor("model.weights", ckpt::View(weights))
      .AddTensor("epoch", ckpt::View(std::span<int64_t>(&epoch, 1), {}));
  auto mgr = ckpt::CheckpointManager::Open(root, {.create_root = true});
  if (!mgr.ok()) return 1;
  // Anything saved yet? Then the newest step that loads whole, or nothing.
  if (auto last = (*mgr)->Latest();
      last.ok() && *last && !(*mgr)->Load(std::nullopt, state).ok())
    return 1;
  while (epoch < 10) {
    for (float& w : weights) w *= 0.99f;  // one epoch of training
    ++epoch;
    if (!(*mgr)->Save(epoch, state, {.epoch = epoch - 1}).ok()) return 1;
  }

  std::vector<float> loaded(weights.size());
  int64_t loaded_epoch = -1;
  ckpt::State check;
  check.AddTensor("model.weights", ckpt::View(loaded))
      .AddTensor("epoch", ckpt::View(std::span<int64_t>(&loaded_epoch, 1), {}));
  if (auto s = (*mgr)->Load(std::nullopt, check); !s.ok()) {
    std::fprintf(stderr, "app: %s\n", s.status().ToString().c_str());
    return 1;
  }
  if (loaded != weights || loaded_epoch != 10) {
    std::fprintf(stderr, "app: step 10 loaded other values than saved\n");
    return 1;
  }
  std::printf("app: step %lld saved and loaded\n",
              static_cast<long long>(loaded_epoch));
}
