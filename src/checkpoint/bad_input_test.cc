// Bad input of every kind: damaged files, hostile states, wrong requests and
// failing file systems. Each gives a clear error that names the file or the
// entry, never a crash or a partial result, and leaves what was there as it
// was.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "testing/backends.h"
#include "testing/files.h"
#include "testing/temp_dir.h"
#include "testing/test_util.h"
#include "util/checksum.h"
#include "util/names.h"

namespace ckpt {
namespace {

using Steps = std::vector<int64_t>;
using Model = testing::SeededModel;
using testing::ExpectLoads;
using testing::ListedSteps;
using testing::Snapshot;

bool Mentions(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

#define EXPECT_ERROR(expr, want_code, ...)                         \
  do {                                                             \
    const ::ckpt::Status status_ = (expr);                         \
    EXPECT_EQ(status_.code(), want_code) << status_.ToString();    \
    for (std::string_view text_ :                                  \
         std::initializer_list<std::string_view>{__VA_ARGS__}) {   \
      EXPECT_TRUE(Mentions(status_, text_))                        \
          << "\"" << text_ << "\" not in: " << status_.ToString(); \
    }                                                              \
  } while (0)

std::optional<int64_t> LatestStep(CheckpointManager& mgr) {
  Result<std::optional<int64_t>> latest = mgr.Latest();
  EXPECT_TRUE(latest.ok()) << latest.status().ToString();
  return latest.ok() ? *latest : std::nullopt;
}

std::string ReadAll(Storage& storage, const std::string& key) {
  Result<std::string> bytes = storage.ReadAll(key);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : "";
}

void Overwrite(Storage& storage, const std::string& key,
               std::string_view bytes) {
  Status s = storage.PutString(key, bytes);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void FlipBit(Storage& storage, const std::string& key, uint64_t offset,
             int bit) {
  std::string bytes = ReadAll(storage, key);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
  Overwrite(storage, key, bytes);
}

Result<format::Manifest> ManifestOf(Storage& storage, int64_t step) {
  return format::DecodeManifest(ReadAll(storage, format::ManifestKey(step)),
                                "test");
}

// Opens `url` as `mgr` and commits Model(1) and Model(2) as steps 1 and 2.
void OpenAndCommitTwo(const std::string& url,
                      std::unique_ptr<CheckpointManager>& mgr) {
  // JSON manifests: these tests edit them field by field. The indexed
  // layout's objects are damaged in integrity_test and index_test, and its
  // decoders fuzzed (fuzz/index_fuzz.cc).
  Options options;
  options.metadata_layout = Options::MetadataLayout::kJson;
  Result<std::unique_ptr<CheckpointManager>> opened =
      CheckpointManager::Open(url, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  mgr = std::move(opened).value();
  for (int step : {1, 2}) {
    Model m(step);
    State s = m.ToState();
    Result<SaveResult> r = mgr->Save(step, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
}

// A load checks each chunk as its bytes arrive (a file root hands them over
// in stretches smaller than a chunk): a damaged byte anywhere in a large
// chunk, first, middle or last, is still DataLoss naming the entry and that
// chunk's bytes, on a disk and on tmpfs (a local tier), and the caller's
// chunks after it are not loaded as good.
TEST(DamagedLargeChunkTest, ADamagedByteAnywhereInAChunkIsCaught) {
  std::vector<std::optional<testing::TempDir>> dirs;
  dirs.emplace_back(std::in_place, "large-chunk");
  if (std::filesystem::is_directory("/dev/shm")) {
    dirs.emplace_back(std::in_place, "large-chunk", "/dev/shm");
  } else {
    std::printf("SKIPPED the tmpfs half: no /dev/shm on this machine\n");
  }
  std::vector<float> weights((3 << 20) / 4 + 100);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.25f * i;
  for (const auto& dir : dirs) {
    Options options;
    options.metadata_layout = Options::MetadataLayout::kJson;
    options.chunk_size = 1 << 20;
    auto mgr = CheckpointManager::Open(dir->url(), options);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    State saved;
    saved.AddTensor("weights", View(weights));
    ASSERT_TRUE((*mgr)->Save(1, saved).ok());
    Storage& storage = (*mgr)->storage();
    Result<format::Manifest> m = ManifestOf(storage, 1);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const format::EntryRecord* w = m->Find("weights");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->pieces.size(), 1u);
    ASSERT_EQ(w->pieces[0].chunks.size(), 4u) << dir->string();
    for (const format::ChunkRecord& c : w->pieces[0].chunks) {
      const std::string key = m->objects[c.object].key;
      const std::string range = "bytes [" + std::to_string(c.offset) + ", " +
                                std::to_string(c.offset + c.length) + ")";
      for (uint64_t at : {uint64_t{0}, c.length / 2 + 3, c.length - 1}) {
        FlipBit(storage, key, c.offset + at, 5);
        std::vector<float> loaded(weights.size(), -1.0f);
        State s;
        s.AddTensor("weights", View(loaded));
        EXPECT_ERROR((*mgr)->Load(1, s).status(), ErrorCode::kDataLoss, key,
                     "\"weights\"", range, "checksum");
        FlipBit(storage, key, c.offset + at, 5);
      }
    }
    std::vector<float> loaded(weights.size(), -1.0f);
    State s;
    s.AddTensor("weights", View(loaded));
    ASSERT_TRUE((*mgr)->Load(1, s).ok()) << dir->string();
    EXPECT_TRUE(loaded == weights) << dir->string();
  }
}

// --- Damaged checkpoints on mem:// ------------------------------------------
//
// Steps 1 (Model(1)) and 2 (Model(2)) are committed; a test damages step 2
// and checks that step 1 and the listing are untouched.

class DamagedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenAndCommitTwo(root_.url(), mgr_));
    data2_ = testing::DataKeyOf(storage(), 2);
  }

  // A fresh manager on the same store, as another process would see it: a
  // manager caches the manifests it has read.
  void Reopen() {
    Result<std::unique_ptr<CheckpointManager>> mgr =
        CheckpointManager::Open(root_.url());
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    mgr_ = std::move(mgr).value();
  }

  Storage& storage() { return mgr_->storage(); }

  // Step 1 still loads bit for bit.
  void ExpectStepOneIntact() { ExpectLoads(*mgr_, 1, Model(1)); }

  // Loads step 2 into buffers filled with a sentinel; returns the status and
  // whether the buffers were left alone.
  std::pair<Status, bool> LoadStepTwoIntoSentinels() {
    std::vector<float> weights(3000, -7.0f);
    std::vector<int64_t> counters(17, -7);
    State s;
    s.AddTensor("counters", View(counters));
    s.AddTensor("weights", View(weights));
    Result<CheckpointInfo> r = mgr_->Load(2, s);
    const bool untouched = std::all_of(weights.begin(), weights.end(),
                                       [](float w) { return w == -7.0f; }) &&
                           std::all_of(counters.begin(), counters.end(),
                                       [](int64_t c) { return c == -7; });
    return {r.status(), untouched};
  }

  const testing::TestRoot root_{testing::Backend::kMemory, "damaged"};
  std::unique_ptr<CheckpointManager> mgr_;
  std::string data2_;
};

TEST_F(DamagedTest, BitFlipInTheDataRegion) {
  Result<format::Manifest> m = ManifestOf(storage(), 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const format::EntryRecord* w = m->Find("weights");
  ASSERT_NE(w, nullptr);
  FlipBit(storage(), data2_, w->pieces[0].chunks[0].offset + 100, 3);
  const auto before = Snapshot(storage());

  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss, data2_,
               "\"weights\"", "checksum");
  EXPECT_ERROR(LoadStepTwoIntoSentinels().first, ErrorCode::kDataLoss, data2_,
               "\"weights\"");
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());
  ASSERT_EQ(v->problems.size(), 1u);
  EXPECT_NE(v->problems[0].find(data2_), std::string::npos) << v->problems[0];
  EXPECT_NE(v->problems[0].find("\"weights\""), std::string::npos)
      << v->problems[0];
  EXPECT_FALSE(v->header_only);  // a load fails on it

  // An entry whose chunks are intact still loads.
  Result<LoadedCheckpoint> counters = mgr_->LoadAll(2, {"counters", "rng"});
  EXPECT_TRUE(counters.ok()) << counters.status().ToString();

  EXPECT_EQ(Snapshot(storage()), before);
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{1, 2}));
  ExpectStepOneIntact();
}

// Reads of one object fail with an I/O error (no permission, a failing
// disk): not damage.
class UnreadableObject : public StorageWrapper {
 public:
  UnreadableObject(Storage* target, std::string key)
      : StorageWrapper(target), key_(std::move(key)) {}
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    if (key == key_) return IOError("read " + key_ + ": Permission denied");
    return StorageWrapper::ReadRange(key, offset, out);
  }

 private:
  const std::string key_;
};

// Verify tells a read that failed apart from damage: a resume skips a
// damaged step but stops at an unreadable one with its error, and
// `ckpt verify` says which.
TEST_F(DamagedTest, AnUnreadableObjectIsToldApartFromDamage) {
  auto wrapped = CheckpointManager::Open(
      std::make_unique<UnreadableObject>(&storage(), data2_));
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  Result<VerifyReport> v = (*wrapped)->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());
  EXPECT_TRUE(v->unreadable);
  EXPECT_NE(v->problems[0].find("Permission denied"), std::string::npos)
      << v->problems[0];
  Result<VerifyReport> one = (*wrapped)->Verify(1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_TRUE(one->ok());
  EXPECT_FALSE(one->unreadable);
  // The load fails with the read's error rather than skip the step.
  Model m(0);
  State state = m.ToState();
  EXPECT_ERROR((*wrapped)->Load(std::nullopt, state).status(),
               ErrorCode::kIOError, "Permission denied");
  // Damage is damage.
  FlipBit(storage(), data2_, 8, 0);
  v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->ok());
  EXPECT_FALSE(v->unreadable);
}

TEST_F(DamagedTest, BitFlipInTheSafetensorsHeaderStructure) {
  // The first byte of the JSON header: '{' becomes 'z'.
  FlipBit(storage(), data2_, 8, 0);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());
  EXPECT_NE(v->problems[0].find(data2_), std::string::npos) << v->problems[0];
  EXPECT_NE(v->problems[0].find("safetensors header"), std::string::npos)
      << v->problems[0];
  // The data itself is intact and checksummed, so it still loads, and the
  // report says so.
  EXPECT_TRUE(v->header_only);
  ExpectLoads(*mgr_, 2, Model(2));
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, EveryBitFlipInTheSafetensorsHeaderIsReported) {
  const std::string original = ReadAll(storage(), data2_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(original[i]);
  }
  ASSERT_LT(8 + header_len, original.size());
  for (uint64_t offset = 0; offset < 8 + header_len; ++offset) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bytes = original;
      bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
      Overwrite(storage(), data2_, bytes);
      Result<VerifyReport> v = mgr_->Verify(2);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_FALSE(v->ok()) << "byte " << offset << " bit " << bit
                            << " of the header went unnoticed: "
                            << Quote(bytes.substr(8, header_len));
      EXPECT_TRUE(v->header_only) << "byte " << offset << " bit " << bit;
    }
  }
  Overwrite(storage(), data2_, original);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->ok());
  EXPECT_FALSE(v->header_only);
}

TEST_F(DamagedTest, ManifestThatIsNotJson) {
  Overwrite(storage(), format::ManifestKey(2), "this is not JSON {");
  Reopen();
  const auto before = Snapshot(storage());
  EXPECT_EQ(LatestStep(*mgr_), 1);
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{1}));
  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss,
               "MANIFEST.json");
  EXPECT_ERROR(LoadStepTwoIntoSentinels().first, ErrorCode::kDataLoss,
               "MANIFEST.json");
  EXPECT_TRUE(LoadStepTwoIntoSentinels().second);
  EXPECT_ERROR(mgr_->Verify(2).status(), ErrorCode::kDataLoss, "MANIFEST.json");
  EXPECT_ERROR(mgr_->Describe(2).status(), ErrorCode::kDataLoss,
               "MANIFEST.json");
  // The newest valid checkpoint is the resume point.
  Model m(0);
  State s = m.ToState();
  Result<CheckpointInfo> newest = mgr_->Load(std::nullopt, s);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(newest->step, 1);
  EXPECT_EQ(m.weights, Model(1).weights);
  EXPECT_EQ(Snapshot(storage()), before);
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, ManifestTruncated) {
  const std::string bytes = ReadAll(storage(), format::ManifestKey(2));
  Overwrite(storage(), format::ManifestKey(2),
            bytes.substr(0, bytes.size() / 2));
  Reopen();
  EXPECT_EQ(LatestStep(*mgr_), 1);
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{1}));
  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss,
               "MANIFEST.json");
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, ManifestWithAnotherVersion) {
  const std::string key = format::ManifestKey(2);
  const std::string bytes = ReadAll(storage(), key);
  const size_t head =
      format::kEnvelopePrefix.size() + 32 + format::kEnvelopeMiddle.size();
  std::string body =
      bytes.substr(head, bytes.size() - head - format::kEnvelopeSuffix.size());
  const size_t at = body.find("\"version\":1");
  ASSERT_NE(at, std::string::npos) << body;
  body.replace(at, 11, "\"version\":9");
  const std::string envelope = std::string(format::kEnvelopePrefix) +
                               Xxh3_128(body).Hex() +
                               std::string(format::kEnvelopeMiddle) + body +
                               std::string(format::kEnvelopeSuffix);
  Overwrite(storage(), key, envelope);
  Reopen();

  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss, "MANIFEST.json",
               "version 9", "not supported");
  EXPECT_EQ(LatestStep(*mgr_), 1);
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{1}));
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, ManifestChecksumMismatch) {
  // A bit flip in the body, inside a number, keeps it valid JSON.
  const std::string key = format::ManifestKey(2);
  const std::string bytes = ReadAll(storage(), key);
  const size_t at = bytes.find("\"created_unix_ms\":");
  ASSERT_NE(at, std::string::npos);
  FlipBit(storage(), key, at + 19, 0);
  Reopen();
  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss, "MANIFEST.json",
               "checksum");
  EXPECT_EQ(LatestStep(*mgr_), 1);
  ExpectStepOneIntact();
}

// A store whose modification times are coarse (whole seconds on ext3, some
// network file systems): here they never change at all.
class FrozenMtimeStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Result<ObjectInfo> Stat(std::string_view key) override {
    Result<ObjectInfo> info = StorageWrapper::Stat(key);
    if (info.ok()) info->mtime_unix_ms = 0;
    return info;
  }
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    Result<std::vector<ObjectInfo>> objects = StorageWrapper::List(prefix);
    if (objects.ok()) {
      for (ObjectInfo& o : *objects) o.mtime_unix_ms = 0;
    }
    return objects;
  }
};

TEST(VerifyTest, RereadsAManifestTheManagerHasCached) {
  const testing::TestRoot root(testing::Backend::kMemory, "frozen");
  Result<std::unique_ptr<Storage>> store = root.Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto owned = std::make_unique<FrozenMtimeStorage>(*std::move(store));
  FrozenMtimeStorage* frozen = owned.get();
  Result<std::unique_ptr<CheckpointManager>> mgr =
      CheckpointManager::Open(std::move(owned));
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  Model m(1);
  State s = m.ToState();
  ASSERT_TRUE((*mgr)->Save(1, s).ok());
  Result<VerifyReport> clean = (*mgr)->Verify(1);
  ASSERT_TRUE(clean.ok() && clean->ok());
  // Same size, same (coarse) mtime, different bytes.
  const std::string key = format::ManifestKey(1);
  const size_t at = ReadAll(*frozen, key).find("\"created_unix_ms\":");
  ASSERT_NE(at, std::string::npos);
  FlipBit(*frozen, key, at + 19, 0);
  EXPECT_ERROR((*mgr)->Verify(1).status(), ErrorCode::kDataLoss,
               "MANIFEST.json", "checksum");
}

TEST_F(DamagedTest, ManifestRecordsALargerObjectThanTheFile) {
  Result<format::Manifest> m = ManifestOf(storage(), 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  m->objects[0].size += 8;
  Overwrite(storage(), format::ManifestKey(2), format::EncodeManifest(*m));
  Reopen();
  const auto before = Snapshot(storage());

  auto [status, untouched] = LoadStepTwoIntoSentinels();
  EXPECT_ERROR(status, ErrorCode::kDataLoss, data2_, "manifest records");
  EXPECT_TRUE(untouched);
  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss, data2_);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());
  EXPECT_NE(v->problems[0].find(data2_), std::string::npos) << v->problems[0];
  EXPECT_EQ(Snapshot(storage()), before);
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, DataFileLongerThanTheManifestRecords) {
  Overwrite(storage(), data2_, ReadAll(storage(), data2_) + "appended");
  auto [status, untouched] = LoadStepTwoIntoSentinels();
  EXPECT_ERROR(status, ErrorCode::kDataLoss, data2_, "manifest records");
  EXPECT_TRUE(untouched);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->ok());
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, DataFileMissing) {
  ASSERT_TRUE(storage().Delete(data2_).ok());
  auto [status, untouched] = LoadStepTwoIntoSentinels();
  EXPECT_ERROR(status, ErrorCode::kDataLoss, data2_, "missing");
  EXPECT_TRUE(untouched);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());
  EXPECT_NE(v->problems[0].find(data2_), std::string::npos) << v->problems[0];
  ExpectStepOneIntact();
}

// --- Wrong requests --------------------------------------------------------

TEST_F(DamagedTest, LoadIntoAWrongDtypeOrShape) {
  const auto before = Snapshot(storage());
  {
    std::vector<int64_t> counters(17, -7);
    std::vector<double> weights(3000, -7.0);
    State s;
    s.AddTensor("counters", View(counters));  // matches
    s.AddTensor("weights", View(weights));    // F64, not F32
    EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kInvalidArgument,
                 "\"weights\"", "F32 [3000]", "F64 [3000]");
    EXPECT_EQ(counters, std::vector<int64_t>(17, -7));
    EXPECT_EQ(weights, std::vector<double>(3000, -7.0));
  }
  {
    std::vector<float> weights(2999, -7.0f);
    State s;
    s.AddTensor("weights", View(weights));
    EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kInvalidArgument,
                 "\"weights\"", "F32 [3000]", "F32 [2999]");
    EXPECT_EQ(weights, std::vector<float>(2999, -7.0f));
  }
  {
    // The same byte count in another shape is still another shape.
    std::vector<float> weights(3000, -7.0f);
    State s;
    s.AddTensor("weights", View(std::span<float>(weights), {1000, 3}));
    EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kInvalidArgument,
                 "\"weights\"", "F32 [3000]", "F32 [1000, 3]");
    EXPECT_EQ(weights, std::vector<float>(3000, -7.0f));
  }
  {
    std::vector<float> rng(25, -7.0f);
    State s;
    s.AddTensor("rng", View(rng));  // a blob in the checkpoint
    EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kInvalidArgument,
                 "\"rng\"", "blob", "tensor");
    EXPECT_EQ(rng, std::vector<float>(25, -7.0f));
  }
  EXPECT_EQ(Snapshot(storage()), before);
}

TEST_F(DamagedTest, LoadOfAnEntryTheCheckpointLacks) {
  std::vector<float> weights(3000, -7.0f);
  std::vector<float> missing(4, -7.0f);
  State s;
  s.AddTensor("weights", View(weights));
  s.AddTensor("optimizer/momentum", View(missing));
  EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kNotFound,
               "\"optimizer/momentum\"");
  EXPECT_EQ(weights, std::vector<float>(3000, -7.0f));
  EXPECT_EQ(missing, std::vector<float>(4, -7.0f));
  EXPECT_ERROR(mgr_->LoadAll(2, {"weights", "nope"}).status(),
               ErrorCode::kNotFound, "\"nope\"");
}

TEST_F(DamagedTest, LoadIntoAReadOnlyView) {
  const std::vector<float> weights(3000, -7.0f);
  State s;
  s.AddTensor("weights", View(weights));
  EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kInvalidArgument,
               "\"weights\"", "read-only");
  EXPECT_EQ(weights, std::vector<float>(3000, -7.0f));
}

TEST_F(DamagedTest, StepThatDoesNotExist) {
  std::vector<float> weights(3000, -7.0f);
  State s;
  s.AddTensor("weights", View(weights));
  EXPECT_ERROR(mgr_->Load(42, s).status(), ErrorCode::kNotFound, "step 42");
  EXPECT_EQ(weights, std::vector<float>(3000, -7.0f));
  EXPECT_ERROR(mgr_->LoadAll(42).status(), ErrorCode::kNotFound, "step 42");
  EXPECT_ERROR(mgr_->Describe(42).status(), ErrorCode::kNotFound, "step 42");
  EXPECT_ERROR(mgr_->Verify(42).status(), ErrorCode::kNotFound, "step 42");
  EXPECT_ERROR(mgr_->Delete(42).status(), ErrorCode::kNotFound, "step 42");
  // A step directory without a manifest is not a checkpoint either.
  Overwrite(storage(), format::DataObjectKey(43, 0, "0123456789abcdef"), "x");
  EXPECT_ERROR(mgr_->LoadAll(43).status(), ErrorCode::kNotFound, "step 43");
  // What the root holds, so that a typo or an off-by-one is seen at once;
  // retention is named only for a step older than the newest.
  Status newer = mgr_->LoadAll(42).status();
  EXPECT_ERROR(newer, ErrorCode::kNotFound, "(2 committed: the newest 2)");
  EXPECT_EQ(newer.message().find("retention"), std::string::npos)
      << newer.ToString();
  ASSERT_TRUE(mgr_->Delete(1).ok());
  EXPECT_ERROR(mgr_->LoadAll(1).status(), ErrorCode::kNotFound,
               "(its only committed step is 2; an older step may have been "
               "removed by retention or deleted)");
  EXPECT_ERROR(mgr_->Load(0, s).status(), ErrorCode::kNotFound,
               "step 0 is not a committed checkpoint");
}

TEST(MissingStepTest, NamesTheNearestCommittedSteps) {
  const testing::TestRoot root{testing::Backend::kMemory, "missing-step"};
  auto mgr = CheckpointManager::Open(root.url());
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  EXPECT_ERROR((*mgr)->LoadAll(3).status(), ErrorCode::kNotFound,
               "(it holds no committed checkpoint)");
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE((*mgr)->Save(step, Model(step).ToState()).ok());
  }
  EXPECT_ERROR((*mgr)->LoadAll(25).status(), ErrorCode::kNotFound,
               "(3 committed: the nearest 20 and 30, the newest 30; an older "
               "step may have been removed by retention or deleted)");
  EXPECT_ERROR((*mgr)->LoadAll(5).status(), ErrorCode::kNotFound,
               "(3 committed: the oldest 10, the newest 30;");
}

TEST_F(DamagedTest, SaveOfACommittedStep) {
  const auto before = Snapshot(storage());
  Model other(99);
  State s = other.ToState();
  EXPECT_ERROR(mgr_->Save(2, s).status(), ErrorCode::kAlreadyExists, "step 2");
  EXPECT_EQ(Snapshot(storage()), before);
  ExpectLoads(*mgr_, 2, Model(2));
  ExpectStepOneIntact();
}

TEST_F(DamagedTest, NegativeStep) {
  const auto before = Snapshot(storage());
  Model m(3);
  State s = m.ToState();
  EXPECT_ERROR(mgr_->Save(-1, s).status(), ErrorCode::kInvalidArgument, "-1");
  EXPECT_ERROR(mgr_->Load(-1, s).status(), ErrorCode::kInvalidArgument, "-1");
  EXPECT_ERROR(mgr_->LoadAll(-1).status(), ErrorCode::kInvalidArgument, "-1");
  EXPECT_ERROR(mgr_->Describe(-1).status(), ErrorCode::kInvalidArgument, "-1");
  EXPECT_ERROR(mgr_->Verify(-1).status(), ErrorCode::kInvalidArgument, "-1");
  EXPECT_ERROR(mgr_->Delete(-1).status(), ErrorCode::kInvalidArgument, "-1");
  EXPECT_EQ(m.weights, Model(3).weights);
  EXPECT_EQ(Snapshot(storage()), before);
}

// --- Hostile states: refused before anything is written --------------------

struct BadState {
  std::string label;
  std::string name;  // the offending entry
  ErrorCode code;
  std::string quoted;  // how the message names it
};

class BadStateTest : public ::testing::TestWithParam<BadState> {
 protected:
  const testing::TestRoot root_{testing::Backend::kMemory, "bad-state"};
};

TEST_P(BadStateTest, SaveRefusesAndWritesNothing) {
  const BadState& bad = GetParam();
  Result<std::unique_ptr<CheckpointManager>> mgr =
      CheckpointManager::Open(root_.url());
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  std::vector<float> ok(10, 1.0f), dup(10, 2.0f);
  State s;
  s.AddTensor("ok", View(ok));
  s.AddTensor(bad.name, View(dup));
  EXPECT_ERROR((*mgr)->Save(1, s).status(), bad.code, bad.quoted);
  Result<std::vector<ObjectInfo>> objects = (*mgr)->storage().List("");
  ASSERT_TRUE(objects.ok());
  EXPECT_TRUE(objects->empty()) << objects->front().key;
  EXPECT_EQ(LatestStep(**mgr), std::nullopt);
  // Load refuses the same state the same way, touching nothing.
  EXPECT_EQ((*mgr)->Load(std::nullopt, s).status().code(), bad.code);
  EXPECT_EQ(ok, std::vector<float>(10, 1.0f));
}

INSTANTIATE_TEST_SUITE_P(
    Names, BadStateTest,
    ::testing::Values(
        BadState{"Duplicate", "ok", ErrorCode::kAlreadyExists, "\"ok\""},
        BadState{"DotDot", "a/../b", ErrorCode::kInvalidArgument, "\"a/../b\""},
        BadState{"TrailingDotDot", "layer/..", ErrorCode::kInvalidArgument,
                 "\"layer/..\""},
        BadState{"Nul", std::string("a\0b", 3), ErrorCode::kInvalidArgument,
                 "\"a\\x00b\""},
        BadState{"Absolute", "/etc/passwd", ErrorCode::kInvalidArgument,
                 "\"/etc/passwd\""},
        BadState{"SafetensorsMetadata", "__metadata__",
                 ErrorCode::kInvalidArgument, "\"__metadata__\""},
        BadState{"Empty", "", ErrorCode::kInvalidArgument, "\"\""}),
    [](const auto& info) { return info.param.label; });

class HostileStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<CheckpointManager>> mgr =
        CheckpointManager::Open(root_.url());
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    mgr_ = std::move(mgr).value();
  }

  void ExpectNothingWritten() {
    Result<std::vector<ObjectInfo>> objects = mgr_->storage().List("");
    ASSERT_TRUE(objects.ok());
    EXPECT_TRUE(objects->empty()) << objects->front().key;
  }

  const testing::TestRoot root_{testing::Backend::kMemory, "hostile-state"};
  std::unique_ptr<CheckpointManager> mgr_;
};

TEST_F(HostileStateTest, ShapeWhoseByteCountOverflows) {
  std::vector<float> buf(16);
  const std::vector<std::vector<int64_t>> shapes = {
      {int64_t{1} << 32, int64_t{1} << 32},  // elements overflow
      {int64_t{1} << 62},                    // bytes overflow (F32)
      {std::numeric_limits<int64_t>::max(), 3},
      {4, -1},  // negative
  };
  for (const auto& shape : shapes) {
    State s;
    s.AddTensor("huge",
                TensorView{DType::kF32, shape,
                           reinterpret_cast<std::byte*>(buf.data()), true});
    EXPECT_ERROR(mgr_->Save(1, s).status(), ErrorCode::kInvalidArgument,
                 "\"huge\"");
  }
  State s;
  EXPECT_EQ(
      s.AllocateTensor("huge", DType::kF64, {int64_t{1} << 61}).status().code(),
      ErrorCode::kInvalidArgument);
  ExpectNothingWritten();
}

TEST_F(HostileStateTest, MetadataThatIsNotAnObject) {
  State s;
  s.AddMetadataJson("config", "[1, 2, 3]");
  EXPECT_ERROR(mgr_->Save(1, s).status(), ErrorCode::kInvalidArgument,
               "\"config\"");
  ExpectNothingWritten();
}

// --- Roots ----------------------------------------------------------------

TEST(BadRootTest, UnknownScheme) {
  EXPECT_ERROR(CheckpointManager::Open("bogus://bucket/run").status(),
               ErrorCode::kInvalidArgument, "\"bogus://bucket/run\"", "scheme");
  EXPECT_ERROR(CheckpointManager::Open("://run").status(),
               ErrorCode::kInvalidArgument, "\"://run\"");
}

TEST(BadRootTest, RootThatIsARegularFile) {
  const testing::TempDir temp("bad-file");
  const std::string path = temp.string() + "/not-a-dir";
  ASSERT_TRUE(testing::WriteFile(path, "hello"));
  EXPECT_ERROR(CheckpointManager::Open("file://" + path).status(),
               ErrorCode::kInvalidArgument, path);
  EXPECT_ERROR(CheckpointManager::Open(path).status(),
               ErrorCode::kInvalidArgument, path);
  EXPECT_EQ(testing::ReadFile(path), "hello");
}

TEST(BadRootTest, MissingRootWithoutCreate) {
  const testing::TempDir temp("bad-missing");
  const std::string dir = temp.string();
  Options o;
  o.create = false;
  const std::string root = dir + "/no/such/root";
  EXPECT_ERROR(CheckpointManager::Open("file://" + root, o).status(),
               ErrorCode::kNotFound, root);
  EXPECT_FALSE(std::filesystem::exists(dir + "/no"));
  EXPECT_ERROR(
      CheckpointManager::Open("mem://bad_input_test-never-created", o).status(),
      ErrorCode::kNotFound, "bad_input_test-never-created");
  // Nothing was created by the failed open.
  EXPECT_EQ(CheckpointManager::Open("mem://bad_input_test-never-created", o)
                .status()
                .code(),
            ErrorCode::kNotFound);
}

// --- File system failures on file:// ----------------------------------------

class FileRootTest : public ::testing::Test {
 protected:
  void TearDown() override { mgr_.reset(); }

  void OpenAndSaveTwo() { OpenAndCommitTwo("file://" + dir_ + "/root", mgr_); }

  const testing::TempDir temp_{"bad-root"};
  const std::string dir_ = temp_.string();
  std::unique_ptr<CheckpointManager> mgr_;
};

TEST_F(FileRootTest, TruncatedDataFile) {
  ASSERT_NO_FATAL_FAILURE(OpenAndSaveTwo());
  const std::string key = testing::DataKeyOf(mgr_->storage(), 2);
  const std::string path = dir_ + "/root/" + key;
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_EQ(::truncate(path.c_str(), st.st_size / 2), 0)
      << std::strerror(errno);
  const auto before = Snapshot(mgr_->storage());

  std::vector<float> weights(3000, -7.0f);
  State s;
  s.AddTensor("weights", View(weights));
  EXPECT_ERROR(mgr_->Load(2, s).status(), ErrorCode::kDataLoss, key,
               "truncated");
  EXPECT_EQ(weights, std::vector<float>(3000, -7.0f));
  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss, key);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());
  for (const std::string& p : v->problems) {
    EXPECT_NE(p.find(key), std::string::npos) << p;
  }
  EXPECT_NE(v->problems[0].find("truncated"), std::string::npos)
      << v->problems[0];

  EXPECT_EQ(Snapshot(mgr_->storage()), before);
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{1, 2}));
  ExpectLoads(*mgr_, 1, Model(1));
}

TEST_F(FileRootTest, TruncatedToNothing) {
  ASSERT_NO_FATAL_FAILURE(OpenAndSaveTwo());
  const std::string key = testing::DataKeyOf(mgr_->storage(), 2);
  ASSERT_EQ(::truncate((dir_ + "/root/" + key).c_str(), 0), 0);
  EXPECT_ERROR(mgr_->LoadAll(2).status(), ErrorCode::kDataLoss, key);
  Result<VerifyReport> v = mgr_->Verify(2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->ok());
  ExpectLoads(*mgr_, 1, Model(1));
}

// Runs `body` in a child process as user and group 65534 (root passes every
// permission check); returns the child's error code and message.
std::pair<int, std::string> RunAsNobody(const std::function<Status()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, std::strerror(errno)};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    Status s;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      s = AbortedError(std::string("dropping privileges: ") +
                       std::strerror(errno));
    } else {
      s = body();
    }
    const std::string msg = s.ToString();
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(static_cast<int>(s.code()));
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) msg.append(buf, n);
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus)) return {-1, "child did not exit: " + msg};
  return {WEXITSTATUS(wstatus), msg};
}

Status OpenAndSave(const std::string& url) {
  Result<std::unique_ptr<CheckpointManager>> mgr = CheckpointManager::Open(url);
  if (!mgr.ok()) return mgr.status();
  Model m(1);
  State s = m.ToState();
  return (*mgr)->Save(1, s).status();
}

TEST_F(FileRootTest, DirectoryWithoutPermission) {
  // Root passes every permission check, so the test drops to another user;
  // only root can.
  ASSERT_EQ(::geteuid(), 0u)
      << "needs root to switch to another user: run the tests as root, as "
         "CI does";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  // Not even readable: the open fails.
  const std::string closed = dir_ + "/closed";
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  auto [code, msg] =
      RunAsNobody([&] { return OpenAndSave("file://" + closed); });
  EXPECT_EQ(code, static_cast<int>(ErrorCode::kIOError)) << msg;
  EXPECT_NE(msg.find(closed), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_empty(closed));

  // Readable but not writable: the open works and the save fails.
  const std::string read_only = dir_ + "/read-only";
  ASSERT_EQ(::mkdir(read_only.c_str(), 0755), 0);
  std::tie(code, msg) =
      RunAsNobody([&] { return OpenAndSave("file://" + read_only); });
  EXPECT_EQ(code, static_cast<int>(ErrorCode::kIOError)) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  // It names the save, the root and what could not be written there (the
  // root's lease, the first thing a save writes).
  EXPECT_NE(msg.find("save step 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find(read_only), std::string::npos) << msg;
  EXPECT_NE(msg.find("LEASE-000000000001"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_empty(read_only));
}

// A 1 MiB tmpfs: a small checkpoint fits, a 4 MiB one does not.
class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mnt_ = temp_.string() + "/mnt";
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0);
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=1m") != 0) {
      // Mounting needs CAP_SYS_ADMIN, which CI has (it runs as root).
      FAIL() << "cannot mount a tmpfs here (mount(2): " << std::strerror(errno)
             << "): run the tests as root (CAP_SYS_ADMIN), as CI does";
    }
    mounted_ = true;
  }
  void TearDown() override {
    mgr_.reset();
    if (mounted_ && ::umount2(mnt_.c_str(), MNT_DETACH) != 0) {
      ADD_FAILURE() << "umount " << mnt_ << ": " << std::strerror(errno);
    }
  }

  const testing::TempDir temp_{"bad-full"};
  std::string mnt_;
  bool mounted_ = false;
  std::unique_ptr<CheckpointManager> mgr_;
};

TEST_F(FullDiskTest, SaveFailsCleanlyWhenTheDiskIsFull) {
  Result<std::unique_ptr<CheckpointManager>> mgr =
      CheckpointManager::Open("file://" + mnt_ + "/root");
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  mgr_ = std::move(mgr).value();
  Model small(1);
  State s1 = small.ToState();
  Result<SaveResult> first = mgr_->Save(1, s1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const auto before = Snapshot(mgr_->storage());

  Model big(2, size_t{1} << 20);  // 4 MiB of F32
  State s2 = big.ToState();
  Status full = mgr_->Save(2, s2).status();
  EXPECT_ERROR(full, ErrorCode::kIOError, "No space left");
  EXPECT_EQ(LatestStep(*mgr_), 1);
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{1}));
  EXPECT_EQ(Snapshot(mgr_->storage()), before);
  ExpectLoads(*mgr_, 1, Model(1));

  // The failed attempt left nothing behind, so the space is back.
  Model again(3);
  State s3 = again.ToState();
  Result<SaveResult> third = mgr_->Save(3, s3);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  ExpectLoads(*mgr_, 3, Model(3));
}

// Fills the file system of `dir` to its last byte with a file there.
void Fill(const std::string& dir) {
  const int fd = ::open((dir + "/filler").c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const std::string block(4096, 'x');
  while (::write(fd, block.data(), block.size()) > 0) {
  }
  // The last page, part-filled: what fits.
  while (::write(fd, block.data(), 1) > 0) {
  }
  ::close(fd);
}

// ckpt delete and gc are how a full file system gets room back, and they
// take the root's lease before deleting anything, which needs room for one
// small file: they make it (the LATEST hint goes, and is written again).
TEST_F(FullDiskTest, DeleteAndGcWorkOnAFullDisk) {
  const std::string url = "file://" + mnt_ + "/root";
  {
    Result<std::unique_ptr<CheckpointManager>> mgr =
        CheckpointManager::Open(url);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    for (int64_t step : {1, 2, 3}) {
      Model m(static_cast<int>(step));
      State s = m.ToState();
      ASSERT_TRUE((*mgr)->Save(step, s).ok());
    }
  }  // its lease given back: a later call takes it anew, as the CLI does
  ASSERT_NO_FATAL_FAILURE(Fill(mnt_));
  Result<std::unique_ptr<CheckpointManager>> mgr = CheckpointManager::Open(url);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  mgr_ = std::move(mgr).value();
  Result<DeleteReport> deleted = mgr_->Delete(1);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{2, 3}));
  ExpectLoads(*mgr_, 3, Model(3));
  EXPECT_TRUE(std::filesystem::exists(mnt_ + "/root/LATEST"));

  // Full again; retention through gc.
  mgr_.reset();
  ASSERT_NO_FATAL_FAILURE(Fill(mnt_));
  Options keep;
  keep.retention.keep_last = 1;
  mgr = CheckpointManager::Open(url, keep);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  mgr_ = std::move(mgr).value();
  Result<GcReport> collected = mgr_->GarbageCollect();
  ASSERT_TRUE(collected.ok()) << collected.status().ToString();
  EXPECT_EQ(ListedSteps(*mgr_), (Steps{3}));
  ExpectLoads(*mgr_, 3, Model(3));
}

}  // namespace
}  // namespace ckpt
