// Helpers shared by the checkpoint tests: deterministic states,
// comparisons, and loads at other world sizes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/state.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "testing/run_ranks.h"

namespace ckpt::testing {

// Random bytes for tensors, reproducible from a seed.
inline std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = gen();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

// A small model-like state whose contents depend on `seed`; owns its bytes.
struct TestModel {
  std::vector<float> weights;
  std::vector<double> moments;
  std::vector<int64_t> counters;
  std::string rng;

  explicit TestModel(uint64_t seed, size_t n = 10000) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> f(-1, 1);
    weights.resize(n);
    for (float& w : weights) w = f(gen);
    moments.resize(n / 4 + 1);
    for (double& m : moments) m = f(gen);
    counters = {static_cast<int64_t>(seed), 7, -3};
    rng = "rng-state-" + std::to_string(seed);
  }

  State MakeState() {
    State s;
    s.AddTensor("model/weights", View(weights))
        .AddTensor("optimizer/moments", View(moments))
        .AddTensor("counters", View(counters))
        .AddBlob("rng", rng)
        .AddMetadata("info", {{"seed", rng}});
    return s;
  }

  bool operator==(const TestModel& o) const {
    return weights.size() == o.weights.size() &&
           std::memcmp(weights.data(), o.weights.data(),
                       weights.size() * sizeof(float)) == 0 &&
           moments.size() == o.moments.size() &&
           std::memcmp(moments.data(), o.moments.data(),
                       moments.size() * sizeof(double)) == 0 &&
           counters == o.counters && rng == o.rng;
  }
};

// A small training state whose bytes depend on `seed`: weights, 17
// counters, an RNG blob and a metadata entry.
struct SeededModel {
  explicit SeededModel(int seed, size_t n = 3000)
      : seed(seed), weights(n), counters(17) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& w : weights) w = u(gen);
    for (int64_t& c : counters) c = static_cast<int64_t>(gen());
    rng.resize(100);
    for (char& ch : rng) ch = static_cast<char>(gen());
  }

  State ToState() {
    State s;
    s.AddTensor("weights", View(weights));
    s.AddTensor("counters", View(counters));
    s.AddBlob("rng", rng);
    s.AddMetadata("info", {{"seed", std::to_string(seed)}});
    return s;
  }

  int seed;
  std::vector<float> weights;
  std::vector<int64_t> counters;
  std::string rng;
};

// Loads `step` in full and compares every byte (and the metadata) with
// `want`.
inline void ExpectLoads(CheckpointManager& mgr, int64_t step,
                        const SeededModel& want) {
  using Shape = std::vector<int64_t>;
  SCOPED_TRACE("loading step " + std::to_string(step));
  Result<LoadedCheckpoint> got = mgr.LoadAll(step);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->info.step, step);
  const Entry* w = got->state.Find("weights");
  const Entry* c = got->state.Find("counters");
  ASSERT_NE(w, nullptr);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(w->tensor.shape,
            (Shape{static_cast<int64_t>(want.weights.size())}));
  ASSERT_EQ(c->tensor.shape, (Shape{17}));
  EXPECT_EQ(std::memcmp(w->tensor.data, want.weights.data(),
                        want.weights.size() * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(c->tensor.data, want.counters.data(),
                        want.counters.size() * sizeof(int64_t)),
            0);
  Result<std::string> rng = got->state.BlobString("rng");
  ASSERT_TRUE(rng.ok()) << rng.status().ToString();
  EXPECT_EQ(*rng, want.rng);
  Result<std::map<std::string, std::string>> info = got->state.Metadata("info");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->at("seed"), std::to_string(want.seed));
}

// The key of every object under the root except the ownership lease's
// generations (LEASE-<n>: who writes, not what was saved), so that "only
// the committed checkpoints' objects are left" can be checked exactly. A
// root holds at most two generations; more is a leak and fails here.
inline std::set<std::string> CheckpointObjectKeys(Storage& storage) {
  std::set<std::string> keys;
  Result<std::vector<ObjectInfo>> objects = storage.List("");
  EXPECT_TRUE(objects.ok()) << objects.status().ToString();
  if (!objects.ok()) return keys;
  int leases = 0;
  for (const ObjectInfo& o : *objects) {
    if (format::ParseLeaseKey(o.key) >= 0) {
      ++leases;
    } else {
      keys.insert(o.key);
    }
  }
  EXPECT_LE(leases, 2) << "lease generations pile up in " << storage.url();
  return keys;
}

// Key, size and modification time of every object: "nothing changed".
inline std::vector<std::tuple<std::string, uint64_t, int64_t>> Snapshot(
    Storage& storage) {
  std::vector<std::tuple<std::string, uint64_t, int64_t>> out;
  Result<std::vector<ObjectInfo>> objects = storage.List("");
  EXPECT_TRUE(objects.ok()) << objects.status().ToString();
  if (objects.ok()) {
    for (const ObjectInfo& o : *objects) {
      out.emplace_back(o.key, o.size, o.mtime_unix_ms);
    }
  }
  return out;
}

// How `ranks` ranks split a [rows, cols] tensor to load it: rank r loads
// box(r) = {first row, rows, first column, columns}.
struct Split {
  int ranks;
  std::function<std::array<int64_t, 4>(int rank)> box;
};

// Loads the newest checkpoint on split.ranks ranks (as threads, each with
// the manager `open` gives it): each takes its box of the F32 tensor
// "weights" ([rows, cols]) and the whole F64 "bias" ([cols]), and must get
// want_weights(box) and want_bias everywhere.
inline void ExpectSplitLoads(
    const Split& split, int64_t rows, int64_t cols,
    const std::function<std::unique_ptr<CheckpointManager>(Communicator*)>&
        open,
    const std::function<std::vector<float>(int64_t r0, int64_t nr, int64_t c0,
                                           int64_t nc)>& want_weights,
    double want_bias) {
  std::atomic<int> ok{0};
  RunRanks(split.ranks, [&](int rank, Communicator* comm) {
    std::unique_ptr<CheckpointManager> mgr = open(comm);
    ASSERT_NE(mgr, nullptr);
    auto [r0, nr, c0, nc] = split.box(rank);
    std::vector<float> mine(nr * nc, -1);
    std::vector<double> bias(cols, 0);
    State s;
    s.AddTensorPiece("weights", {rows, cols}, {r0, c0},
                     View(std::span<float>(mine), {nr, nc}))
        .AddTensor("bias", View(bias));
    auto info = mgr->Load(std::nullopt, s);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(mine, want_weights(r0, nr, c0, nc))
        << split.ranks << " ranks, rank " << rank;
    EXPECT_EQ(bias, std::vector<double>(cols, want_bias));
    ++ok;
  });
  EXPECT_EQ(ok.load(), split.ranks);
}

// The data object a single-process save of `step` wrote ("", and a
// failure, where there is none).
inline std::string DataKeyOf(Storage& storage, int64_t step) {
  Result<std::vector<ObjectInfo>> objects =
      storage.List(format::StepDirName(step) + "/");
  EXPECT_TRUE(objects.ok()) << objects.status().ToString();
  if (objects.ok()) {
    for (const ObjectInfo& o : *objects) {
      if (format::ParseDataObjectKey(o.key, nullptr, nullptr, nullptr)) {
        return o.key;
      }
    }
  }
  ADD_FAILURE() << "no data object for step " << step;
  return "";
}

// The steps List() reports, oldest first.
inline std::vector<int64_t> ListedSteps(CheckpointManager& mgr) {
  Result<std::vector<CheckpointInfo>> infos = mgr.List();
  EXPECT_TRUE(infos.ok()) << infos.status().ToString();
  std::vector<int64_t> out;
  if (infos.ok()) {
    for (const CheckpointInfo& i : *infos) out.push_back(i.step);
  }
  return out;
}

}  // namespace ckpt::testing
