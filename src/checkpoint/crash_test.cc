// A simulated crash before and after every storage operation of a save (and
// of the retention and garbage collection that follow its commit) leaves the
// previous checkpoint loadable and the new one either complete or absent;
// a save that reported success always survives.
#include <chrono>
#include <optional>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/fault_storage.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using testing::Backend;
using testing::BackendName;
using testing::FaultStorage;
using testing::TestModel;

struct CrashCase {
  Backend backend;  // s3:// is moto's
  int keep_last;    // 0: no retention; 1: the save also deletes step 1
};

void PrintTo(const CrashCase& c, std::ostream* os) {
  *os << BackendName(c.backend) << " keep_last=" << c.keep_last;
}

class CrashTest : public ::testing::TestWithParam<CrashCase> {
 protected:
  // A fresh, empty root, in place of the last one.
  std::string FreshRoot() {
    root_.emplace(GetParam().backend, "crash");
    return root_->url();
  }

  Options MakeOptions() {
    Options o;
    o.retention.keep_last = GetParam().keep_last;
    o.chunk_size = 4096;  // several chunks per tensor
    return o;
  }

  // Runs the save of step 2 with a crash at `op` (or none); returns whether
  // the save reported success and the number of operations it performed.
  std::pair<bool, uint64_t> SaveWithCrash(const std::string& url,
                                          std::optional<uint64_t> op,
                                          FaultStorage::Mode mode) {
    auto base = OpenStorage(url);
    EXPECT_TRUE(base.ok());
    auto fault = std::make_unique<FaultStorage>(base->get());
    FaultStorage* f = fault.get();
    if (op) f->CrashAt(*op, mode);
    auto mgr = CheckpointManager::Open(std::move(fault), MakeOptions());
    EXPECT_TRUE(mgr.ok());
    TestModel b(2);
    State s = b.MakeState();
    const bool ok = (*mgr)->Save(2, s, {.epoch = 1}).ok();
    return {ok, f->operations()};
  }

  std::optional<testing::TestRoot> root_;
};

// After the crash, reopen the root untouched and check the promises.
void CheckAfterCrash(const std::string& url, bool save_ok,
                     const std::string& where) {
  // The clock runs two hours ahead, so that the dead attempt of step 2 (above
  // the newest committed step, hence protected while young in case it is
  // still running) is old enough for garbage collection.
  Options later;
  later.now_unix_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count() +
           2 * 3600 * 1000;
  };
  auto mgr = CheckpointManager::Open(url, later);
  ASSERT_TRUE(mgr.ok()) << where;
  auto latest = (*mgr)->Latest();
  ASSERT_TRUE(latest.ok()) << where;
  ASSERT_TRUE(latest->has_value()) << where << ": no checkpoint survived";
  const int64_t step = **latest;
  ASSERT_TRUE(step == 1 || step == 2) << where;
  if (save_ok) {
    EXPECT_EQ(step, 2) << where << ": a save that reported success was lost";
  }
  // The newest loads bit-identical to what was saved under that step.
  TestModel want(step), got(0);
  State into = got.MakeState();
  auto info = (*mgr)->Load(std::nullopt, into);
  ASSERT_TRUE(info.ok()) << where << ": " << info.status().ToString();
  got.rng = into.BlobString("rng").value();
  EXPECT_TRUE(got == want) << where;
  // Every checkpoint that is listed verifies.
  auto list = (*mgr)->List();
  ASSERT_TRUE(list.ok());
  for (const auto& c : *list) {
    auto report = (*mgr)->Verify(c.step);
    ASSERT_TRUE(report.ok()) << where;
    EXPECT_TRUE(report->ok())
        << where << ": step " << c.step << ": "
        << (report->problems.empty() ? "" : report->problems.front());
  }
  // Garbage collection leaves exactly the committed checkpoints' objects.
  auto gc = (*mgr)->GarbageCollect();
  ASSERT_TRUE(gc.ok()) << where << ": " << gc.status().ToString();
  std::set<std::string> expected = {std::string(format::kLatestName)};
  for (const auto& c : *list) {
    auto d = (*mgr)->Describe(c.step);
    ASSERT_TRUE(d.ok());
    expected.insert(format::ManifestKey(c.step));
    for (const auto& o : d->objects) expected.insert(o.key);
    for (const auto& o : d->metadata_objects) expected.insert(o.key);
  }
  // Beside them only the root's lease (who writes, not what was saved).
  const std::set<std::string> present =
      testing::CheckpointObjectKeys((*mgr)->storage());
  // LATEST may be missing if the crash hit before it was first written.
  if (!present.count(std::string(format::kLatestName))) {
    expected.erase(std::string(format::kLatestName));
  }
  EXPECT_EQ(present, expected) << where;
  // And the newest still loads after gc.
  TestModel again(0);
  State into2 = again.MakeState();
  EXPECT_TRUE((*mgr)->Load(step, into2).ok()) << where;
}

TEST_P(CrashTest, EveryOperationBeforeAndAfter) {
  // Count the operations of an undisturbed save.
  std::string url = FreshRoot();
  {
    TestModel a(1);
    State s = a.MakeState();
    auto mgr = CheckpointManager::Open(url, MakeOptions());
    ASSERT_TRUE(mgr.ok());
    ASSERT_TRUE((*mgr)->Save(1, s, {.epoch = 0}).ok());
  }
  auto [ok, total] =
      SaveWithCrash(url, std::nullopt, FaultStorage::Mode::kCrashBefore);
  ASSERT_TRUE(ok);
  ASSERT_GT(total, 3u);  // at least: data object, manifest, LATEST

  for (auto mode :
       {FaultStorage::Mode::kCrashBefore, FaultStorage::Mode::kCrashAfter}) {
    for (uint64_t op = 0; op <= total; ++op) {
      url = FreshRoot();
      {
        TestModel a(1);
        State s = a.MakeState();
        auto mgr = CheckpointManager::Open(url, MakeOptions());
        ASSERT_TRUE(mgr.ok());
        ASSERT_TRUE((*mgr)->Save(1, s, {.epoch = 0}).ok());
      }
      auto [saved, ops] = SaveWithCrash(url, op, mode);
      const std::string where =
          std::string(mode == FaultStorage::Mode::kCrashBefore ? "before"
                                                               : "after") +
          " operation " + std::to_string(op) + " of " + std::to_string(total);
      if (op == total) {
        EXPECT_TRUE(saved) << where;  // no operation was disturbed
      }
      CheckAfterCrash(url, saved, where);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CrashTest,
                         ::testing::Values(CrashCase{Backend::kMemory, 0},
                                           CrashCase{Backend::kMemory, 1},
                                           CrashCase{Backend::kFile, 0},
                                           CrashCase{Backend::kFile, 1},
                                           CrashCase{Backend::kS3, 0},
                                           CrashCase{Backend::kS3, 1}),
                         [](const auto& info) {
                           return BackendName(info.param.backend) +
                                  "_keep_last_" +
                                  std::to_string(info.param.keep_last);
                         });

}  // namespace
}  // namespace ckpt
