// The save protocol across ranks (threads standing in for processes) and
// loading onto any world size: resharded, replicated where it was sharded
// and the reverse, reading only the chunks a rank needs.
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "ckpt/checkpoint_manager.h"
#include "data/planner.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/fault_storage.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

constexpr int64_t kRows = 96;
constexpr int64_t kCols = 40;

// The global "weights" tensor: element (i, j) is i * kCols + j, as float.
std::vector<float> Global() {
  std::vector<float> g(kRows * kCols);
  std::iota(g.begin(), g.end(), 0.0f);
  return g;
}

// The box (r0..r0+nr, c0..c0+nc) of the global tensor.
std::vector<float> Box(int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<float> out;
  for (int64_t i = r0; i < r0 + nr; ++i) {
    for (int64_t j = c0; j < c0 + nc; ++j) {
      out.push_back(static_cast<float>(i * kCols + j));
    }
  }
  return out;
}

using testing::RunRanks;

class MultiRankTest : public ::testing::Test {
 protected:
  void SetUp() override { FreshRoot(); }

  // A fresh, empty root in place of the last one.
  void FreshRoot() {
    root_.emplace(testing::Backend::kMemory, "multirank");
    url_ = root_->url();
  }

  std::unique_ptr<CheckpointManager> Open(Communicator* comm,
                                          uint64_t chunk_size = 4096) {
    Options o;
    o.communicator = comm;
    o.chunk_size = chunk_size;
    auto mgr = CheckpointManager::Open(url_, o);
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return std::move(mgr).value();
  }

  // 4 ranks save step 1: "weights" split by rows, "bias" replicated on
  // every rank, a rank-local "loader" blob and a replicated "epoch".
  void SaveFourRanks() {
    RunRanks(4, [&](int rank, Communicator* comm) {
      auto mgr = Open(comm);
      std::vector<float> piece = Box(rank * 24, 24, 0, kCols);
      std::vector<double> bias(kCols, 0.25);
      int64_t epoch = 7;
      State s;
      s.AddTensorPiece("weights", {kRows, kCols}, {rank * 24, 0},
                       View(std::span<float>(piece), {24, kCols}))
          .AddTensor("bias", View(bias))
          .AddTensor("epoch", View(std::span<int64_t>(&epoch, 1), {}))
          .AddRankLocalBlob("loader",
                            "position-of-rank-" + std::to_string(rank));
      auto saved = mgr->Save(1, s, {.epoch = 7});
      ASSERT_TRUE(saved.ok())
          << "rank " << rank << ": " << saved.status().ToString();
      EXPECT_EQ(saved->info.world_size, 4);
    });
  }

  std::optional<testing::TestRoot> root_;
  std::string url_;
};

TEST_F(MultiRankTest, SaveWritesEveryRankOnceAndCommitsOnce) {
  SaveFourRanks();
  auto mgr = CheckpointManager::Open(url_);
  ASSERT_TRUE(mgr.ok());
  auto d = (*mgr)->Describe(1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->info.world_size, 4);
  ASSERT_EQ(d->info.hosts.size(), 4u);
  EXPECT_EQ(
      std::set<std::string>(d->info.hosts.begin(), d->info.hosts.end()).size(),
      4u);  // every rank's own host name
  // Every rank wrote its own data object.
  EXPECT_EQ(d->objects.size(), 4u);
  std::map<std::string, int> count;
  uint64_t bias_bytes = 0;
  for (const EntryInfo& e : d->entries) {
    ++count[e.name];
    if (e.name == "bias") {
      EXPECT_EQ(e.num_pieces, 1u);  // replicated: written once
      bias_bytes += e.bytes;
    }
    if (e.name == "weights") {
      EXPECT_EQ(e.num_pieces, 4u);
    }
  }
  EXPECT_EQ(bias_bytes, kCols * sizeof(double));
  EXPECT_EQ(count["loader"], 4);  // one rank-local entry per rank
  // One manifest, nothing else committed.
  auto list = (*mgr)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  // The commit record holds the save's durations and every rank's.
  const SaveTiming& t = list->front().timing;
  ASSERT_TRUE(t.recorded);
  EXPECT_FALSE(t.async);
  EXPECT_GE(t.save_ms, t.commit_ms);
  EXPECT_EQ(t.stall_ms, t.save_ms);
  ASSERT_EQ(t.ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(t.ranks[r].rank, r);
  auto verify = (*mgr)->Verify(1);
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

TEST_F(MultiRankTest, LoadOntoOneRankGivesTheWholeTensor) {
  SaveFourRanks();
  auto mgr = CheckpointManager::Open(url_);
  ASSERT_TRUE(mgr.ok());
  auto all = (*mgr)->LoadAll(1);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const Entry* w = all->state.Find("weights");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->tensor.shape, (std::vector<int64_t>{kRows, kCols}));
  std::vector<float> g = Global();
  EXPECT_EQ(std::memcmp(w->tensor.data, g.data(), g.size() * sizeof(float)), 0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(all->state.BlobString(RankLocalName("loader", r)).value(),
              "position-of-rank-" + std::to_string(r));
  }
  // A single-process job can also take the whole tensor in place.
  std::vector<float> whole(kRows * kCols, -1);
  std::vector<double> bias(kCols);
  State s;
  s.AddTensor("weights", View(std::span<float>(whole), {kRows, kCols}))
      .AddTensor("bias", View(bias));
  ASSERT_TRUE((*mgr)->Load(1, s).ok());
  EXPECT_EQ(whole, g);
  EXPECT_EQ(bias, std::vector<double>(kCols, 0.25));
}

TEST_F(MultiRankTest, ReshardsOntoOtherWorldSizesAndSplits) {
  SaveFourRanks();
  // 2 ranks split by columns; 3 ranks split unevenly by rows; 8 ranks split
  // by both; and 2 ranks that each take the whole (sharded -> replicated).
  const std::vector<testing::Split> splits = {
      {2,
       [](int r) {
         return std::array<int64_t, 4>{0, kRows, r * 20, 20};
       }},
      {3,
       [](int r) {
         const int64_t starts[] = {0, 10, 61, kRows};
         return std::array<int64_t, 4>{starts[r], starts[r + 1] - starts[r], 0,
                                       kCols};
       }},
      {8,
       [](int r) {
         return std::array<int64_t, 4>{(r / 2) * 24, 24, (r % 2) * 20, 20};
       }},
      {2,
       [](int) {
         return std::array<int64_t, 4>{0, kRows, 0, kCols};
       }},
  };
  for (const testing::Split& split : splits) {
    testing::ExpectSplitLoads(
        split, kRows, kCols, [&](Communicator* comm) { return Open(comm); },
        Box, 0.25);
  }
}

TEST_F(MultiRankTest, ALargePlanCommitsWithItsDirectoryBuiltBesideTheWrites) {
  // 4 ranks x 4,096 two-element pieces: a plan large enough that the
  // coordinator summarizes it on another thread while it writes.
  constexpr int kRanks = 4;
  constexpr int kTensors = 4096;
  static_assert(kRanks * kTensors >=
                PendingDirectoryEntries::kBesideWritesFrom);
  const auto value = [](int t, int64_t i) {
    return static_cast<float>(t * 1000 + i);
  };
  RunRanks(kRanks, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> mine(2 * kTensors);
    State s;
    for (int t = 0; t < kTensors; ++t) {
      mine[2 * t] = value(t, 2 * rank);
      mine[2 * t + 1] = value(t, 2 * rank + 1);
      s.AddTensorPiece("t" + std::to_string(t), {2 * kRanks}, {2 * rank},
                       View(std::span<float>(mine).subspan(2 * t, 2), {2}));
    }
    Result<SaveResult> r = mgr->Save(1, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  });
  // Loaded back on 2 ranks, four elements each.
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> got(4 * kTensors, -1);
    State s;
    for (int t = 0; t < kTensors; ++t) {
      s.AddTensorPiece("t" + std::to_string(t), {2 * kRanks}, {4 * rank},
                       View(std::span<float>(got).subspan(4 * t, 4), {4}));
    }
    Result<CheckpointInfo> r = mgr->Load(1, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int t = 0; t < kTensors; ++t) {
      for (int64_t i = 0; i < 4; ++i) {
        ASSERT_EQ(got[4 * t + i], value(t, 4 * rank + i)) << "t" << t;
      }
    }
    if (rank == 0) {
      Result<VerifyReport> v = mgr->Verify(1);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_TRUE(v->ok()) << v->problems.front();
    }
  });
}

TEST_F(MultiRankTest, ReplicatedSaveLoadsAsPieces) {
  // Saved whole on 2 ranks (replicated), loaded as row pieces on 4.
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> g = Global();
    State s;
    s.AddTensor("weights", View(std::span<float>(g), {kRows, kCols}));
    ASSERT_TRUE(mgr->Save(3, s).ok());
  });
  RunRanks(4, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> mine(24 * kCols, -1);
    State s;
    s.AddTensorPiece("weights", {kRows, kCols}, {rank * 24, 0},
                     View(std::span<float>(mine), {24, kCols}));
    ASSERT_TRUE(mgr->Load(3, s).ok());
    EXPECT_EQ(mine, Box(rank * 24, 24, 0, kCols));
  });
}

// Counts the bytes read through it.
class CountingStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    if (key.ends_with(".safetensors")) bytes_ += out.size();
    return StorageWrapper::ReadRange(key, offset, out);
  }
  uint64_t bytes() const { return bytes_; }

 private:
  std::atomic<uint64_t> bytes_{0};
};

TEST_F(MultiRankTest, ALoadReadsOnlyTheChunksItsBoxNeeds) {
  // A 1024 x 1024 float tensor (4 MiB) saved by one rank in 4 KiB chunks
  // (one row each); loading rows 100..110 must read 10 chunks, not the file.
  std::vector<float> big(1024 * 1024);
  std::iota(big.begin(), big.end(), 0.0f);
  {
    auto mgr = Open(nullptr);
    State s;
    s.AddTensor("big", View(std::span<float>(big), {1024, 1024}));
    ASSERT_TRUE(mgr->Save(1, s).ok());
  }
  auto base = OpenStorage(url_);
  ASSERT_TRUE(base.ok());
  auto counting = std::make_unique<CountingStorage>(base->get());
  CountingStorage* counter = counting.get();
  auto mgr = CheckpointManager::Open(std::move(counting));
  ASSERT_TRUE(mgr.ok());
  std::vector<float> rows(10 * 1024);
  State s;
  s.AddTensorPiece("big", {1024, 1024}, {100, 0},
                   View(std::span<float>(rows), {10, 1024}));
  ASSERT_TRUE((*mgr)->Load(1, s).ok());
  EXPECT_EQ(0, std::memcmp(rows.data(), big.data() + 100 * 1024,
                           rows.size() * sizeof(float)));
  EXPECT_EQ(counter->bytes(), 10u * 4096u);
  // A column slice needs every row's chunk, but still only once each.
  std::vector<float> column(1024);
  State c;
  c.AddTensorPiece("big", {1024, 1024}, {0, 7},
                   View(std::span<float>(column), {1024, 1}));
  const uint64_t before = counter->bytes();
  ASSERT_TRUE((*mgr)->Load(1, c).ok());
  EXPECT_EQ(counter->bytes() - before, 1024u * 4096u);
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(column[i], big[i * 1024 + 7]);
}

TEST_F(MultiRankTest, RankLocalEntriesGoBackToTheirRanks) {
  SaveFourRanks();
  RunRanks(4, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    State s;
    s.AddRankLocalBlob("loader", "");
    ASSERT_TRUE(mgr->Load(1, s).ok());
    EXPECT_EQ(s.BlobString("loader").value(),
              "position-of-rank-" + std::to_string(rank));
  });
  // On 2 ranks the in-place load refuses and LoadRankLocal hands over all.
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    State s;
    s.AddRankLocalBlob("loader", "");
    auto refused = mgr->Load(1, s);
    EXPECT_EQ(refused.status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("LoadRankLocal"),
              std::string::npos);
    auto all = mgr->LoadRankLocal(1, "loader");
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    ASSERT_EQ(all->state.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(all->state.BlobString(std::to_string(r)).value(),
                "position-of-rank-" + std::to_string(r));
    }
  });
}

TEST_F(MultiRankTest, AFailingRankFailsEveryRankAndNothingCommits) {
  for (const bool throws : {false, true}) {
    FreshRoot();
    SaveFourRanks();  // step 1, which the failed save must leave intact
    std::vector<Status> results(4);
    RunRanks(4, [&](int rank, Communicator* comm) {
      auto base = OpenStorage(url_);
      ASSERT_TRUE(base.ok());
      std::unique_ptr<Storage> storage;
      if (rank == 2 && !throws) {
        // Rank 2's storage fails its first write.
        auto fault = std::make_unique<testing::FaultStorage>(base->get());
        fault->FailOnce(0, IOError("disk on fire"));
        storage = std::move(fault);
      } else if (rank == 2) {
        // Rank 2's storage throws.
        class Throwing : public StorageWrapper {
         public:
          using StorageWrapper::StorageWrapper;
          Result<std::unique_ptr<WritableObject>> NewWritable(
              std::string_view) override {
            throw std::runtime_error("driver bug");
          }
        };
        storage = std::make_unique<Throwing>(std::move(*base));
      } else {
        storage = std::move(*base);
      }
      Options o;
      o.communicator = comm;
      auto mgr = CheckpointManager::Open(std::move(storage), o);
      ASSERT_TRUE(mgr.ok());
      std::vector<float> piece = Box(rank * 24, 24, 0, kCols);
      State s;
      s.AddTensorPiece("weights", {kRows, kCols}, {rank * 24, 0},
                       View(std::span<float>(piece), {24, kCols}));
      results[rank] = (*mgr)->Save(2, s).status();
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_FALSE(results[r].ok()) << "rank " << r;
      EXPECT_EQ(results[r].ToString(), results[0].ToString());
      EXPECT_NE(results[r].message().find("rank 2"), std::string::npos);
      EXPECT_NE(
          results[r].message().find(throws ? "driver bug" : "disk on fire"),
          std::string::npos)
          << results[r].ToString();
    }
    auto mgr = CheckpointManager::Open(url_);
    ASSERT_TRUE(mgr.ok());
    EXPECT_EQ((*mgr)->Latest().value(), std::optional<int64_t>(1));
    auto all = (*mgr)->LoadAll(std::nullopt, {"weights"});
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    std::vector<float> g = Global();
    EXPECT_EQ(std::memcmp(all->state.entries()[0].tensor.data, g.data(),
                          g.size() * sizeof(float)),
              0);
  }
}

TEST_F(MultiRankTest, RanksThatDisagreeFailTogether) {
  std::vector<Status> results(2);
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> a(4), b(5);
    State s;
    s.AddTensor("w", rank == 0 ? View(a) : View(b));
    results[rank] = mgr->Save(1, s).status();
  });
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("\"w\""), std::string::npos);
  }
}

// A rank whose step counter drifted (asked to save 6 while rank 0 saves 5):
// every rank fails with an error naming both steps, and nothing is
// committed, where each rank was told it had saved step 5 while the
// manifest named objects rank 1 wrote under step 6.
TEST_F(MultiRankTest, RanksThatDisagreeOnTheStepFailTogether) {
  SaveFourRanks();  // step 1
  std::vector<Status> results(2);
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> w(4, static_cast<float>(rank));
    State s;
    s.AddTensorPiece("w", {8}, {rank * 4}, View(w));
    results[rank] = mgr->Save(rank == 0 ? 5 : 6, s).status();
  });
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("rank 1 saves step 6, rank 0 step 5"),
              std::string::npos)
        << st.ToString();
  }
  auto mgr = CheckpointManager::Open(url_);
  ASSERT_TRUE(mgr.ok());
  EXPECT_EQ((*mgr)->Latest().value(), std::optional<int64_t>(1));
  auto listed = (*mgr)->List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 1u);
}

// Save at N ranks, load at M, for every pair of 1, 2, 3, 4 and 8: "rows" is
// split by rows on save and by columns on load, "cols" the other way round,
// "grid" in 2-d blocks when M allows it, and "repl" is replicated on save and
// sharded by rows on load (and the reverse for "rows" when M == 1).
class SaveNLoadMTest
    : public MultiRankTest,
      public ::testing::WithParamInterface<std::pair<int, int>> {};

constexpr int64_t kR = 48, kC = 24;  // divisible by 1, 2, 3, 4 and 8

int64_t Element(int64_t i, int64_t j) { return i * 1000 + j; }

std::vector<int64_t> Block(int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<int64_t> out;
  for (int64_t i = r0; i < r0 + nr; ++i) {
    for (int64_t j = c0; j < c0 + nc; ++j) out.push_back(Element(i, j));
  }
  return out;
}

// The 2-d block of rank r among n: a 2 × (n/2) grid when n is even.
std::array<int64_t, 4> GridBox(int r, int n) {
  if (n % 2 != 0) return {r * (kR / n), kR / n, 0, kC};
  const int cols = n / 2;
  return {(r / cols) * (kR / 2), kR / 2, (r % cols) * (kC / cols), kC / cols};
}

TEST_P(SaveNLoadMTest, BitIdentical) {
  // Plain variables: clang 14 cannot capture structured bindings.
  const int n = std::get<0>(GetParam());
  const int m = std::get<1>(GetParam());
  RunRanks(n, [&](int r, Communicator* comm) {
    auto mgr = Open(comm, 4096);
    std::vector<int64_t> rows = Block(r * (kR / n), kR / n, 0, kC);
    std::vector<int64_t> cols = Block(0, kR, r * (kC / n), kC / n);
    auto g = GridBox(r, n);
    std::vector<int64_t> grid = Block(g[0], g[1], g[2], g[3]);
    std::vector<int64_t> repl = Block(0, kR, 0, kC);
    State s;
    s.AddTensorPiece("rows", {kR, kC}, {r * (kR / n), 0},
                     View(std::span<int64_t>(rows), {kR / n, kC}))
        .AddTensorPiece("cols", {kR, kC}, {0, r * (kC / n)},
                        View(std::span<int64_t>(cols), {kR, kC / n}))
        .AddTensorPiece("grid", {kR, kC}, {g[0], g[2]},
                        View(std::span<int64_t>(grid), {g[1], g[3]}))
        .AddTensor("repl", View(std::span<int64_t>(repl), {kR, kC}));
    auto saved = mgr->Save(1, s);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  });
  RunRanks(m, [&](int r, Communicator* comm) {
    auto mgr = Open(comm, 4096);
    std::vector<int64_t> rows(kR * (kC / m), -1), cols((kR / m) * kC, -1),
        repl((kR / m) * kC, -1);
    auto g = GridBox(r, m);
    std::vector<int64_t> grid(g[1] * g[3], -1);
    State s;
    s.AddTensorPiece("rows", {kR, kC}, {0, r * (kC / m)},
                     View(std::span<int64_t>(rows), {kR, kC / m}))
        .AddTensorPiece("cols", {kR, kC}, {r * (kR / m), 0},
                        View(std::span<int64_t>(cols), {kR / m, kC}))
        .AddTensorPiece("grid", {kR, kC}, {g[0], g[2]},
                        View(std::span<int64_t>(grid), {g[1], g[3]}))
        .AddTensorPiece("repl", {kR, kC}, {r * (kR / m), 0},
                        View(std::span<int64_t>(repl), {kR / m, kC}));
    auto loaded = mgr->Load(1, s);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(rows, Block(0, kR, r * (kC / m), kC / m));
    EXPECT_EQ(cols, Block(r * (kR / m), kR / m, 0, kC));
    EXPECT_EQ(grid, Block(g[0], g[1], g[2], g[3]));
    EXPECT_EQ(repl, Block(r * (kR / m), kR / m, 0, kC));
  });
}

std::vector<std::pair<int, int>> AllPairs() {
  std::vector<std::pair<int, int>> out;
  for (int n : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8}) out.emplace_back(n, m);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ranks, SaveNLoadMTest, ::testing::ValuesIn(AllPairs()),
                         [](const auto& info) {
                           return "save" + std::to_string(info.param.first) +
                                  "_load" + std::to_string(info.param.second);
                         });

TEST_F(MultiRankTest, BadBoxesAndMissingEntriesAreNamed) {
  SaveFourRanks();
  auto mgr = Open(nullptr);
  std::vector<float> out(4);
  State outside;
  outside.AddTensorPiece("weights", {kRows, kCols}, {kRows - 1, 0},
                         View(std::span<float>(out), {2, 2}));
  EXPECT_EQ(outside.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("\"weights\""), std::string::npos);
  State missing;
  missing.AddTensorPiece("nope", {kRows, kCols}, {0, 0},
                         View(std::span<float>(out), {2, 2}));
  auto r = mgr->Load(1, missing);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("\"nope\""), std::string::npos);
}

}  // namespace
}  // namespace ckpt
