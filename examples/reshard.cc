// reshard: save on 4 ranks, resume on 2 — sharded weights are resharded by
// the load, and each rank's data-loader position (rank-local) is merged by
// the job, the one thing ckpt cannot decide for it.
//
//   reshard [ROOT]     (default: a fresh directory under /tmp)
//
// Ranks are threads here (NewThreadCommunicators); with MPI each would be a
// process using NewMpiCommunicator(MPI_COMM_WORLD), and the code is the same.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckpt.h"

namespace {

constexpr int64_t kRows = 8, kCols = 4;

void RunRanks(int n, const std::function<void(ckpt::Communicator&)>& body) {
  auto comms = ckpt::NewThreadCommunicators(n);
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&body, &c] { body(*c); });
  for (auto& t : threads) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  std::string root;
  // A folder of its own (no argument) is removed at the end, so that a run
  // leaves nothing behind; one passed in keeps the checkpoint.
  const bool own_folder = argc <= 1;
  if (!own_folder) {
    root = argv[1];
  } else {
    char tmpl[] = "/tmp/ckpt-reshard-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    root = tmpl;
  }
  bool ok = true;

  // 4 ranks: each holds 2 rows of the weights and has consumed its own
  // share of the data set (rank r read 100 + r samples).
  RunRanks(4, [&](ckpt::Communicator& comm) {
    const int r = comm.rank();
    auto mgr = ckpt::CheckpointManager::Open(root, {.communicator = &comm});
    std::vector<float> rows(2 * kCols);
    std::iota(rows.begin(), rows.end(), static_cast<float>(r * 2 * kCols));
    ckpt::State state;
    state.AddTensorPiece("weights", {kRows, kCols}, {2 * r, 0},
                         ckpt::View(std::span<float>(rows), {2, kCols}));
    state.AddRankLocalBlob("loader.samples_seen", std::to_string(100 + r));
    auto saved = (*mgr)->Save(1, state);
    if (!saved.ok()) ok = false;
    if (r == 0) std::printf("saved step 1 from 4 ranks\n");
  });

  // 2 ranks: each takes half of the columns of every row, and rank 0 merges
  // the four loader positions into the global number of samples seen.
  RunRanks(2, [&](ckpt::Communicator& comm) {
    const int r = comm.rank();
    auto mgr = ckpt::CheckpointManager::Open(
        root, {.create = false, .communicator = &comm});
    std::vector<float> cols(kRows * 2);
    ckpt::State state;
    state.AddTensorPiece("weights", {kRows, kCols}, {0, 2 * r},
                         ckpt::View(std::span<float>(cols), {kRows, 2}));
    if (!(*mgr)->Load(std::nullopt, state).ok()) ok = false;
    // Rank-local entries cannot go back to ranks that no longer exist:
    // every rank gets all of them and applies the job's own rule.
    auto loaders = (*mgr)->LoadRankLocal(std::nullopt, "loader.samples_seen");
    if (!loaders.ok()) {
      ok = false;
      return;
    }
    long total = 0;
    for (const ckpt::Entry& e : loaders->state.entries()) {
      total += std::stol(loaders->state.BlobString(e.name).value());
    }
    if (r == 0) {
      std::printf("resumed on 2 ranks: samples seen by the old ranks: %ld\n",
                  total);
    }
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        if (cols[i * 2 + j] != static_cast<float>(i * kCols + 2 * r + j)) {
          ok = false;
        }
      }
    }
  });
  std::printf("resharded weights: %s\n", ok ? "correct" : "WRONG");
  if (own_folder) {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }
  return ok ? 0 : 1;
}
