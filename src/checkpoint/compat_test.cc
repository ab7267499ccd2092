// Checkpoints of manifest versions 1 and 2, written by ckpt before version 3
// became the default and kept in tests/data/json-v1-v2, load bit for bit,
// verify, and serve as the parent of a version 3 incremental save.
//
// The data was made by this file, with Options::metadata_layout kJson:
//   CKPT_WRITE_COMPAT_DATA=<dir> checkpoint_compat_test
//       --gtest_also_run_disabled_tests --gtest_filter='*WriteData'
// The tests themselves only read a copy of the committed root.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/layout.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// The state of step `step`: step 2 changes one 4 KiB chunk of "table".
struct Values {
  std::vector<float> table = std::vector<float>(4096);
  std::vector<int64_t> counters = {0, 0, 0};
  explicit Values(int64_t step) {
    for (size_t i = 0; i < table.size(); ++i) table[i] = 0.5f * i;
    counters = {step, 10 * step, 100 * step};
    if (step >= 2) table[2048] = -1.0f;
  }
  State ToState() {
    State s;
    s.AddTensor("table", View(std::span<float>(table), {64, 64}));
    s.AddTensor("counters", View(std::span<int64_t>(counters), {3}));
    s.AddBlob("rng", "seed-" + std::to_string(counters[0]));
    s.AddMetadata("run", {{"lr", "0.1"}});
    return s;
  }
};

Options JsonOptions() {
  Options o;
  o.job_id = "compat";
  o.chunk_size = 4096;
  o.metadata_layout = Options::MetadataLayout::kJson;
  return o;
}

TEST(CompatData, DISABLED_WriteData) {
  const char* dir = std::getenv("CKPT_WRITE_COMPAT_DATA");
  ASSERT_NE(dir, nullptr) << "set CKPT_WRITE_COMPAT_DATA=<dir>";
  auto mgr = CheckpointManager::Open(dir, JsonOptions());
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  SaveOptions full;
  Values one(1);
  ASSERT_TRUE((*mgr)->Save(1, one.ToState(), full).ok());
  SaveOptions incremental;
  incremental.incremental = true;
  Values two(2);
  ASSERT_TRUE((*mgr)->Save(2, two.ToState(), incremental).ok());
}

class CompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A copy: loading must not depend on writing into the source tree, and
    // a save below must not change it.
    fs::copy(fs::path(CKPT_COMPAT_DATA), root_, fs::copy_options::recursive);
    fs::remove(root_ / "LEASE-000000000001");
  }

  void ExpectLoads(CheckpointManager& mgr, int64_t step) {
    Values want(step);
    Values got(99);
    State s = got.ToState();
    Result<CheckpointInfo> info = mgr.Load(step, s);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(got.table, want.table) << "step " << step;
    EXPECT_EQ(got.counters, want.counters) << "step " << step;
    EXPECT_EQ(s.BlobString("rng").value(), "seed-" + std::to_string(step));
    EXPECT_EQ(s.Metadata("run").value().at("lr"), "0.1");
  }

  testing::TempDir dir_;
  const fs::path root_ = dir_.path() / "root";
};

TEST_F(CompatTest, VersionsOneAndTwoLoadBitForBitAndVerify) {
  auto mgr = CheckpointManager::Open(root_.string());
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  // What is on disk is what the test claims: JSON manifests of versions 1
  // and 2, step 2 depending on step 1.
  auto list = (*mgr)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE((*list)[1].depends_on == std::vector<int64_t>{1});
  // Saved before saves recorded their durations: none, and no error.
  for (const CheckpointInfo& info : *list) EXPECT_FALSE(info.timing.recorded);
  for (int64_t step : {1, 2}) {
    ExpectLoads(**mgr, step);
    auto v = (*mgr)->Verify(step);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << step;
  }
}

TEST_F(CompatTest, AVersionThreeSaveBuildsOnAVersionTwoParent) {
  Options o;
  o.job_id = "compat";
  o.chunk_size = 4096;
  auto mgr = CheckpointManager::Open(root_.string(), o);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  Values three(2);
  three.counters = {3, 30, 300};
  SaveOptions incremental;
  incremental.incremental = true;
  auto saved = (*mgr)->Save(3, three.ToState(), incremental);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  // The unchanged table is referenced, not written again.
  EXPECT_FALSE(saved->info.depends_on.empty());
  bool indexed = false;
  for (const auto& e : fs::directory_iterator(root_ / format::StepDirName(3))) {
    indexed = indexed || e.path().extension() == ".ckptdir";
  }
  EXPECT_TRUE(indexed) << "step 3 was not saved as version 3";
  Values got(99);
  State s = got.ToState();
  auto again = CheckpointManager::Open(root_.string());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Load(3, s).ok());
  EXPECT_EQ(got.table, three.table);
  EXPECT_EQ(got.counters, three.counters);
  auto v = (*again)->Verify(3);
  ASSERT_TRUE(v.ok() && v->ok());
}

// `ckpt diff` compares entries by digest: the same state saved in either
// layout describes alike, and a changed tensor differs.
TEST(CompatLayouts, DigestsAgreeAcrossLayouts) {
  testing::TempDir dir("digests");
  std::vector<std::vector<EntryInfo>> described;
  for (auto layout :
       {Options::MetadataLayout::kJson, Options::MetadataLayout::kIndexed}) {
    Options o;
    o.chunk_size = 4096;
    o.metadata_layout = layout;
    const std::string root =
        (dir.path() /
         (layout == Options::MetadataLayout::kJson ? "json" : "indexed"))
            .string();
    auto mgr = CheckpointManager::Open(root, o);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    for (int64_t step : {1, 2}) {
      Values v(step);
      ASSERT_TRUE((*mgr)->Save(step, v.ToState()).ok());
    }
    for (int64_t step : {1, 2}) {
      auto d = (*mgr)->Describe(step);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      described.push_back(d->entries);
    }
  }
  ASSERT_EQ(described.size(), 4u);
  for (int step = 0; step < 2; ++step) {
    const auto& json = described[step];
    const auto& indexed = described[2 + step];
    ASSERT_EQ(json.size(), indexed.size());
    for (size_t i = 0; i < json.size(); ++i) {
      EXPECT_EQ(json[i].name, indexed[i].name);
      EXPECT_EQ(json[i].digest, indexed[i].digest) << json[i].name;
      EXPECT_EQ(json[i].bytes, indexed[i].bytes) << json[i].name;
      EXPECT_EQ(json[i].num_pieces, indexed[i].num_pieces) << json[i].name;
    }
  }
  // Step 2 changed the table and the counters, not the metadata.
  for (int layout = 0; layout < 2; ++layout) {
    const auto& one = described[2 * layout];
    const auto& two = described[2 * layout + 1];
    EXPECT_NE(one[0].digest, two[0].digest);  // table
    EXPECT_NE(one[1].digest, two[1].digest);  // counters
    EXPECT_EQ(one[3].digest, two[3].digest);  // run
  }
}

}  // namespace
}  // namespace ckpt
