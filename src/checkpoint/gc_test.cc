// Retention on Save, min_seconds_between_saves, GarbageCollect and Delete,
// through CheckpointManager on mem:// and file://.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/manifests.h"
#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "testing/backends.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using Steps = std::vector<int64_t>;
using Model = testing::SeededModel;
using testing::DataKeyOf;
using testing::ExpectLoads;
using testing::ListedSteps;
using testing::Snapshot;
using Keys = std::vector<std::string>;

Keys AllKeys(Storage& storage, std::string_view prefix = "") {
  Result<std::vector<ObjectInfo>> objects = storage.List(prefix);
  EXPECT_TRUE(objects.ok()) << objects.status().ToString();
  Keys out;
  if (objects.ok()) {
    for (const ObjectInfo& o : *objects) out.push_back(o.key);
  }
  return out;
}

Keys Sorted(Keys keys) {
  std::sort(keys.begin(), keys.end());
  return keys;
}

bool Contains(const Keys& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using testing::Backend;

// A fresh root per test, and a clock the test moves.
class ManagerTest : public ::testing::Test {
 protected:
  virtual Backend backend() const { return Backend::kMemory; }

  void SetUp() override {
    // Objects carry the real time as their mtime; the fake clock starts there
    // so that "younger than the grace period" means something.
    now_ms_ = SystemNowMs();
    root_.emplace(backend(), "gc");
    url_ = root_->url();
  }

  Options MakeOptions() {
    Options o;
    o.now_unix_ms = [this] { return now_ms_; };
    return o;
  }

  std::unique_ptr<CheckpointManager> OpenManager(Options o) {
    Result<std::unique_ptr<CheckpointManager>> mgr =
        CheckpointManager::Open(url_, std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  // Saves Model(step) as `step`; returns the result.
  SaveResult SaveModel(CheckpointManager& mgr, int64_t step,
                       const SaveOptions& save = {}) {
    Model m(static_cast<int>(step));
    State state = m.ToState();
    Result<SaveResult> r = mgr.Save(step, state, save);
    EXPECT_TRUE(r.ok()) << "save " << step << ": " << r.status().ToString();
    now_ms_ += 1000;
    return r.ok() ? *r : SaveResult{};
  }

  void Put(CheckpointManager& mgr, const std::string& key,
           std::string_view bytes) {
    Status s = mgr.storage().PutString(key, bytes);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::string Read(CheckpointManager& mgr, const std::string& key) {
    Result<std::string> bytes = mgr.storage().ReadAll(key);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    return bytes.ok() ? *bytes : "";
  }

  // Writes a manifest for `step` that reuses `base`'s data objects and
  // depends on `depends_on`: an incremental checkpoint, made by hand.
  void WriteDependentManifest(CheckpointManager& mgr, int64_t base,
                              int64_t step, Steps depends_on) {
    // Every piece of the base, written back as one JSON manifest whatever
    // layout the base has.
    ManifestStore store(mgr.storage());
    Result<std::shared_ptr<const format::Manifest>> full = store.Read(base);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    std::optional<format::Manifest> m = **full;
    if (m->version == format::kScalableManifestVersion) {
      m->version = format::kIncrementalManifestVersion;
      m->parent = base;
      m->chain = 1;
      m->metadata_objects.clear();
    }
    m->step = step;
    m->depends_on = std::move(depends_on);
    ASSERT_TRUE(format::ValidateManifest(*m).ok());
    Put(mgr, format::ManifestKey(step), format::EncodeManifest(*m));
  }

  int64_t now_ms_ = 0;
  std::optional<testing::TestRoot> root_;
  std::string url_;
};

// The same cases on every backend.
class GcTest : public ManagerTest,
               public ::testing::WithParamInterface<Backend> {
 protected:
  Backend backend() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Backends, GcTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile),
                         testing::BackendTestName);

TEST_P(GcTest, KeepLastOnSaveLeavesTheNewestTwo) {
  Options o = MakeOptions();
  o.retention.keep_last = 2;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  Steps deleted;
  for (int64_t step = 1; step <= 5; ++step) {
    if (step == 2) Put(*mgr, "step-000000000001/notes.txt", "mine");
    SaveResult r = SaveModel(*mgr, step);
    EXPECT_FALSE(r.skipped);
    EXPECT_EQ(r.info.step, step);
    deleted.insert(deleted.end(), r.deleted_steps.begin(),
                   r.deleted_steps.end());
  }
  EXPECT_EQ(deleted, (Steps{1, 2, 3}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{4, 5}));
  for (int64_t step = 1; step <= 3; ++step) {
    // Only what ckpt wrote goes; the user's note stays.
    const Keys left = AllKeys(mgr->storage(), format::StepDirName(step));
    EXPECT_EQ(left, step == 1 ? Keys{"step-000000000001/notes.txt"} : Keys{});
    EXPECT_EQ(mgr->LoadAll(step).status().code(), ErrorCode::kNotFound);
  }
  ExpectLoads(*mgr, 4, Model(4));
  ExpectLoads(*mgr, 5, Model(5));
  EXPECT_EQ(Read(*mgr, "LATEST"), "5\n");
}

// Without a lease (lease_seconds 0) gc must guess which unfinished attempts
// may still be running: those above the newest step, within the grace
// period.
TEST_P(GcTest, WithoutALeaseRemovesDeadAttemptsAndNothingElse) {
  Options o = MakeOptions();
  o.lease_seconds = 0;
  o.gc_grace_seconds = 3600;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 5; ++step) SaveModel(*mgr, step);
  Storage& st = mgr->storage();

  // Step 2's manifest is damaged: its objects are evidence, left alone.
  const std::string damaged_data = DataKeyOf(st, 2);
  Put(*mgr, format::ManifestKey(2), "{\"xxh3_128\": garbage");
  const std::string damaged_extra =
      format::DataObjectKey(2, 1, "00000000deadbeef");
  Put(*mgr, damaged_extra, "an attempt under a damaged step");

  // Temporaries of the kind the backend leaves after a crashed write:
  // only file:// has them (Storage::TemporaryOf); on mem:// the same names
  // are somebody else's.
  const Keys temps_now = {"step-000000000003/x.ckpt-tmp-0123456789abcdef"};
  const Keys temps_later = {"step-000000000010/y.ckpt-tmp-0123456789abcdef",
                            "LATEST.ckpt-tmp-fedcba9876543210"};
  const bool file = GetParam() == Backend::kFile;
  auto with = [](Keys keys, const Keys& more, bool add) {
    if (add) keys.insert(keys.end(), more.begin(), more.end());
    return keys;
  };
  // Dead: attempts at or below the newest committed step (5) can never
  // commit, and temp files there are over.
  const Keys dead_now = with(
      {
          format::DataObjectKey(3, 0, "0123456789abcdef"),
          format::DataObjectKey(5, 1, "0123456789abcdef"),
      },
      temps_now, file);
  // Possibly running: above the newest, dead only after the grace period.
  const Keys dead_later = with(
      {format::DataObjectKey(9, 0, "fedcba9876543210")}, temps_later, file);
  // Not ckpt's: must survive every collection.
  const Keys foreign = with(
      with(
          {
              "step-000000000001/notes.txt",
              "step-000000000001/MANIFEST.json.bak",
              "step-000000000003/r00000-0123456789ABCDEF.safetensors",
              "step-000000000004/sub/r00000-0123456789abcdef.safetensors",
              "step-000000000009/notes.txt",
              "step-12/r00000-0123456789abcdef.safetensors", "user/data.bin",
              "README", "LATEST.bak",
              "step-000000000003/x.ckpt-tmp-abc",  // not the backend's pattern
          },
          temps_now, !file),
      temps_later, !file);
  for (const std::string& k : dead_now) Put(*mgr, k, "dead attempt bytes");
  for (const std::string& k : dead_later) Put(*mgr, k, "pending bytes");
  for (const std::string& k : foreign) Put(*mgr, k, "the user's bytes");

  // A dry run deletes nothing and reports what a real run then deletes.
  const auto before = Snapshot(st);
  GcOptions dry;
  dry.dry_run = true;
  Result<GcReport> planned = mgr->GarbageCollect(dry);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_EQ(Snapshot(st), before);
  EXPECT_EQ(Sorted(planned->deleted_objects), Sorted(dead_now));
  EXPECT_TRUE(planned->deleted_steps.empty());
  EXPECT_EQ(planned->bytes_freed, dead_now.size() * 18);

  Result<GcReport> done = mgr->GarbageCollect();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->deleted_objects, planned->deleted_objects);
  EXPECT_EQ(done->bytes_freed, planned->bytes_freed);
  Keys keys = AllKeys(st);
  for (const std::string& k : dead_now) EXPECT_FALSE(Contains(keys, k)) << k;
  for (const std::string& k : dead_later) EXPECT_TRUE(Contains(keys, k)) << k;
  for (const std::string& k : foreign) EXPECT_TRUE(Contains(keys, k)) << k;
  EXPECT_TRUE(Contains(keys, damaged_data));
  EXPECT_TRUE(Contains(keys, damaged_extra));
  EXPECT_TRUE(Contains(keys, format::ManifestKey(2)));

  // A second collection inside the grace period finds nothing.
  Result<GcReport> again = mgr->GarbageCollect();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->deleted_objects.empty());

  // Past the grace period the unfinished attempts are dead too.
  now_ms_ += (3600 + 60) * 1000;
  planned = mgr->GarbageCollect(dry);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_EQ(Sorted(planned->deleted_objects), Sorted(dead_later));
  done = mgr->GarbageCollect();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->deleted_objects, planned->deleted_objects);
  keys = AllKeys(st);
  for (const std::string& k : dead_later) EXPECT_FALSE(Contains(keys, k)) << k;
  for (const std::string& k : foreign) EXPECT_TRUE(Contains(keys, k)) << k;
  EXPECT_TRUE(Contains(keys, damaged_data));
  EXPECT_TRUE(Contains(keys, damaged_extra));

  // Every committed checkpoint is whole.
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 3, 4, 5}));
  for (int64_t step : {1, 3, 4, 5}) ExpectLoads(*mgr, step, Model(step));
  for (int64_t step : {1, 3, 4, 5}) {
    Result<VerifyReport> v = mgr->Verify(step);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << v->problems.front();
  }
}

// Holding the root's lease, gc needs no guess: nobody else can be writing,
// so every attempt no manifest names is dead at once, whatever its step or
// age. The lease itself, the user's files and damaged steps stay.
TEST_P(GcTest, HoldingTheLeaseRemovesEveryUnnamedAttemptAtOnce) {
  Options o = MakeOptions();
  o.lease_seconds = 60;
  o.gc_grace_seconds = 3600;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 5; ++step) SaveModel(*mgr, step);
  Storage& st = mgr->storage();
  Put(*mgr, format::ManifestKey(2), "{\"xxh3_128\": garbage");
  const std::string damaged_extra =
      format::DataObjectKey(2, 1, "00000000deadbeef");
  Put(*mgr, damaged_extra, "an attempt under a damaged step");
  const bool file = GetParam() == Backend::kFile;
  Keys dead = {format::DataObjectKey(3, 0, "0123456789abcdef"),
               format::DataObjectKey(9, 0, "fedcba9876543210"),
               format::DataObjectKey(12, 3, "fedcba9876543210")};
  if (file) dead.push_back("step-000000000010/y.ckpt-tmp-0123456789abcdef");
  const Keys foreign = {"step-000000000009/notes.txt", "user/data.bin",
                        "LEASE-000000000001.bak"};
  for (const std::string& k : dead) Put(*mgr, k, "an attempt's bytes");
  for (const std::string& k : foreign) Put(*mgr, k, "the user's bytes");

  Result<GcReport> done = mgr->GarbageCollect();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(Sorted(done->deleted_objects), Sorted(dead));
  const Keys keys = AllKeys(st);
  for (const std::string& k : dead) EXPECT_FALSE(Contains(keys, k)) << k;
  for (const std::string& k : foreign) EXPECT_TRUE(Contains(keys, k)) << k;
  EXPECT_TRUE(Contains(keys, damaged_extra));
  EXPECT_TRUE(Contains(keys, format::LeaseKey(1)));
  for (int64_t step : {1, 3, 4, 5}) ExpectLoads(*mgr, step, Model(step));
}

TEST_P(GcTest, DryRunWithRetentionDeletesNothingAndMatchesARealRun) {
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 5; ++step) SaveModel(*mgr, step);
  Put(*mgr, format::DataObjectKey(4, 0, "0123456789abcdef"), "dead");
  Put(*mgr, "step-000000000002/notes.txt", "mine");

  GcOptions gc;
  gc.dry_run = true;
  gc.retention = RetentionPolicy{};
  gc.retention->keep_last = 2;
  const auto before = Snapshot(mgr->storage());
  Result<GcReport> planned = mgr->GarbageCollect(gc);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_EQ(Snapshot(mgr->storage()), before);
  EXPECT_EQ(planned->deleted_steps, (Steps{1, 2, 3}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 2, 3, 4, 5}));
  for (int64_t step = 1; step <= 3; ++step) {
    EXPECT_TRUE(Contains(planned->deleted_objects, format::ManifestKey(step)));
    EXPECT_TRUE(
        Contains(planned->deleted_objects, DataKeyOf(mgr->storage(), step)));
  }
  EXPECT_TRUE(Contains(planned->deleted_objects,
                       format::DataObjectKey(4, 0, "0123456789abcdef")));
  EXPECT_FALSE(
      Contains(planned->deleted_objects, "step-000000000002/notes.txt"));

  gc.dry_run = false;
  Result<GcReport> done = mgr->GarbageCollect(gc);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->deleted_steps, planned->deleted_steps);
  EXPECT_EQ(Sorted(done->deleted_objects), Sorted(planned->deleted_objects));
  EXPECT_EQ(done->bytes_freed, planned->bytes_freed);
  EXPECT_EQ(ListedSteps(*mgr), (Steps{4, 5}));
  EXPECT_EQ(AllKeys(mgr->storage(), "step-000000000002"),
            Keys{"step-000000000002/notes.txt"});
  ExpectLoads(*mgr, 4, Model(4));
  ExpectLoads(*mgr, 5, Model(5));
}

TEST_P(GcTest, DeleteRemovesTheManifestAndTheData) {
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 3; ++step) SaveModel(*mgr, step);
  Put(*mgr, "step-000000000002/notes.txt", "mine");

  ASSERT_TRUE(mgr->Delete(2).ok());
  EXPECT_EQ(AllKeys(mgr->storage(), "step-000000000002/"),
            Keys{"step-000000000002/notes.txt"});
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 3}));
  EXPECT_EQ(mgr->LoadAll(2).status().code(), ErrorCode::kNotFound);
  ExpectLoads(*mgr, 1, Model(1));
  ExpectLoads(*mgr, 3, Model(3));

  Status again = mgr->Delete(2).status();
  EXPECT_EQ(again.code(), ErrorCode::kNotFound) << again.ToString();
  Status missing = mgr->Delete(99).status();
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find("99"), std::string::npos)
      << missing.ToString();
}

TEST_P(GcTest, DeleteRefusesWhileAnotherCheckpointDependsOnIt) {
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  SaveModel(*mgr, 1);
  SaveModel(*mgr, 2);
  WriteDependentManifest(*mgr, 1, 5, {1});
  ExpectLoads(*mgr, 5, Model(1));  // its objects are step 1's

  const auto before = Snapshot(mgr->storage());
  Status refused = mgr->Delete(1).status();
  EXPECT_EQ(refused.code(), ErrorCode::kFailedPrecondition)
      << refused.ToString();
  EXPECT_NE(refused.message().find("5"), std::string::npos)
      << refused.ToString();
  EXPECT_EQ(Snapshot(mgr->storage()), before);
  ExpectLoads(*mgr, 1, Model(1));

  // Once the dependant is gone, so may its dependency go; deleting the
  // dependant leaves the data it borrowed alone.
  ASSERT_TRUE(mgr->Delete(5).ok());
  ExpectLoads(*mgr, 1, Model(1));
  ASSERT_TRUE(mgr->Delete(1).ok());
  EXPECT_EQ(ListedSteps(*mgr), (Steps{2}));
  ExpectLoads(*mgr, 2, Model(2));
}

TEST_P(GcTest, LatestFollowsSavesAndDeletes) {
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 3; ++step) {
    SaveModel(*mgr, step);
    EXPECT_EQ(Read(*mgr, "LATEST"), std::to_string(step) + "\n");
  }
  ASSERT_TRUE(mgr->Delete(3).ok());
  EXPECT_EQ(Read(*mgr, "LATEST"), "2\n");
  ASSERT_TRUE(mgr->Delete(1).ok());
  EXPECT_EQ(Read(*mgr, "LATEST"), "2\n");
  ASSERT_TRUE(mgr->Delete(2).ok());
  EXPECT_EQ(mgr->storage().Stat("LATEST").status().code(),
            ErrorCode::kNotFound);
  Result<std::optional<int64_t>> latest = mgr->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_FALSE(latest->has_value());
  SaveModel(*mgr, 7);
  EXPECT_EQ(Read(*mgr, "LATEST"), "7\n");
}

// --- mem:// only ---------------------------------------------------------

using GcMemTest = ManagerTest;

TEST_F(GcMemTest, KeepBestOnSaveUsesTheSavedMetrics) {
  Options o = MakeOptions();
  o.retention.keep_best = 1;
  o.retention.best_metric = "loss";
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  const std::vector<std::pair<int64_t, double>> losses = {
      {1, 0.5}, {2, 0.1}, {3, 0.3}, {4, 0.4}};
  const std::vector<Steps> expect_deleted = {{}, {1}, {}, {3}};
  for (size_t i = 0; i < losses.size(); ++i) {
    SaveOptions save;
    save.metrics = {{"loss", losses[i].second}};
    SaveResult r = SaveModel(*mgr, losses[i].first, save);
    EXPECT_EQ(r.info.metrics.at("loss"), losses[i].second);
    EXPECT_EQ(r.deleted_steps, expect_deleted[i]) << "save " << i + 1;
  }
  EXPECT_EQ(ListedSteps(*mgr), (Steps{2, 4}));
  // A checkpoint without the metric is never best, but the newest stays.
  SaveResult r = SaveModel(*mgr, 5);
  EXPECT_EQ(r.deleted_steps, (Steps{4}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{2, 5}));
  ExpectLoads(*mgr, 2, Model(2));
  ExpectLoads(*mgr, 5, Model(5));
}

TEST_F(GcMemTest, KeepBestByAMetricNoCheckpointHasDeletesNothing) {
  Options o = MakeOptions();
  o.retention.keep_last = 1;
  o.retention.keep_best = 1;
  o.retention.best_metric = "Loss";  // the saves give "loss"
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  for (const auto& [step, loss] :
       std::vector<std::pair<int64_t, double>>{{1, 0.1}, {2, 0.5}, {3, 0.9}}) {
    SaveOptions save;
    save.metrics = {{"loss", loss}};
    EXPECT_EQ(SaveModel(*mgr, step, save).deleted_steps, Steps{});
  }
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 2, 3}));
  // Asked for, the collection is refused whole, dry run or not.
  for (bool dry_run : {true, false}) {
    RetentionPolicy typo;
    typo.keep_best = 1;
    typo.best_metric = "Loss";
    Result<GcReport> gc =
        mgr->GarbageCollect({.dry_run = dry_run, .retention = typo});
    ASSERT_FALSE(gc.ok());
    EXPECT_EQ(gc.status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(gc.status().message().find("\"loss\""), std::string::npos)
        << gc.status().ToString();
  }
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 2, 3}));
  ExpectLoads(*mgr, 1, Model(1));
  // The metric right: the best (step 1) and the newest stay.
  RetentionPolicy right;
  right.keep_best = 1;
  right.best_metric = "loss";
  Result<GcReport> gc = mgr->GarbageCollect({.retention = right});
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->deleted_steps, Steps{2});
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 3}));
}

TEST_F(GcMemTest, AMetricThatIsNotFiniteIsLeftOutAndTheSaveGoesOn) {
  Options o = MakeOptions();
  o.retention.keep_best = 1;
  o.retention.best_metric = "loss";
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  SaveOptions save;
  save.metrics = {{"loss", 0.5}};
  SaveModel(*mgr, 1, save);
  // A diverged loss: the checkpoint is saved, without it; the best stays.
  for (double diverged : {std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::infinity()}) {
    save.metrics = {{"loss", diverged}, {"lr", 0.1}};
    const int64_t step = mgr->Latest()->value() + 1;
    SaveResult r = SaveModel(*mgr, step, save);
    EXPECT_EQ(r.info.metrics, (std::map<std::string, double>{{"lr", 0.1}}));
    ExpectLoads(*mgr, step, Model(step));
  }
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 3}));
}

TEST_F(GcMemTest, KeepEveryNStepsOnSave) {
  Options o = MakeOptions();
  o.retention.keep_every_n_steps = 3;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  Steps deleted;
  for (int64_t step = 1; step <= 7; ++step) {
    SaveResult r = SaveModel(*mgr, step);
    deleted.insert(deleted.end(), r.deleted_steps.begin(),
                   r.deleted_steps.end());
  }
  EXPECT_EQ(deleted, (Steps{1, 2, 4, 5}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{3, 6, 7}));
  for (int64_t step : {3, 6, 7}) ExpectLoads(*mgr, step, Model(step));
}

TEST_F(GcMemTest, MinSecondsBetweenSavesSkipsAndThenSaves) {
  Options o = MakeOptions();
  o.min_seconds_between_saves = 60;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  const int64_t t0 = now_ms_;
  Model m1(1), m2(2);
  State s1 = m1.ToState(), s2 = m2.ToState();
  Result<SaveResult> first = mgr->Save(1, s1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->skipped);

  for (int64_t later : {int64_t{0}, int64_t{30'000}, int64_t{59'999}}) {
    now_ms_ = t0 + later;
    const auto before = Snapshot(mgr->storage());
    Result<SaveResult> skipped = mgr->Save(2, s2);
    ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
    EXPECT_TRUE(skipped->skipped) << later << " ms later";
    EXPECT_TRUE(skipped->deleted_steps.empty());
    EXPECT_EQ(Snapshot(mgr->storage()), before) << later << " ms later";
    EXPECT_EQ(ListedSteps(*mgr), (Steps{1}));
    EXPECT_EQ(mgr->LoadAll(2).status().code(), ErrorCode::kNotFound);
  }

  now_ms_ = t0 + 60'000;
  Result<SaveResult> second = mgr->Save(2, s2);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->skipped);
  EXPECT_EQ(second->info.created_unix_ms, t0 + 60'000);
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 2}));
  ExpectLoads(*mgr, 2, Model(2));

  // The window counts from the newest committed checkpoint.
  now_ms_ = t0 + 61'000;
  Result<SaveResult> third = mgr->Save(3, s1);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_TRUE(third->skipped);
}

TEST_F(GcMemTest, RetentionRemovesAnIncrementalChainTogether) {
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  SaveModel(*mgr, 1);
  // 3 -> 2 -> 1, all reading step 1's data (so each lists step 1: a
  // manifest names every step whose objects it reads); 4 is a full one.
  WriteDependentManifest(*mgr, 1, 2, {1});
  WriteDependentManifest(*mgr, 1, 3, {1, 2});
  SaveModel(*mgr, 4);

  GcOptions gc;
  gc.retention = RetentionPolicy{};
  gc.retention->keep_last = 1;
  gc.dry_run = true;
  Result<GcReport> planned = mgr->GarbageCollect(gc);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_EQ(planned->deleted_steps, (Steps{1, 2, 3}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 2, 3, 4}));

  gc.dry_run = false;
  Result<GcReport> done = mgr->GarbageCollect(gc);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->deleted_steps, (Steps{1, 2, 3}));
  EXPECT_EQ(Sorted(done->deleted_objects), Sorted(planned->deleted_objects));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{4}));
  EXPECT_EQ(AllKeys(mgr->storage(), "step-000000000001"), Keys{});
  ExpectLoads(*mgr, 4, Model(4));
}

TEST_F(GcMemTest, RetentionOnSaveRemovesAnIncrementalChainTogether) {
  Options o = MakeOptions();
  o.retention.keep_last = 1;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  SaveModel(*mgr, 1);
  WriteDependentManifest(*mgr, 1, 2, {1});
  WriteDependentManifest(*mgr, 1, 3, {1, 2});
  SaveResult r = SaveModel(*mgr, 4);
  EXPECT_EQ(r.deleted_steps, (Steps{1, 2, 3}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{4}));
}

TEST_F(GcMemTest, DependencyOfTheNewestIsKeptByRetention) {
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  SaveModel(*mgr, 1);
  SaveModel(*mgr, 2);
  WriteDependentManifest(*mgr, 1, 3, {1});
  GcOptions gc;
  gc.retention = RetentionPolicy{};
  gc.retention->keep_last = 1;
  Result<GcReport> done = mgr->GarbageCollect(gc);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->deleted_steps, (Steps{2}));
  EXPECT_EQ(ListedSteps(*mgr), (Steps{1, 3}));
  ExpectLoads(*mgr, 3, Model(1));
}

TEST_F(GcMemTest, WithoutGcAfterSaveGarbageWaitsForGarbageCollect) {
  Options o = MakeOptions();
  o.gc_after_save = false;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  SaveModel(*mgr, 1);
  const std::string dead = format::DataObjectKey(1, 0, "0123456789abcdef");
  Put(*mgr, dead, "dead");
  SaveModel(*mgr, 2);
  EXPECT_TRUE(Contains(AllKeys(mgr->storage()), dead));
  Result<GcReport> done = mgr->GarbageCollect();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->deleted_objects, Keys{dead});
  EXPECT_FALSE(Contains(AllKeys(mgr->storage()), dead));
}

TEST_F(GcMemTest, GcAfterSaveRemovesDeadAttempts) {
  // What a job's earlier run left (it died mid-save): the first save of
  // the next run collects it.
  {
    auto earlier = OpenManager(MakeOptions());
    ASSERT_NE(earlier, nullptr);
    SaveModel(*earlier, 1);
  }
  auto mgr = OpenManager(MakeOptions());
  ASSERT_NE(mgr, nullptr);
  const std::string dead = format::DataObjectKey(1, 0, "0123456789abcdef");
  Put(*mgr, dead, "dead");
  Put(*mgr, "README", "mine");
  SaveModel(*mgr, 2);
  const Keys keys = AllKeys(mgr->storage());
  EXPECT_FALSE(Contains(keys, dead));
  EXPECT_TRUE(Contains(keys, "README"));
}

// Counts listings of the whole root (an empty prefix, or the steps').
class CountingLists : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    if (prefix.empty() || prefix == format::kStepPrefix) ++whole_root;
    return StorageWrapper::List(prefix);
  }
  int whole_root = 0;
};

TEST_F(GcMemTest, SavesOfTheRootsOnlyWriterDoNotListTheWholeRoot) {
  // A save's cost must not grow with the steps in the root: once the
  // manager has collected the whole root holding the lease, its own
  // commits are the root's only changes, so neither the collection after a
  // save, retention that deletes nothing, nor an incremental save's choice
  // of parent lists the root again (bench_root_growth measures it).
  auto base = OpenStorage(url_);
  ASSERT_TRUE(base.ok());
  auto counting = std::make_unique<CountingLists>(base->get());
  CountingLists* lists = counting.get();
  Options o = MakeOptions();
  o.retention.keep_every_n_steps = 1;  // keeps every step: deletes none
  auto mgr = CheckpointManager::Open(std::move(counting), o);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  SaveModel(**mgr, 1);
  SaveModel(**mgr, 2, SaveOptions{.incremental = true});
  const int after_first = lists->whole_root;
  // (Each Model differs whole from the one before, so each incremental
  // save chooses its parent and then writes everything.)
  for (int64_t step = 3; step <= 20; ++step) {
    SaveModel(**mgr, step, SaveOptions{.incremental = true});
  }
  EXPECT_EQ(lists->whole_root, after_first);
  // A failed save sends the next one back to the whole root, which finds
  // what the failure left.
  const std::string dead = format::DataObjectKey(20, 0, "0123456789abcdef");
  Put(**mgr, dead, "dead");
  Model m(20);
  State state = m.ToState();
  EXPECT_EQ((*mgr)->Save(20, state).status().code(), ErrorCode::kAlreadyExists);
  SaveModel(**mgr, 21);
  EXPECT_GT(lists->whole_root, after_first);
  EXPECT_FALSE(Contains(AllKeys(**base), dead));
  EXPECT_EQ(ListedSteps(**mgr).size(), 21u);
}

// Runs `hook` once, the first time a manifest is deleted through it: the
// moment another party's delete would interleave.
class BeforeManifestDelete : public StorageWrapper {
 public:
  BeforeManifestDelete(Storage* target, std::function<void()> hook)
      : StorageWrapper(target), hook_(std::move(hook)) {}
  Status Delete(std::string_view key) override {
    if (hook_ && key.ends_with(format::kManifestName)) {
      std::exchange(hook_, nullptr)();
    }
    return StorageWrapper::Delete(key);
  }

 private:
  std::function<void()> hook_;
};

// Two collections cannot overlap while both take the lease (one waits or is
// refused: LeaseTest); without it, or when a lease is broken, the deletes
// themselves must still end as one.
// --- file:// only ------------------------------------------------------------

class GcFileTest : public ManagerTest {
 protected:
  Backend backend() const override { return Backend::kFile; }
};

// A step whose MANIFEST.json is a symbolic link (a backup restored with
// `cp -s`), a directory or a FIFO: never read, so the step is not listed,
// but a collection holding the lease keeps its objects, saying why, where
// it took them for a dead attempt's and deleted them.
TEST_F(GcFileTest, AStepWhoseManifestCannotBeReadKeepsItsObjects) {
  const std::filesystem::path root = url_.substr(std::string("file://").size());
  for (const std::string kind : {"symlink", "directory", "fifo"}) {
    SCOPED_TRACE(kind);
    Options o = MakeOptions();
    o.lease_seconds = 60;
    auto mgr = OpenManager(o);
    ASSERT_NE(mgr, nullptr);
    const int64_t step = mgr->Latest()->value_or(0) + 1;
    SaveModel(*mgr, step);
    const Keys before =
        Sorted(AllKeys(mgr->storage(), format::StepDirName(step) + "/"));
    const std::filesystem::path manifest = root / format::ManifestKey(step);
    const std::filesystem::path copy =
        root.parent_path() / ("manifest-" + kind);
    std::filesystem::rename(manifest, copy);
    if (kind == "symlink") {
      std::filesystem::create_symlink(copy, manifest);
    } else if (kind == "directory") {
      std::filesystem::create_directory(manifest);
    } else {
      ASSERT_EQ(::mkfifo(manifest.c_str(), 0644), 0);
    }
    Result<GcReport> gc = mgr->GarbageCollect();
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    EXPECT_EQ(gc->deleted_objects, Keys{});
    // Put back, the step loads whole.
    std::filesystem::remove(manifest);
    std::filesystem::rename(copy, manifest);
    EXPECT_EQ(Sorted(AllKeys(mgr->storage(), format::StepDirName(step) + "/")),
              before);
    ExpectLoads(*mgr, step, Model(step));
  }
}

// The newest step's data object truncated (or gone, or a symbolic link in
// its place): `ckpt ls` marks it incomplete and a resume skips it, so
// retention must not count it as one of the newest: keep-last 1 keeps the
// newest step that loads, deletes the older ones, and leaves the damaged
// one to be looked at (a save of its step replaces it).
TEST_F(GcFileTest, RetentionCountsOnlyStepsThatLoad) {
  const std::filesystem::path root = url_.substr(std::string("file://").size());
  RetentionPolicy keep_one;
  keep_one.keep_last = 1;
  Options o = MakeOptions();
  o.lease_seconds = 60;
  int64_t first = 1;
  for (const std::string damage : {"truncated", "missing", "symlink"}) {
    SCOPED_TRACE(damage);
    auto mgr = OpenManager(o);
    ASSERT_NE(mgr, nullptr);
    for (int64_t s = first; s < first + 4; ++s) SaveModel(*mgr, s);
    const int64_t newest = first + 3;
    std::filesystem::path data;
    for (const auto& f : std::filesystem::directory_iterator(
             root / format::StepDirName(newest))) {
      if (f.path().extension() == ".safetensors") data = f.path();
    }
    ASSERT_FALSE(data.empty());
    const std::filesystem::path aside = root.parent_path() / "aside";
    if (damage == "truncated") {
      std::filesystem::resize_file(data, 1000);
    } else {
      std::filesystem::rename(data, aside);
      if (damage == "symlink") std::filesystem::create_symlink(aside, data);
    }
    auto listed = mgr->List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    ASSERT_FALSE(listed->back().incomplete.empty());
    if (damage == "symlink") {
      EXPECT_NE(listed->back().incomplete.find("cannot be read"),
                std::string::npos)
          << listed->back().incomplete;
    }
    Result<GcReport> gc = mgr->GarbageCollect({.retention = keep_one});
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    // The last round's newest, which stayed, goes too.
    std::vector<int64_t> older = {first, first + 1};
    if (first > 1) older.insert(older.begin(), first - 1);
    EXPECT_EQ(gc->deleted_steps, older);
    listed = mgr->List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    ASSERT_EQ(listed->size(), 2u);
    EXPECT_EQ((*listed)[0].step, first + 2);
    EXPECT_EQ((*listed)[1].step, newest);
    ExpectLoads(*mgr, first + 2, Model(first + 2));
    // The job restarted saves the damaged step again, which replaces it;
    // the next collection keeps it and deletes the one before.
    std::filesystem::remove(data);
    std::filesystem::remove(aside);
    mgr.reset();
    mgr = OpenManager(o);
    ASSERT_NE(mgr, nullptr);
    SaveModel(*mgr, newest);
    gc = mgr->GarbageCollect({.retention = keep_one});
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    EXPECT_EQ(gc->deleted_steps, (std::vector<int64_t>{first + 2}));
    first = newest + 1;
  }
}

// A save killed between making its step's folder and its first file leaves
// an empty folder, which no listing shows: a collection holding the lease
// removes it, one without the lease once it is older than the grace period;
// other folders (the user's, a step's with a file of the user's) stay.
TEST_F(GcFileTest, EmptyStepFoldersOfKilledSavesAreRemoved) {
  const std::filesystem::path root = url_.substr(std::string("file://").size());
  Options o = MakeOptions();
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  SaveModel(*mgr, 1);
  const std::string empty = format::StepDirName(7);
  std::filesystem::create_directory(root / empty);
  std::filesystem::create_directory(root / format::StepDirName(8));
  ASSERT_TRUE(testing::WriteFile(root / format::StepDirName(8) / "notes.txt",
                                 "the user's"));
  std::filesystem::create_directory(root / "user-folder");
  // Without the lease, young: a save may be about to fill it.
  Options unleased = MakeOptions();
  unleased.lease_seconds = 0;
  mgr.reset();
  {
    auto reader = OpenManager(unleased);
    ASSERT_NE(reader, nullptr);
    Result<GcReport> young = reader->GarbageCollect();
    ASSERT_TRUE(young.ok()) << young.status().ToString();
    EXPECT_TRUE(std::filesystem::exists(root / empty));
    now_ms_ += 2 * 3600 * 1000;  // past the grace period
    Result<GcReport> old = reader->GarbageCollect({.dry_run = true});
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    EXPECT_EQ(old->deleted_objects, Keys{empty + "/"});
    EXPECT_TRUE(std::filesystem::exists(root / empty));  // a dry run
  }
  o.lease_seconds = 60;
  auto owner = OpenManager(o);
  ASSERT_NE(owner, nullptr);
  Result<GcReport> gc = owner->GarbageCollect();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->deleted_objects, Keys{empty + "/"});
  EXPECT_FALSE(std::filesystem::exists(root / empty));
  EXPECT_TRUE(
      std::filesystem::exists(root / format::StepDirName(8) / "notes.txt"));
  EXPECT_TRUE(std::filesystem::is_directory(root / "user-folder"));
  ExpectLoads(*owner, 1, Model(1));
}

TEST_P(GcTest, TwoCollectionsAtOnceEndAsOne) {
  Options unleased = MakeOptions();
  unleased.lease_seconds = 0;
  auto other = OpenManager(unleased);
  ASSERT_NE(other, nullptr);
  for (int64_t step = 1; step <= 5; ++step) SaveModel(*other, step);
  RetentionPolicy keep_one;
  keep_one.keep_last = 1;
  GcOptions gc;
  gc.retention = keep_one;
  // The other collection runs whole between this one's decision and its
  // first delete: every step this one meant to delete is gone already.
  Result<GcReport> theirs = AbortedError("the other collection never ran");
  auto base = OpenStorage(url_);
  ASSERT_TRUE(base.ok());
  auto racing = std::make_unique<BeforeManifestDelete>(
      base->get(), [&] { theirs = other->GarbageCollect(gc); });
  auto mgr = CheckpointManager::Open(std::move(racing), unleased);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  Result<GcReport> ours = (*mgr)->GarbageCollect(gc);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  EXPECT_EQ(theirs->deleted_steps, (Steps{1, 2, 3, 4}));
  // Each step is reported deleted by the party that deleted it.
  EXPECT_TRUE(ours->deleted_steps.empty() || ours->deleted_steps == Steps{4});
  EXPECT_EQ(ListedSteps(*other), Steps{5});
  ExpectLoads(*other, 5, Model(5));
  // And a delete of a step already gone says so (the caller asked for it).
  EXPECT_EQ(other->Delete(3).status().code(), ErrorCode::kNotFound);
}

// A disk that fills up exactly when the manifest is written.
class FullAtCommit : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    if (key.ends_with(format::kManifestName)) {
      return IOError("put " + std::string(key) + ": No space left on device");
    }
    return StorageWrapper::Put(key, data, mode);
  }
};

TEST_P(GcTest, ASaveThatCannotCommitRemovesItsOwnData) {
  auto base = OpenStorage(url_);
  ASSERT_TRUE(base.ok());
  auto mgr = CheckpointManager::Open(
      std::make_unique<FullAtCommit>(base->get()), MakeOptions());
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  Model m(1);
  State state = m.ToState();
  Result<SaveResult> r = (*mgr)->Save(1, state);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("No space"), std::string::npos)
      << r.status().ToString();
  // Nothing full-size waits for a collection: the step holds nothing.
  EXPECT_EQ(AllKeys(**base, format::StepDirName(1) + "/"), Keys{});
}

TEST_P(GcTest, ASaveBelowTheNewestWorksWithRetention) {
  Options o = MakeOptions();
  o.retention.keep_last = 2;
  auto mgr = OpenManager(o);
  ASSERT_NE(mgr, nullptr);
  for (int64_t step : {10, 20, 30}) SaveModel(*mgr, step);
  EXPECT_EQ(ListedSteps(*mgr), (Steps{20, 30}));
  // A rollback: the job goes on from an earlier step. The save commits and
  // survives its own retention; the newest is still decided by step.
  SaveResult r = SaveModel(*mgr, 15);
  EXPECT_EQ(r.info.step, 15);
  EXPECT_EQ(ListedSteps(*mgr), (Steps{15, 20, 30}));
  ExpectLoads(*mgr, 15, Model(15));
  EXPECT_EQ(mgr->Latest().value(), std::optional<int64_t>(30));
  // A later collection applies the rules to it like to any other.
  ASSERT_TRUE(mgr->GarbageCollect().ok());
  EXPECT_EQ(ListedSteps(*mgr), (Steps{20, 30}));
}

}  // namespace
}  // namespace ckpt
