// The training state a job of `ranks` ranks saves at `step`, reproducible
// from the two numbers, so that a test (or another process) can check a
// loaded checkpoint bit for bit: a weights tensor split by rows across the
// ranks, a replicated counters tensor, a blob, a rank-local blob and
// metadata. Like a model that trains, consecutive steps share most bytes:
// the weights are the same for every step but one row, which an incremental
// save therefore writes while it references the other chunks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/state.h"
#include "testing/run_ranks.h"

namespace ckpt::testing {

struct StepModel {
  static constexpr int64_t kCols = 96;

  StepModel(int64_t step, int ranks, int64_t rows_per_rank = 32)
      : step(step),
        ranks(ranks),
        rows(rows_per_rank),
        weights(static_cast<size_t>(ranks * rows_per_rank * kCols)),
        counters(5) {
    std::uniform_real_distribution<float> u(-1, 1);
    std::mt19937_64 base(static_cast<uint64_t>(ranks) * 104729);
    for (float& w : weights) w = u(base);
    std::mt19937_64 gen(static_cast<uint64_t>(step) * 7919 + ranks);
    const int64_t row = step % (ranks * rows_per_rank);
    for (int64_t c = 0; c < kCols; ++c) {
      weights[static_cast<size_t>(row * kCols + c)] = u(gen);
    }
    for (int64_t& c : counters) c = static_cast<int64_t>(gen());
    rng.resize(64);
    for (char& ch : rng) ch = static_cast<char>(gen());
  }

  std::string Loader(int rank) const {
    return "loader of step " + std::to_string(step) + " on rank " +
           std::to_string(rank);
  }

  // What rank `rank` hands to Save. Views this model's buffers.
  State ForRank(int rank) {
    State s;
    const size_t per_rank = static_cast<size_t>(rows * kCols);
    s.AddTensorPiece(
        "weights", {ranks * rows, kCols}, {rank * rows, 0},
        View(std::span<float>(weights.data() + rank * per_rank, per_rank),
             {rows, kCols}));
    s.AddTensor("counters", View(counters));
    s.AddBlob("rng", rng);
    s.AddRankLocalBlob("loader", Loader(rank));
    s.AddMetadata("info", {{"step", std::to_string(step)}});
    return s;
  }

  // Empty when `got` (from LoadAll) holds exactly this model; else what
  // differs.
  std::string Diff(const State& got) const {
    const Entry* w = got.Find("weights");
    if (w == nullptr) return "no weights";
    if (w->tensor.shape != std::vector<int64_t>{ranks * rows, kCols}) {
      return "weights have another shape";
    }
    if (std::memcmp(w->tensor.data, weights.data(),
                    weights.size() * sizeof(float)) != 0) {
      return "weights differ";
    }
    const Entry* c = got.Find("counters");
    if (c == nullptr || c->tensor.shape != std::vector<int64_t>{5} ||
        std::memcmp(c->tensor.data, counters.data(),
                    counters.size() * sizeof(int64_t)) != 0) {
      return "counters differ";
    }
    Result<std::string> r = got.BlobString("rng");
    if (!r.ok() || *r != rng) return "rng differs";
    for (int rank = 0; rank < ranks; ++rank) {
      Result<std::string> l = got.BlobString(RankLocalName("loader", rank));
      if (!l.ok() || *l != Loader(rank)) {
        return "loader of rank " + std::to_string(rank) + " differs";
      }
    }
    Result<std::map<std::string, std::string>> info = got.Metadata("info");
    if (!info.ok() || info->count("step") == 0 ||
        info->at("step") != std::to_string(step)) {
      return "metadata differs";
    }
    return "";
  }

  int64_t step;
  int ranks;
  int64_t rows;  // of weights, per rank
  std::vector<float> weights;
  std::vector<int64_t> counters;
  std::string rng;
};

// Empty when `step` loads from `mgr` bit-identical to StepModel(step,
// ranks, rows_per_rank); else why not.
inline std::string CheckStep(CheckpointManager& mgr, int64_t step, int ranks,
                             int64_t rows_per_rank = 32) {
  Result<LoadedCheckpoint> got = mgr.LoadAll(step);
  if (!got.ok()) return got.status().ToString();
  if (got->info.step != step) return "loaded another step";
  return StepModel(step, ranks, rows_per_rank).Diff(got->state);
}

}  // namespace ckpt::testing

namespace ckpt::testing {

// Checks every listed checkpoint of `mgr` (it verifies, and loads as
// StepModel(step, ranks)) and that every step in `reported` is listed,
// unless retention of the last `keep_last` (0: keep all) may have removed
// it. Appends what is wrong to `problems`; returns the listed steps.
inline std::set<int64_t> CheckListed(CheckpointManager& mgr, int ranks,
                                     const std::vector<int64_t>& reported,
                                     int keep_last,
                                     std::vector<std::string>* problems) {
  std::set<int64_t> listed;
  Result<std::vector<CheckpointInfo>> list = mgr.List();
  if (!list.ok()) {
    problems->push_back(list.status().ToString());
    return listed;
  }
  for (const CheckpointInfo& c : *list) {
    listed.insert(c.step);
    const std::string step = "step " + std::to_string(c.step) + ": ";
    Result<VerifyReport> report = mgr.Verify(c.step);
    if (!report.ok()) {
      problems->push_back(step + report.status().ToString());
    } else if (!report->ok()) {
      problems->push_back(step + report->problems.front());
    }
    if (std::string diff = CheckStep(mgr, c.step, ranks); !diff.empty()) {
      problems->push_back(step + diff);
    }
  }
  for (int64_t s : reported) {
    const auto newer = std::count_if(listed.begin(), listed.end(),
                                     [&](int64_t l) { return l > s; });
    if ((keep_last == 0 || newer < keep_last) && !listed.count(s)) {
      problems->push_back("reported step " + std::to_string(s) + " was lost");
    }
  }
  return listed;
}

}  // namespace ckpt::testing
