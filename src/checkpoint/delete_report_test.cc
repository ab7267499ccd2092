// What Delete reports: the objects it removed (keys and bytes, as a listing
// of the step directory shows them before), what it left there and why, the
// dependants --force rewrote, and, in a dry run, the same with nothing
// changed.

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "testing/backends.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using Steps = std::vector<int64_t>;
constexpr uint64_t kChunk = 4096;

// The objects of step `step`'s directory: key -> bytes.
std::map<std::string, uint64_t> Listing(CheckpointManager& mgr, int64_t step) {
  std::map<std::string, uint64_t> out;
  Result<std::vector<ObjectInfo>> listed =
      mgr.storage().List(format::StepDirName(step) + "/");
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (listed.ok()) {
    for (const ObjectInfo& o : *listed) out[o.key] = o.size;
  }
  return out;
}

std::map<std::string, uint64_t> Objects(
    const std::vector<DeleteReport::Object>& objects) {
  std::map<std::string, uint64_t> out;
  for (const DeleteReport::Object& o : objects) {
    EXPECT_TRUE(out.emplace(o.key, o.bytes).second) << o.key << " twice";
  }
  return out;
}

Steps RewrittenSteps(const DeleteReport& r) {
  Steps out;
  for (const DeleteReport::Rewritten& w : r.rewritten) out.push_back(w.step);
  return out;
}

class DeleteReportTest : public ::testing::Test {
 protected:
  std::unique_ptr<CheckpointManager> Open() {
    Options o;
    o.chunk_size = kChunk;
    auto mgr = CheckpointManager::Open(root_.url(), std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  // Saves `step` from values_ (64 KiB: 16 chunks), incremental when asked.
  void Save(CheckpointManager& mgr, int64_t step, bool incremental) {
    State s;
    s.AddTensor("w", View(std::span<float>(values_), {16, 1024}));
    SaveOptions options;
    options.incremental = incremental;
    Result<SaveResult> r = mgr.Save(step, s, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  testing::TestRoot root_{testing::Backend::kMemory, "delete-report"};
  std::vector<float> values_ = [] {
    std::vector<float> v(16 * 1024);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    return v;
  }();
};

// A plain delete reports every object of the step directory as removed,
// each with the bytes the listing shows, the manifest first.
TEST_F(DeleteReportTest, PlainDeleteReportsTheRemovedKeysAndBytes) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  for (int64_t step : {1, 2, 3}) {
    values_[0] = static_cast<float>(step);
    ASSERT_NO_FATAL_FAILURE(Save(*mgr, step, false));
  }
  const std::map<std::string, uint64_t> before = Listing(*mgr, 2);
  ASSERT_GE(before.size(), 2u) << "a manifest and a data object";
  uint64_t bytes = 0;
  for (const auto& [key, size] : before) bytes += size;

  Result<DeleteReport> r = mgr->Delete(2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 2);
  EXPECT_FALSE(r->dry_run);
  EXPECT_TRUE(r->manifest_deleted);
  EXPECT_EQ(Objects(r->removed), before);
  ASSERT_FALSE(r->removed.empty());
  EXPECT_EQ(r->removed.front().key, format::ManifestKey(2));
  EXPECT_EQ(r->bytes_freed, bytes);
  EXPECT_TRUE(r->kept.empty());
  EXPECT_TRUE(r->skipped.empty());
  EXPECT_TRUE(r->rewritten.empty());
  EXPECT_TRUE(Listing(*mgr, 2).empty());
  EXPECT_EQ(testing::ListedSteps(*mgr), (Steps{1, 3}));

  // A failed delete reports nothing and names the root, step and operation.
  Result<DeleteReport> again = mgr->Delete(2);
  ASSERT_EQ(again.status().code(), ErrorCode::kNotFound);
  for (const std::string& part : {std::string("delete step 2"), root_.url()}) {
    EXPECT_NE(again.status().message().find(part), std::string::npos)
        << again.status().message();
  }
}

// Deleting the base of an incremental chain with rewrite_dependants: the
// report names each dependant rewritten and the bytes copied into it, the
// base's objects removed, and the file ckpt did not write kept, with why. A
// dry run reports the same and changes nothing.
TEST_F(DeleteReportTest, DeleteOfAChainBaseReportsRewritesAndKeptObjects) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  ASSERT_NO_FATAL_FAILURE(Save(*mgr, 1, false));
  values_[0] = -2;  // one chunk of sixteen changes each step
  ASSERT_NO_FATAL_FAILURE(Save(*mgr, 2, true));
  values_[5000] = -3;
  ASSERT_NO_FATAL_FAILURE(Save(*mgr, 3, true));
  const std::string notes = format::StepDirName(1) + "/notes.txt";
  ASSERT_TRUE(mgr->storage().PutString(notes, "the user's").ok());
  std::map<std::string, uint64_t> doomed = Listing(*mgr, 1);
  ASSERT_EQ(doomed.erase(notes), 1u);
  uint64_t doomed_bytes = 0;
  for (const auto& [key, size] : doomed) doomed_bytes += size;
  const auto own_bytes = [&](int64_t step) {
    Result<CheckpointDescription> d = mgr->Describe(step);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? d->info.bytes : 0;
  };
  const uint64_t own2 = own_bytes(2), own3 = own_bytes(3);

  const auto expect_report = [&](const DeleteReport& r, bool dry_run) {
    EXPECT_EQ(r.step, 1);
    EXPECT_EQ(r.dry_run, dry_run);
    EXPECT_TRUE(r.manifest_deleted);
    EXPECT_EQ(RewrittenSteps(r), (Steps{2, 3}));
    EXPECT_EQ(Objects(r.removed), doomed);
    EXPECT_EQ(r.bytes_freed, doomed_bytes);
    ASSERT_EQ(r.kept.size(), 1u);
    EXPECT_EQ(r.kept[0].key, notes);
    EXPECT_EQ(r.kept[0].bytes, 10u);
    EXPECT_EQ(r.kept[0].reason, kDeleteNotCkptObject);
    EXPECT_TRUE(r.skipped.empty());
  };

  Result<DeleteReport> planned =
      mgr->Delete(1, {.rewrite_dependants = true, .dry_run = true});
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_NO_FATAL_FAILURE(expect_report(*planned, true));
  EXPECT_EQ(testing::ListedSteps(*mgr), (Steps{1, 2, 3}));
  EXPECT_EQ(Listing(*mgr, 1).size(), doomed.size() + 1);
  EXPECT_EQ(own_bytes(2), own2) << "a dry run rewrites nothing";

  // Without rewrite_dependants the chain's base stays, and the error says
  // why; a dry run is refused alike.
  for (bool dry_run : {false, true}) {
    Result<DeleteReport> refused = mgr->Delete(1, {.dry_run = dry_run});
    EXPECT_EQ(refused.status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("steps 2, 3 depend on it"),
              std::string::npos)
        << refused.status().message();
  }

  Result<DeleteReport> r = mgr->Delete(1, {.rewrite_dependants = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(expect_report(*r, false));
  ASSERT_EQ(r->rewritten.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    // Each dependant read 15 (step 2) or 14 (step 3) unchanged chunks of
    // step 1, now in an object of its own: its own bytes grew by them and a
    // safetensors header.
    const DeleteReport::Rewritten& w = r->rewritten[i];
    EXPECT_EQ(w.bytes_copied, (i == 0 ? 15 : 14) * kChunk) << w.step;
    EXPECT_EQ(w.bytes_copied, planned->rewritten[i].bytes_copied);
    const uint64_t grew = own_bytes(w.step) - (i == 0 ? own2 : own3);
    EXPECT_GE(grew, w.bytes_copied) << w.step;
    EXPECT_LT(grew, w.bytes_copied + kChunk) << w.step;
  }
  EXPECT_EQ(Listing(*mgr, 1), (std::map<std::string, uint64_t>{{notes, 10}}));
  EXPECT_EQ(testing::ListedSteps(*mgr), (Steps{2, 3}));
}

// A collection reports each step it deleted as Delete would, newest first;
// the rest of deleted_objects are dead attempts' objects.
TEST_F(DeleteReportTest, GarbageCollectReportsEachDeletedStep) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  for (int64_t step : {1, 2, 3}) {
    values_[0] = static_cast<float>(-step);
    ASSERT_NO_FATAL_FAILURE(Save(*mgr, step, false));
  }
  const std::string dead = format::DataObjectKey(3, 0, "00000000deadbeef");
  ASSERT_TRUE(mgr->storage().PutString(dead, "a dead attempt").ok());
  const std::map<std::string, uint64_t> one = Listing(*mgr, 1);
  const std::map<std::string, uint64_t> two = Listing(*mgr, 2);

  Result<GcReport> gc =
      mgr->GarbageCollect({.retention = RetentionPolicy{.keep_last = 1}});
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->deleted_steps, (Steps{1, 2}));
  ASSERT_EQ(gc->step_reports.size(), 2u);
  EXPECT_EQ(gc->step_reports[0].step, 2);
  EXPECT_EQ(Objects(gc->step_reports[0].removed), two);
  EXPECT_EQ(gc->step_reports[1].step, 1);
  EXPECT_EQ(Objects(gc->step_reports[1].removed), one);
  std::set<std::string> rest(gc->deleted_objects.begin(),
                             gc->deleted_objects.end());
  uint64_t bytes = 0;
  for (const DeleteReport& r : gc->step_reports) {
    EXPECT_TRUE(r.manifest_deleted);
    EXPECT_TRUE(r.kept.empty());
    for (const DeleteReport::Object& o : r.removed) {
      EXPECT_EQ(rest.erase(o.key), 1u) << o.key;
    }
    bytes += r.bytes_freed;
  }
  EXPECT_EQ(rest, std::set<std::string>{dead});
  EXPECT_EQ(gc->bytes_freed, bytes + 14);
}

}  // namespace
}  // namespace ckpt
