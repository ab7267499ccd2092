// TieredManager::Restore is all or nothing and falls back newest first
// across both tiers: a damaged newest local step gives way to an older
// whole local one, damaged newest steps of both tiers to the newest whole
// step of either, a stray share never hides a newer whole local step, and
// a restore that fails leaves every rank's state bit for bit as it was.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/tiered.h"
#include "format/constants.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/run_ranks.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

using testing::RunRanks;

constexpr int kWorld = 2;
constexpr int64_t kRows = 2048;  // 4 KiB chunks: 4 per rank's half

// One rank's state: its half of "table", a rank-local blob and metadata;
// a function of (rank, seed).
struct RankModel {
  RankModel(int rank, int seed) : rank(rank), table(kRows / kWorld * 4) {
    for (size_t i = 0; i < table.size(); ++i) {
      table[i] = static_cast<float>(seed * 100000 + rank * 50000 + i);
    }
    rng = "rng-" + std::to_string(seed) + "-" + std::to_string(rank);
    info = std::to_string(seed);
  }
  State Make() {
    State s;
    s.AddTensorPiece("table", {kRows, 4}, {rank * kRows / kWorld, 0},
                     View(std::span<float>(table), {kRows / kWorld, 4}));
    s.AddRankLocalBlob("rng", rng);
    s.AddMetadata("info", {{"seed", info}});
    return s;
  }
  // What a load put into `s`, as a model.
  RankModel Loaded(const State& s) const {
    RankModel out = *this;
    out.rng = s.BlobString("rng").value();
    out.info = s.Find("info")->json;
    return out;
  }
  bool operator==(const RankModel& o) const {
    return table == o.table && rng == o.rng;
  }

  int rank;
  std::vector<float> table;
  std::string rng, info;
};

struct Job {
  explicit Job(const testing::TempDir& dir, int64_t durable_every)
      : durable_url((dir.path() / "durable").string()),
        local_url((dir.path() / "node{node}").string()),
        durable_every(durable_every) {}
  std::string durable_url, local_url;
  int64_t durable_every;
  int local_keep = 2;
};

struct Tiers {
  std::unique_ptr<CheckpointManager> durable;
  std::unique_ptr<TieredManager> tiers;
  Tiers(const Job& job, Communicator* comm) {
    Options o;
    o.communicator = comm;
    o.lease_seconds = 0;
    o.chunk_size = 4096;
    durable = CheckpointManager::Open(job.durable_url, o).value();
    TierOptions t;
    t.local_url = job.local_url;
    t.node_of_rank = {0, 1};
    t.durable_every_steps = job.durable_every;
    t.local_keep = job.local_keep;
    t.replicas = 0;
    tiers = TieredManager::Open(*durable, t).value();
  }
};

void SaveSteps(const Job& job, const std::vector<int>& steps) {
  RunRanks(kWorld, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    for (int step : steps) {
      RankModel m(rank, step);
      Result<TierSaveResult> r = t.tiers->Save(step, m.Make());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_TRUE(r->local) << r->local_error;
    }
  });
}

// Flips the last byte of every data object under `dir` (a step's folder).
void FlipLastDataBytes(const std::filesystem::path& dir) {
  ASSERT_GT(testing::FlipLastByteOfDataObjects(dir), 0) << dir;
}

std::filesystem::path LocalStep(const testing::TempDir& dir, int node, int rank,
                                int64_t step) {
  char share[16];
  std::snprintf(share, sizeof(share), "r%05d", rank);
  return dir.path() / ("node" + std::to_string(node)) / share /
         format::StepDirName(step);
}

std::filesystem::path DurableStep(const testing::TempDir& dir, int64_t step) {
  return dir.path() / "durable" / format::StepDirName(step);
}

// Restores on every rank; each must get step `want` from `tier`, whole.
void RestoresAt(const Job& job, int want, Tier tier) {
  RunRanks(kWorld, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    RankModel target(rank, 99);
    State s = target.Make();
    Result<TierRestoreResult> r = t.tiers->Restore(s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->step, want) << "rank " << rank << ": " << r->local_skipped;
    EXPECT_EQ(r->tier, tier) << "rank " << rank;
    EXPECT_TRUE(target.Loaded(s) == RankModel(rank, want)) << "rank " << rank;
    EXPECT_EQ(s.Find("info")->json,
              "{\"seed\":\"" + std::to_string(want) + "\"}");
  });
}

// Restores on every rank, which must fail with `code` and leave every
// rank's state as it was (tensor, blob, metadata).
void FailsUnchanged(const Job& job, ErrorCode code) {
  RunRanks(kWorld, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    RankModel target(rank, 99);
    State s = target.Make();
    const std::string info = s.Find("info")->json;
    Result<TierRestoreResult> r = t.tiers->Restore(s);
    ASSERT_FALSE(r.ok()) << "rank " << rank << " restored step " << r->step;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_TRUE(target.Loaded(s) == RankModel(rank, 99))
        << "rank " << rank << "'s state changed";
    EXPECT_EQ(s.Find("info")->json, info) << "rank " << rank;
  });
}

TEST(TierRestoreTest, ADamagedNewestLocalStepFallsBackToAnOlderLocalOne) {
  testing::TempDir dir("tier-restore-local", "/dev/shm");
  Job job(dir, /*durable_every=*/0);  // no durable step at all
  SaveSteps(job, {4, 5});
  // Only rank 1's share of step 5 is damaged: rank 0's loads whole, yet
  // no rank's state may take it.
  FlipLastDataBytes(LocalStep(dir, 1, 1, 5));
  RestoresAt(job, 4, Tier::kLocal);
  // Every local step damaged and nothing durable: the restore fails, and
  // rank 0, whose shares are whole, is unchanged too.
  FlipLastDataBytes(LocalStep(dir, 1, 1, 4));
  FailsUnchanged(job, ErrorCode::kDataLoss);
}

TEST(TierRestoreTest, FallsBackAcrossBothTiersNewestFirst) {
  testing::TempDir dir("tier-restore-both", "/dev/shm");
  Job job(dir, /*durable_every=*/2);
  job.local_keep = 3;
  SaveSteps(job, {2, 3, 4, 5});  // local 3, 4, 5; durable 2, 4
  FlipLastDataBytes(LocalStep(dir, 1, 1, 5));
  FlipLastDataBytes(DurableStep(dir, 4));
  // Local 5 and durable 4 damaged: local 4 is the newest whole step.
  RestoresAt(job, 4, Tier::kLocal);
  FlipLastDataBytes(LocalStep(dir, 0, 0, 4));
  RestoresAt(job, 3, Tier::kLocal);
  FlipLastDataBytes(LocalStep(dir, 1, 1, 3));
  RestoresAt(job, 2, Tier::kDurable);
  // A state that does not fit is no damage: no older step is tried.
  RunRanks(kWorld, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    RankModel target(rank, 99);
    State s = target.Make();
    std::vector<int32_t> extra(3, 7);
    s.AddTensor("not-saved", View(extra));
    Result<TierRestoreResult> r = t.tiers->Restore(s);
    EXPECT_EQ(r.status().code(), ErrorCode::kNotFound) << rank;
    EXPECT_TRUE(target.Loaded(s) == RankModel(rank, 99)) << rank;
  });
  FlipLastDataBytes(DurableStep(dir, 2));
  FailsUnchanged(job, ErrorCode::kDataLoss);
}

TEST(TierRestoreTest, AStrayShareDoesNotHideANewerWholeLocalStep) {
  testing::TempDir dir("tier-restore-stray", "/dev/shm");
  Job job(dir, /*durable_every=*/4);
  SaveSteps(job, {4, 5});  // local 4, 5; durable 4
  // A share of a step no marker names (a save cut short), newer than any,
  // and a share of a rank beyond the world.
  const std::filesystem::path stray = LocalStep(dir, 1, 1, 7);
  std::filesystem::create_directories(stray.parent_path());
  std::filesystem::copy(LocalStep(dir, 1, 1, 5), stray,
                        std::filesystem::copy_options::recursive);
  std::filesystem::copy(LocalStep(dir, 0, 0, 5).parent_path(),
                        dir.path() / "node0" / "r00005",
                        std::filesystem::copy_options::recursive);
  RestoresAt(job, 5, Tier::kLocal);
}

}  // namespace
}  // namespace ckpt
