// quickstart: save every epoch, crash, resume from the newest checkpoint, and
// end bit-identical to a run that never crashed.
//
//   quickstart [ROOT]     (default: a fresh directory under /tmp)
//
// A child process trains and is killed (SIGKILL) in the middle of epoch 4.
// The parent then resumes from the newest complete checkpoint, finishes the
// run, and compares the result with an uninterrupted run computed in memory.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"

namespace {

constexpr int kEpochs = 8;
constexpr int kCrashEpoch = 4;

// A toy model: weights nudged by a deterministic per-epoch update.
struct Model {
  std::vector<float> weights = std::vector<float>(1 << 16, 0.5f);
  std::vector<double> momentum = std::vector<double>(1 << 10, 0.0);
  int64_t epoch = 0;  // the next epoch to run
  std::string rng = "seed=42";

  void TrainOneEpoch() {
    std::mt19937 gen(static_cast<uint32_t>(epoch * 7919 + 1));
    std::normal_distribution<float> noise(0.0f, 0.01f);
    for (float& w : weights) w = w * 0.999f + noise(gen);
    for (double& m : momentum) m = 0.9 * m + 0.1 * noise(gen);
    rng = "seed=42,epoch=" + std::to_string(epoch);
    ++epoch;
  }

  // Ten lines of ckpt: what the job saves and restores.
  ckpt::State MakeState() {
    ckpt::State state;
    state.AddTensor("model.weights", ckpt::View(weights))
        .AddTensor("optimizer.momentum", ckpt::View(momentum))
        .AddTensor("epoch", ckpt::View(std::span<int64_t>(&epoch, 1), {}))
        .AddBlob("rng", rng);
    return state;
  }
};

int Fail(const ckpt::Status& s) {
  std::fprintf(stderr, "quickstart: %s\n", s.ToString().c_str());
  return 1;
}

// Trains to kEpochs, resuming from `root` if it holds a checkpoint. With
// `crash`, kills itself halfway through kCrashEpoch.
int Train(const std::string& root, bool crash, Model& model) {
  // create_root: the first run starts an empty root; a resume finds it.
  auto mgr = ckpt::CheckpointManager::Open(
      root, {.retention = {.keep_last = 3}, .create_root = true});
  if (!mgr.ok()) return Fail(mgr.status());
  ckpt::State state = model.MakeState();
  auto latest = (*mgr)->Latest();
  if (!latest.ok()) return Fail(latest.status());
  if (*latest) {
    auto info = (*mgr)->Load(**latest, state);
    if (!info.ok()) return Fail(info.status());
    model.rng = state.BlobString("rng").value();
    std::printf("  resumed from step %lld: next epoch is %lld\n",
                static_cast<long long>(**latest),
                static_cast<long long>(model.epoch));
  }
  while (model.epoch < kEpochs) {
    if (crash && model.epoch == kCrashEpoch) {
      std::printf("  epoch %lld: killed halfway (SIGKILL)\n",
                  static_cast<long long>(model.epoch));
      std::fflush(stdout);
      model.weights[0] = NAN;  // half-done work that must never be loaded
      kill(getpid(), SIGKILL);
    }
    model.TrainOneEpoch();
    ckpt::State s = model.MakeState();
    auto saved = (*mgr)->Save(model.epoch, s, {.epoch = model.epoch - 1});
    if (!saved.ok()) return Fail(saved.status());
    std::printf("  epoch %lld: saved step %lld (%llu bytes)\n",
                static_cast<long long>(model.epoch - 1),
                static_cast<long long>(model.epoch),
                static_cast<unsigned long long>(saved->info.bytes));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root;
  // A folder of its own (no argument) is removed at the end, so that a run
  // leaves nothing behind; one passed in keeps the checkpoints (`ckpt ls`).
  const bool own_folder = argc <= 1;
  if (!own_folder) {
    root = argv[1];
  } else {
    char tmpl[] = "/tmp/ckpt-quickstart-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    root = tmpl;
  }
  std::printf("ckpt quickstart: checkpoints in %s%s\n", root.c_str(),
              own_folder ? " (removed at the end)" : "");

  std::printf("run 1 (will crash):\n");
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    Model m;
    _exit(Train(root, /*crash=*/true, m));
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
    std::fprintf(stderr,
                 "quickstart: the first run did not crash as planned\n");
    return 1;
  }

  std::printf("run 2 (resumes):\n");
  Model resumed;
  if (int rc = Train(root, /*crash=*/false, resumed); rc != 0) return rc;

  Model reference;
  while (reference.epoch < kEpochs) reference.TrainOneEpoch();
  const bool same =
      resumed.epoch == reference.epoch && resumed.rng == reference.rng &&
      std::memcmp(resumed.weights.data(), reference.weights.data(),
                  resumed.weights.size() * sizeof(float)) == 0 &&
      std::memcmp(resumed.momentum.data(), reference.momentum.data(),
                  resumed.momentum.size() * sizeof(double)) == 0;
  std::printf("resumed run vs uninterrupted run: %s\n",
              same ? "bit-identical" : "DIFFERENT");
  if (own_folder) {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }
  return same ? 0 : 1;
}
