// A save over a committed step that does not load whole replaces it
// (replace.h): atomically, by the root's lease holder alone, with a
// warning; a step that loads whole is never replaced.
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
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
using testing::ExpectLoads;
using testing::RunRanks;
using testing::SeededModel;
using testing::StepModel;

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Flips the last byte (tensor data, not the header) of every data object
// of `step`, as a bad disk would; the number flipped.
int DamageStep(Storage& storage, int64_t step) {
  const std::string manifest = format::ManifestKey(step);
  const std::string dir = manifest.substr(0, manifest.find('/') + 1);
  int flipped = 0;
  Result<std::vector<ObjectInfo>> listed = storage.List(dir);
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (!listed.ok()) return 0;
  for (const ObjectInfo& o : *listed) {
    if (!o.key.ends_with(".safetensors")) continue;
    Result<std::string> bytes = storage.ReadAll(o.key);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    if (!bytes.ok() || bytes->empty()) continue;
    bytes->back() = static_cast<char>(bytes->back() ^ 0x5a);
    EXPECT_TRUE(storage.PutString(o.key, *bytes).ok());
    ++flipped;
  }
  return flipped;
}

// The manifest's bytes, to tell whether a step was rewritten.
std::string ManifestBytes(Storage& storage, int64_t step) {
  Result<std::string> bytes = storage.ReadAll(format::ManifestKey(step));
  return bytes.ok() ? *bytes : bytes.status().ToString();
}

class ReplaceTest : public ::testing::TestWithParam<Backend> {
 protected:
  std::unique_ptr<CheckpointManager> Open(Options o = {}) {
    auto storage = root_.Open();
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (!storage.ok()) return nullptr;
    auto mgr = CheckpointManager::Open(*std::move(storage), std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }
  // Steps 1 to 3 of seeds 1 to 3, by a manager that is gone after, and
  // step 3 damaged.
  void SaveThreeAndDamageTheNewest() {
    {
      auto mgr = Open();
      for (int s = 1; s <= 3; ++s) {
        SeededModel m(s);
        ASSERT_TRUE(mgr->Save(s, m.ToState()).ok());
      }
    }
    auto storage = root_.Open();
    ASSERT_TRUE(storage.ok());
    ASSERT_GT(DamageStep(**storage, 3), 0);
  }
  // A resume: the newest step that loads whole, into a state of seed 0.
  void ExpectResumesFrom(CheckpointManager& mgr, int64_t step) {
    SeededModel into(0);
    State state = into.ToState();
    Result<CheckpointInfo> info = mgr.Load(std::nullopt, state);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->step, step);
  }
  void ExpectReplaced(bool loaded_first);

  testing::TestRoot root_{GetParam(), "replace"};
};

INSTANTIATE_TEST_SUITE_P(Backends, ReplaceTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile),
                         testing::BackendTestName);

// Resumed from step 2, the job trains step 3 again and saves it: the save
// replaces the damaged step, whether this manager's load met the damage
// (known) or a check before the save finds it (a manager that did not
// load).
void ReplaceTest::ExpectReplaced(bool loaded_first) {
  SaveThreeAndDamageTheNewest();
  auto mgr = Open();
  if (loaded_first) ExpectResumesFrom(*mgr, 2);
  SeededModel again(33);
  ::testing::internal::CaptureStderr();
  Result<SaveResult> saved = mgr->Save(3, again.ToState());
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(saved->replaced);
  EXPECT_TRUE(Contains(saved->replaced_because, "checksum"))
      << saved->replaced_because;
  EXPECT_TRUE(Contains(err, "step 3 was damaged")) << err;
  EXPECT_TRUE(Contains(err, "this save replaced it")) << err;

  // Whole now, with the new bytes, and nothing of the old attempt left.
  Result<VerifyReport> report = mgr->Verify(3);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->problems, std::vector<std::string>());
  auto other = Open();
  EXPECT_EQ(other->Latest().value(), 3);
  ExpectResumesFrom(*other, 3);
  ExpectLoads(*other, 3, again);
  Result<GcReport> garbage = other->GarbageCollect({.dry_run = true});
  ASSERT_TRUE(garbage.ok()) << garbage.status().ToString();
  EXPECT_EQ(garbage->deleted_objects, std::vector<std::string>());
}

// A step whose data files' safetensors headers alone are damaged loads
// whole (a load reads no header), but other readers of its files fail: a
// save of it replaces it, and says what was damaged rather than that it
// did not load.
TEST_P(ReplaceTest, AStepWhoseHeadersAloneAreDamagedIsReplacedSayingSo) {
  {
    auto mgr = Open();
    for (int s = 1; s <= 3; ++s) {
      ASSERT_TRUE(mgr->Save(s, SeededModel(s).ToState()).ok());
    }
  }
  {
    auto storage = root_.Open();
    ASSERT_TRUE(storage.ok());
    Result<std::vector<ObjectInfo>> listed = (*storage)->List(
        format::ManifestKey(3).substr(0, format::ManifestKey(3).find('/') + 1));
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    int damaged = 0;
    for (const ObjectInfo& o : *listed) {
      if (!o.key.ends_with(".safetensors")) continue;
      Result<std::string> bytes = (*storage)->ReadAll(o.key);
      ASSERT_TRUE(bytes.ok() && bytes->size() > 8 && (*bytes)[8] == '{');
      (*bytes)[8] = 'z';  // the header's JSON no longer parses
      ASSERT_TRUE((*storage)->PutString(o.key, *bytes).ok());
      ++damaged;
    }
    ASSERT_GT(damaged, 0);
  }
  auto mgr = Open();
  ExpectResumesFrom(*mgr, 3);
  ::testing::internal::CaptureStderr();
  Result<SaveResult> saved = mgr->Save(3, SeededModel(33).ToState());
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(saved->replaced);
  EXPECT_TRUE(Contains(saved->replaced_because, "safetensors headers alone"))
      << saved->replaced_because;
  EXPECT_TRUE(Contains(err, "step 3 was damaged")) << err;
  EXPECT_FALSE(Contains(err, "did not load")) << err;
  ExpectLoads(*mgr, 3, SeededModel(33));
  Result<VerifyReport> report = mgr->Verify(3);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

TEST_P(ReplaceTest, ASaveReplacesADamagedStepItsLoadSkipped) {
  ExpectReplaced(/*loaded_first=*/true);
}

TEST_P(ReplaceTest, ASaveReplacesADamagedStepItFindsByChecking) {
  ExpectReplaced(/*loaded_first=*/false);
}

TEST_P(ReplaceTest, AStepThatLoadsWholeIsNeverReplaced) {
  SeededModel first(2);
  {
    auto mgr = Open();
    ASSERT_TRUE(mgr->Save(1, SeededModel(1).ToState()).ok());
    ASSERT_TRUE(mgr->Save(2, first.ToState()).ok());
    // Its own commit: known whole.
    EXPECT_EQ(mgr->Save(2, SeededModel(22).ToState()).status().code(),
              ErrorCode::kAlreadyExists);
  }
  auto storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  const std::string before = ManifestBytes(**storage, 2);
  // A manager that knows nothing of it checks it, finds it whole.
  auto mgr = Open();
  Result<SaveResult> saved = mgr->Save(2, SeededModel(22).ToState());
  EXPECT_EQ(saved.status().code(), ErrorCode::kAlreadyExists)
      << saved.status().ToString();
  EXPECT_EQ(ManifestBytes(**storage, 2), before);
  ExpectLoads(*mgr, 2, first);
}

// A manifest of a version this build does not read is most likely a newer
// ckpt's step: the save fails and the step stays as it is.
TEST_P(ReplaceTest, AStepOfANewerManifestVersionIsNeverReplaced) {
  {
    auto mgr = Open();
    ASSERT_TRUE(mgr->Save(1, SeededModel(1).ToState()).ok());
    ASSERT_TRUE(mgr->Save(2, SeededModel(2).ToState()).ok());
  }
  auto storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  auto header = format::DecodeManifest(
      (*storage)->ReadAll(format::ManifestKey(2)).value(), "record");
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  header->version = 99;
  ASSERT_TRUE(
      (*storage)
          ->PutString(format::ManifestKey(2), format::EncodeManifest(*header))
          .ok());
  const std::string before = ManifestBytes(**storage, 2);
  auto mgr = Open();
  Result<SaveResult> saved = mgr->Save(2, SeededModel(22).ToState());
  EXPECT_EQ(saved.status().code(), ErrorCode::kFailedPrecondition)
      << saved.status().ToString();
  EXPECT_TRUE(Contains(saved.status().message(), "newer ckpt"))
      << saved.status().ToString();
  EXPECT_EQ(ManifestBytes(**storage, 2), before);
}

TEST_P(ReplaceTest, OnlyTheLeaseHolderReplaces) {
  SaveThreeAndDamageTheNewest();
  auto storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  const std::string before = ManifestBytes(**storage, 3);
  // Another job holds the root's lease: this one may not write at all.
  auto holder = Open({.job_id = "holder"});
  ASSERT_TRUE(holder->Save(0, SeededModel(0).ToState()).ok());
  auto other = Open({.job_id = "other", .lease_wait_seconds = 0});
  ExpectResumesFrom(*other, 2);
  Result<SaveResult> refused = other->Save(3, SeededModel(33).ToState());
  EXPECT_EQ(refused.status().code(), ErrorCode::kFailedPrecondition)
      << refused.status().ToString();
  EXPECT_EQ(ManifestBytes(**storage, 3), before);
  // Ownership off: nobody owns the root, so nobody replaces.
  auto unowned = Open({.job_id = "unowned", .lease_seconds = 0});
  ExpectResumesFrom(*unowned, 2);
  Result<SaveResult> exists = unowned->Save(3, SeededModel(33).ToState());
  EXPECT_EQ(exists.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_TRUE(Contains(exists.status().message(), "does not load whole"))
      << exists.status().ToString();
  EXPECT_EQ(ManifestBytes(**storage, 3), before);
  // The holder, which never loaded it, checks it and replaces it.
  Result<SaveResult> replaced = holder->Save(3, SeededModel(33).ToState());
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_TRUE(replaced->replaced);
  ExpectLoads(*holder, 3, SeededModel(33));
}

// Two ranks: rank 0 decides and every rank acts on its decision, whichever
// rank's part is damaged.
TEST_P(ReplaceTest, EveryRankOfAManyRankSaveAgrees) {
  constexpr int kRanks = 2;
  auto storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  // Each rank's outcome: "" or the error; and whether it replaced.
  std::vector<std::string> errors(kRanks);
  std::vector<int> replaced(kRanks, 0);
  auto save = [&](int64_t step, bool resume) {
    StepModel model(step, kRanks);
    RunRanks(kRanks, [&](int rank, Communicator* comm) {
      auto mgr = CheckpointManager::Open(
          std::make_unique<StorageWrapper>(storage->get()),
          {.communicator = comm});
      ASSERT_TRUE(mgr.ok());
      if (resume) {
        // A resume first, as a job's restart does: step 2 is damaged.
        StepModel into(0, kRanks);
        State state = into.ForRank(rank);
        Result<CheckpointInfo> info = (*mgr)->Load(std::nullopt, state);
        EXPECT_TRUE(info.ok() && info->step == 1) << info.status().ToString();
      }
      Result<SaveResult> r = (*mgr)->Save(step, model.ForRank(rank));
      errors[rank] = r.ok() ? "" : r.status().ToString();
      replaced[rank] = r.ok() && r->replaced;
    });
  };
  save(1, false);
  save(2, false);
  // Only the last rank's data object.
  const std::string manifest = format::ManifestKey(2);
  auto listed = (*storage)->List(manifest.substr(0, manifest.find('/') + 1));
  ASSERT_TRUE(listed.ok());
  for (const ObjectInfo& o : *listed) {
    if (!o.key.ends_with(".safetensors") || !Contains(o.key, "/r00001-")) {
      continue;
    }
    std::string bytes = (*storage)->ReadAll(o.key).value();
    bytes.back() = static_cast<char>(bytes.back() ^ 1);
    ASSERT_TRUE((*storage)->PutString(o.key, bytes).ok());
  }
  save(2, true);
  EXPECT_EQ(errors, std::vector<std::string>(kRanks));
  EXPECT_EQ(replaced, std::vector<int>(kRanks, 1));
  auto mgr = CheckpointManager::Open(
      std::make_unique<StorageWrapper>(storage->get()), {});
  ASSERT_TRUE(mgr.ok());
  EXPECT_TRUE((*mgr)->Verify(2).value().ok());
  EXPECT_EQ(testing::CheckStep(**mgr, 2, kRanks), "");
}

// The power goes at every mutating storage call of a replacing save: the
// reopened root holds the old, damaged step (and a resume skips it) or the
// new one whole, never no step 3 and never one that loads other bytes.
TEST(ReplacePowerLossTest, EveryCallLeavesTheOldStepOrTheNewOne) {
  SeededModel again(33);
  // Saves over damaged step 3 with the power cut during call `crash_at`
  // (none: no cut), then checks the root; the number of mutating calls.
  auto run = [&](std::optional<uint64_t> crash_at) -> uint64_t {
    SCOPED_TRACE(crash_at
                     ? "power lost during call " + std::to_string(*crash_at)
                     : std::string("no power loss"));
    testing::TestRoot root(Backend::kMemory, "replace-powerloss");
    auto base = root.Open();
    EXPECT_TRUE(base.ok());
    if (!base.ok()) return 0;
    auto open = [](Storage* storage) {
      return CheckpointManager::Open(std::make_unique<StorageWrapper>(storage))
          .value();
    };
    {
      auto mgr = open(base->get());
      for (int s = 1; s <= 3; ++s) {
        EXPECT_TRUE(mgr->Save(s, SeededModel(s).ToState()).ok());
      }
    }
    EXPECT_GT(DamageStep(**base, 3), 0);
    auto crash = testing::CrashStorage::Wrap(base->get());
    EXPECT_TRUE(crash.ok());
    if (!crash.ok()) return 0;
    if (crash_at) (*crash)->CrashAt(*crash_at);
    uint64_t calls = 0;
    {
      auto mgr = open(crash->get());
      Result<SaveResult> saved = mgr->Save(3, again.ToState());
      calls = (*crash)->operations();
      if (!crash_at) {
        EXPECT_TRUE(saved.ok()) << saved.status().ToString();
      }
    }
    EXPECT_TRUE((*crash)->PowerLoss({.seed = crash_at.value_or(0)}).ok());
    auto mgr = open(base->get());
    Result<VerifyReport> report = mgr->Verify(3);
    EXPECT_TRUE(report.ok()) << report.status().ToString();
    if (!report.ok()) return calls;
    SeededModel into(0);
    State state = into.ToState();
    Result<CheckpointInfo> info = mgr->Load(std::nullopt, state);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (!info.ok()) return calls;
    if (report->ok()) {
      EXPECT_EQ(info->step, 3);
      ExpectLoads(*mgr, 3, again);
    } else {
      EXPECT_EQ(info->step, 2);  // the old step 3, damaged, skipped
    }
    return calls;
  };
  const uint64_t calls = run(std::nullopt);
  EXPECT_GT(calls, 3u);
  for (uint64_t crash_at = 0; crash_at < calls; ++crash_at) run(crash_at);
}

}  // namespace
}  // namespace ckpt
