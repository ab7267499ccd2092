// Exhaustive power-loss points. A workload (saves on 1 or 4 ranks, or a
// garbage collection) runs once to count its mutating storage calls; then,
// for every call N, it runs again on a fresh root with the power cut during
// call N, the crash-simulating storage drops what was not durable (several
// damage patterns per point), and the reopened root must hold:
//   - a newest loadable checkpoint that is the last one a save reported, or
//     the one being saved when the power went, bit-identical;
//   - every checkpoint a save reported as committed (unless retention was
//     entitled to remove it), and every listed checkpoint verifies;
//   - after garbage collection, nothing but the committed checkpoints;
//   - room for the job to go on: the next save succeeds.
// Set CKPT_POWERLOSS_SEEDS=N for N more random damage patterns per point.
#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/crash_storage.h"
#include "testing/step_model.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using testing::Backend;
using testing::BackendName;
using testing::CheckListed;
using testing::CheckStep;
using testing::CrashStorage;
using testing::Damage;
using testing::RunRanks;
using testing::StepModel;

// What a workload saves: whole checkpoints, or incremental ones that
// reference the unchanged chunks of the previous checkpoint.
enum class SaveKind { kFull, kIncremental };

struct PowerLossCase {
  Backend backend;  // kMemory, or kFile (a directory on /dev/shm)
  int ranks;
  SaveKind kind;
  int keep_last;  // retention during the saves (0: keep all)
};

void PrintTo(const PowerLossCase& c, std::ostream* os) {
  *os << BackendName(c.backend) << " ranks=" << c.ranks
      << (c.kind == SaveKind::kIncremental ? " incremental" : " full")
      << " keep_last=" << c.keep_last;
}

// The damage patterns tried at every power-loss point.
std::vector<Damage> Patterns(uint64_t point) {
  std::vector<Damage> out = {
      {Damage::Uncertain::kDrop, false, true, point},
      {Damage::Uncertain::kApply, false, false, point},
      {Damage::Uncertain::kRandom, false, true, point * 31 + 1},
      {Damage::Uncertain::kApply, true, true, point * 31 + 2},
  };
  if (const char* more = std::getenv("CKPT_POWERLOSS_SEEDS")) {
    for (int i = 0; i < std::atoi(more); ++i) {
      out.push_back({Damage::Uncertain::kRandom, i % 2 == 1, true,
                     point * 1000003 + 7 + static_cast<uint64_t>(i)});
    }
  }
  return out;
}

// Refuses every manifest: a save through it writes its data and dies
// before the commit.
class NoCommit : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    if (key.ends_with(format::kManifestName)) return IOError("no commit");
    return StorageWrapper::Put(key, data, mode);
  }
  // The process dies at its commit, so it cannot remove its own data (a
  // failed save that lives does): the attempt stays for a collection.
  Status Delete(std::string_view key) override {
    return IOError("the process is gone");
  }
};

// The root at `url`, wrapped to lose power during call `crash_at` (none:
// only when PowerLoss is called).
std::pair<std::unique_ptr<Storage>, std::unique_ptr<CrashStorage>> OpenCrashing(
    const std::string& url, std::optional<uint64_t> crash_at) {
  auto base = OpenStorage(url);
  EXPECT_TRUE(base.ok()) << base.status().ToString();
  if (!base.ok()) return {};
  auto crash = CrashStorage::Wrap(base->get());
  EXPECT_TRUE(crash.ok()) << crash.status().ToString();
  if (!crash.ok()) return {};
  if (crash_at) (*crash)->CrashAt(*crash_at);
  return {std::move(base).value(), std::move(crash).value()};
}

int64_t Later() {
  // Two hours ahead, so that dead attempts are old enough for garbage
  // collection.
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() +
         2 * 3600 * 1000;
}

class PowerLossTest : public ::testing::TestWithParam<PowerLossCase> {
 protected:
  void SetUp() override { keep_last_ = GetParam().keep_last; }

  // A fresh, empty root, in place of the last one; files go to /dev/shm,
  // where thousands of power losses take seconds, not minutes.
  std::string FreshRoot() {
    root_.emplace(GetParam().backend, "powerloss", "/dev/shm");
    return root_->url();
  }

  Options MakeOptions(Communicator* comm) const {
    Options o;
    o.communicator = comm;
    o.retention.keep_last = keep_last_;
    o.chunk_size = 4096;  // several chunks per data object
    return o;
  }

  // Saves `step` on every rank through `storage`; true when every rank
  // reported success. Every rank must report the same outcome.
  bool SaveAll(Storage* storage, int64_t step) {
    const int ranks = GetParam().ranks;
    StepModel model(step, ranks);
    std::vector<int> ok(ranks, 0);
    RunRanks(ranks, [&](int rank, Communicator* comm) {
      auto mgr = CheckpointManager::Open(
          std::make_unique<StorageWrapper>(storage), MakeOptions(comm));
      if (!mgr.ok()) return;
      SaveOptions save;
      save.incremental = GetParam().kind == SaveKind::kIncremental;
      ok[rank] = (*mgr)->Save(step, model.ForRank(rank), save).ok();
    });
    for (int r = 1; r < ranks; ++r) {
      EXPECT_EQ(ok[r], ok[0]) << "ranks disagree about step " << step;
    }
    return ok[0] != 0;
  }

  // A root holding step 1, committed before the power can fail.
  std::string Prepare() {
    const std::string url = FreshRoot();
    auto base = OpenStorage(url);
    EXPECT_TRUE(base.ok());
    EXPECT_TRUE(SaveAll(base->get(), 1));
    return url;
  }

  // Saves steps 2 and 3 with the power cut during call `crash_at` (none:
  // no cut); returns the steps whose save reported success, and the number
  // of mutating calls.
  std::pair<std::vector<int64_t>, uint64_t> RunSaves(
      const std::string& url, std::optional<uint64_t> crash_at,
      const Damage& damage) {
    auto [base, crash] = OpenCrashing(url, crash_at);
    if (!crash) return {};
    std::vector<int64_t> ok;
    for (int64_t step : {2, 3}) {
      if (SaveAll(crash.get(), step)) ok.push_back(step);
      if (crash->crashed()) break;
    }
    auto lost = crash->PowerLoss(damage);
    EXPECT_TRUE(lost.ok()) << lost.status().ToString();
    return {ok, crash->operations()};
  }

  // Reopens `url` after a power loss during a workload that had saved
  // `reported` (the steps whose save returned success) and was saving
  // `in_flight` (0: none), and checks every promise.
  void CheckRecovered(const std::string& url, int keep_last,
                      const std::vector<int64_t>& reported, int64_t in_flight,
                      bool torn, const std::string& where);

  std::optional<testing::TestRoot> root_;
  int keep_last_ = 0;
};

void PowerLossTest::CheckRecovered(const std::string& url, int keep_last,
                                   const std::vector<int64_t>& reported,
                                   int64_t in_flight, bool torn,
                                   const std::string& where) {
  SCOPED_TRACE(where);
  const int ranks = GetParam().ranks;
  Options later;
  later.now_unix_ms = Later;
  auto mgr = CheckpointManager::Open(url, later);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  auto latest = (*mgr)->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value()) << "no checkpoint survived";
  const int64_t last_reported = reported.empty() ? 1 : reported.back();
  const int64_t newest = **latest;
  EXPECT_TRUE(newest == last_reported || (in_flight && newest == in_flight))
      << "newest loadable is step " << newest << ", not the last reported ("
      << last_reported << ") or the one in flight (" << in_flight << ")";
  EXPECT_EQ(CheckStep(**mgr, newest, ranks), "") << "newest, step " << newest;

  // Every listed checkpoint verifies and loads; a reported save survives
  // unless retention may have removed it (keep_last newer checkpoints).
  std::vector<int64_t> must = reported;
  must.insert(must.begin(), 1);
  std::vector<std::string> problems;
  const std::set<int64_t> listed =
      CheckListed(**mgr, ranks, must, keep_last, &problems);
  EXPECT_EQ(problems, std::vector<std::string>());

  // Garbage collection leaves the committed checkpoints' objects only (a
  // torn manifest is no checkpoint, and not garbage ckpt may delete either).
  auto gc = (*mgr)->GarbageCollect();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  if (!torn) {
    std::set<std::string> expected = {std::string(format::kLatestName)};
    for (int64_t s : listed) {
      auto d = (*mgr)->Describe(s);
      ASSERT_TRUE(d.ok());
      expected.insert(format::ManifestKey(s));
      for (const ObjectInfo& o : d->objects) expected.insert(o.key);
      for (const auto& o : d->metadata_objects) expected.insert(o.key);
    }
    const std::set<std::string> present =
        testing::CheckpointObjectKeys((*mgr)->storage());
    if (!present.count(std::string(format::kLatestName))) {
      expected.erase(std::string(format::kLatestName));
    }
    EXPECT_EQ(present, expected);
  }
  EXPECT_EQ(CheckStep(**mgr, newest, ranks), "") << "after gc";
  // The job resumes from the newest and goes on saving.
  EXPECT_TRUE(SaveAll(&(*mgr)->storage(), newest + 1)) << "the next save";
}

TEST_P(PowerLossTest, EveryCallOfTwoSaves) {
  const PowerLossCase& c = GetParam();
  const Damage none{Damage::Uncertain::kDrop, false, false, 0};
  std::string url = Prepare();
  auto [ok, total] = RunSaves(url, std::nullopt, none);
  ASSERT_EQ(ok, (std::vector<int64_t>{2, 3}));
  ASSERT_GE(total, 8u);
  if (c.kind == SaveKind::kIncremental) {
    // The workload really references its parent: step 3 depends on step 2
    // (and wrote less than a full save would).
    auto mgr = CheckpointManager::Open(url);
    ASSERT_TRUE(mgr.ok());
    auto info = (*mgr)->Describe(3);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->info.parent, 2);
    EXPECT_FALSE(info->info.depends_on.empty());
    EXPECT_GT(info->info.referenced_bytes, 0u);
  }
  CheckRecovered(url, c.keep_last, ok, 0, false, "no power loss");

  int points = 0;
  for (uint64_t n = 0; n <= total; ++n) {
    for (const Damage& damage : Patterns(n)) {
      url = Prepare();
      if (HasFatalFailure()) return;
      auto [reported, ops] = RunSaves(url, n, damage);
      const int64_t in_flight = reported.size() == 2 ? 0 : 2 + reported.size();
      const std::string where =
          "power lost during call " + std::to_string(n) + " of " +
          std::to_string(total) + ", damage " +
          std::to_string(static_cast<int>(damage.uncertain)) +
          (damage.torn ? " torn" : "") + (damage.strays ? " strays" : "") +
          " seed " + std::to_string(damage.seed);
      CheckRecovered(url, c.keep_last, reported, in_flight, damage.torn, where);
      if (HasFatalFailure()) return;
      ++points;
    }
  }
  std::printf("[ powerloss ] %s: %llu calls, %d power losses checked\n",
              ::testing::PrintToString(c).c_str(),
              static_cast<unsigned long long>(total), points);
}

// Garbage collection with retention over steps 1 to 4 and a dead attempt of
// step 5: the power may go during any of its deletions.
TEST_P(PowerLossTest, EveryCallOfGarbageCollection) {
  const PowerLossCase& c = GetParam();
  keep_last_ = 0;  // the saves keep everything; the collection keeps two
  auto prepare = [&] {
    const std::string url = Prepare();
    auto base = OpenStorage(url);
    EXPECT_TRUE(base.ok());
    for (int64_t step : {2, 3, 4}) EXPECT_TRUE(SaveAll(base->get(), step));
    // The dead attempt: step 5's data objects, and no manifest.
    NoCommit no_commit(base->get());
    EXPECT_FALSE(SaveAll(&no_commit, 5));
    return url;
  };
  auto collect = [&](const std::string& url, std::optional<uint64_t> crash_at,
                     const Damage& damage) {
    auto [base, crash] = OpenCrashing(url, crash_at);
    if (!crash) return std::make_pair(false, uint64_t{0});
    Options o = MakeOptions(nullptr);
    o.now_unix_ms = Later;
    auto mgr = CheckpointManager::Open(
        std::make_unique<StorageWrapper>(crash.get()), o);
    EXPECT_TRUE(mgr.ok());
    RetentionPolicy keep_two;
    keep_two.keep_last = 2;
    const bool ok = (*mgr)->GarbageCollect({.retention = keep_two}).ok();
    EXPECT_TRUE(crash->PowerLoss(damage).ok());
    return std::make_pair(ok, crash->operations());
  };
  std::string url = prepare();
  if (HasFatalFailure()) return;
  auto [ok, total] = collect(url, std::nullopt, {});
  ASSERT_TRUE(ok);
  ASSERT_GE(total, 4u);  // two checkpoints and the dead attempt
  int points = 0;
  for (uint64_t n = 0; n <= total; ++n) {
    for (const Damage& damage : Patterns(n)) {
      url = prepare();
      if (HasFatalFailure()) return;
      collect(url, n, damage);
      CheckRecovered(url, 2, {2, 3, 4}, 0, damage.torn,
                     "power lost during call " + std::to_string(n) +
                         " of the garbage collection");
      if (HasFatalFailure()) return;
      ++points;
    }
  }
  std::printf("[ powerloss ] gc, %s: %llu calls, %d power losses checked\n",
              ::testing::PrintToString(c).c_str(),
              static_cast<unsigned long long>(total), points);
}

INSTANTIATE_TEST_SUITE_P(
    Saves, PowerLossTest,
    ::testing::Values(
        PowerLossCase{Backend::kMemory, 1, SaveKind::kFull, 0},
        PowerLossCase{Backend::kMemory, 1, SaveKind::kFull, 1},
        PowerLossCase{Backend::kMemory, 4, SaveKind::kFull, 0},
        PowerLossCase{Backend::kMemory, 4, SaveKind::kFull, 2},
        PowerLossCase{Backend::kFile, 1, SaveKind::kFull, 1},
        PowerLossCase{Backend::kFile, 4, SaveKind::kFull, 2},
        PowerLossCase{Backend::kMemory, 1, SaveKind::kIncremental, 0},
        PowerLossCase{Backend::kMemory, 4, SaveKind::kIncremental, 2},
        PowerLossCase{Backend::kFile, 4, SaveKind::kIncremental, 1}),
    [](const auto& info) {
      return BackendName(info.param.backend) + "_" +
             std::to_string(info.param.ranks) +
             (info.param.kind == SaveKind::kIncremental ? "_ranks_incremental"
                                                        : "_ranks_full") +
             "_keep_last_" + std::to_string(info.param.keep_last);
    });

}  // namespace
}  // namespace ckpt
