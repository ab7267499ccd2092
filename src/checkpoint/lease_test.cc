// Root ownership (lease.h, docs/concurrency.md): one writer at a time, a
// clear refusal naming the holder, takeover of a holder that is gone, and a
// fence that keeps a holder whose lease was taken over from committing.
#include "lease/lease.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "format/lease_record.h"
#include "testing/backends.h"
#include "testing/step_model.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using testing::Backend;
using testing::ExpectLoads;
using Model = testing::SeededModel;

bool Mentions(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The pid of a process that has exited (and been reaped).
int64_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

class LeaseTest : public ::testing::TestWithParam<Backend> {
 protected:
  // The default options: the lease on, 60 s.
  static Options Leased() { return Options(); }
  std::unique_ptr<CheckpointManager> Open(Options o = Leased()) {
    if (o.job_id.empty()) o.job_id = "job-" + std::to_string(opened_++);
    Result<std::unique_ptr<Storage>> storage = root_.Open();
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (!storage.ok()) return nullptr;
    auto mgr = CheckpointManager::Open(*std::move(storage), std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }
  static Options NoWait() {
    Options o = Leased();
    o.lease_wait_seconds = 0;
    return o;
  }
  Status Save(CheckpointManager& mgr, int64_t step) {
    Model m(static_cast<int>(step));
    return mgr.Save(step, m.ToState()).status();
  }
  // Writes `record` as the root's lease generation `generation`.
  void PlantLease(int64_t generation, const format::LeaseRecord& record) {
    Result<std::unique_ptr<Storage>> storage = root_.Open();
    ASSERT_TRUE(storage.ok());
    ASSERT_TRUE((*storage)
                    ->PutString(format::LeaseKey(generation),
                                format::EncodeLease(record))
                    .ok());
  }
  std::vector<std::string> DataObjects() {
    Result<std::unique_ptr<Storage>> storage = root_.Open();
    std::vector<std::string> keys;
    if (!storage.ok()) return keys;
    Result<std::vector<ObjectInfo>> all = (*storage)->List("");
    if (!all.ok()) return keys;
    for (const ObjectInfo& o : *all) {
      if (format::ParseDataObjectKey(o.key, nullptr, nullptr, nullptr)) {
        keys.push_back(o.key);
      }
    }
    return keys;
  }
  static format::LeaseRecord Record(std::string host, int64_t pid,
                                    int64_t expires_unix_ms) {
    format::LeaseRecord r;
    r.owner = "00000000feedface";
    r.job_id = "the-old-job";
    r.purpose = "save";
    r.host = std::move(host);
    r.boot_id = LeaseBootId();
    r.pid = pid;
    r.started_unix_ms = r.renewed_unix_ms = 1000;
    r.expires_unix_ms = std::max<int64_t>(expires_unix_ms, 1000);
    return r;
  }

  testing::TestRoot root_{GetParam(), "lease"};
  int opened_ = 0;
};

TEST_P(LeaseTest, ASecondWriterIsRefusedNamingTheHolderAndWritesNothing) {
  auto job = Open();
  ASSERT_TRUE(Save(*job, 10).ok());
  auto second = Open(NoWait());
  const std::vector<std::string> before = DataObjects();
  Status s = Save(*second, 20);
  ASSERT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "job-0")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "pid " + std::to_string(getpid()))) << s.ToString();
  EXPECT_TRUE(Mentions(s, "host " + LeaseHostName())) << s.ToString();
  EXPECT_TRUE(Mentions(s, root_.url())) << s.ToString();
  // Both managers are this process's: close the holder, not break its
  // lease (another process's is below).
  EXPECT_TRUE(Mentions(s, "Close that manager first")) << s.ToString();
  EXPECT_EQ(DataObjects(), before);
  // Deletes and collections are refused the same way; loads are not.
  EXPECT_EQ(second->Delete(10).status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(second->GarbageCollect().status().code(),
            ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(second->GarbageCollect({.dry_run = true}).ok());
  ExpectLoads(*second, 10, Model(10));
  // The holder goes on saving.
  ASSERT_TRUE(Save(*job, 30).ok());
  // Gone, it gives the lease back: the next writer need not wait.
  job.reset();
  ASSERT_TRUE(Save(*second, 40).ok());
  ExpectLoads(*second, 40, Model(40));
}

TEST_P(LeaseTest, AWriterWaitsForTheHolderToFinish) {
  auto job = Open();
  ASSERT_TRUE(Save(*job, 1).ok());
  Options wait = Leased();
  wait.lease_wait_seconds = 30;
  auto next = Open(wait);
  std::thread finish([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    job.reset();
  });
  const auto start = std::chrono::steady_clock::now();
  Status s = Save(*next, 2);
  finish.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  ExpectLoads(*next, 2, Model(2));
}

TEST_P(LeaseTest, ToolsGiveTheLeaseBackAfterEachCall) {
  auto writer = Open(NoWait());
  ASSERT_TRUE(Save(*writer, 1).ok());
  ASSERT_TRUE(Save(*writer, 2).ok());
  writer.reset();
  auto tool = Open(NoWait());
  ASSERT_TRUE(tool->Delete(1).ok());
  ASSERT_TRUE(tool->GarbageCollect().ok());
  // The tool still exists, and a job can take the root at once.
  auto job = Open(NoWait());
  ASSERT_TRUE(Save(*job, 3).ok());
  EXPECT_EQ(tool->Delete(2).status().code(), ErrorCode::kFailedPrecondition);
}

TEST_P(LeaseTest, AHolderThatIsGoneIsTakenOverAtOnce) {
  // Crashed on this host: its pid no longer runs.
  PlantLease(1, Record(LeaseHostName(), DeadPid(), NowMs() + 3600'000));
  auto job = Open(NoWait());
  ASSERT_TRUE(Save(*job, 5).ok());
  ExpectLoads(*job, 5, Model(5));
}

// A holder killed a moment ago that its parent has not reaped yet (a
// zombie: kill() still finds it) is gone too: a job restarted at once
// takes the lease without waiting it out.
TEST_P(LeaseTest, AKilledHolderNotYetReapedIsTakenOverAtOnce) {
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  ASSERT_GT(zombie, 0);
  // Exited, not reaped: its /proc entry stays, in state Z.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, zombie, &info, WEXITED | WNOWAIT), 0);
  ASSERT_EQ(kill(zombie, 0), 0) << "a zombie is still found by kill()";
  PlantLease(1, Record(LeaseHostName(), zombie, NowMs() + 3600'000));
  auto job = Open(NoWait());
  const Status saved = Save(*job, 5);
  int status = 0;
  waitpid(zombie, &status, 0);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  ExpectLoads(*job, 5, Model(5));
}

// After a restart the job takes over its dead incarnation's lease: the
// warning says that holder is gone and that this process holds the lease,
// not that the lease is held (which reads as a refusal).
TEST_P(LeaseTest, TheTakeoverWarningSaysThePreviousHolderIsGone) {
  const int64_t dead = DeadPid();
  PlantLease(1, Record(LeaseHostName(), dead, NowMs() + 3600'000));
  auto job = Open(NoWait());
  ::testing::internal::CaptureStderr();
  const Status saved = Save(*job, 5);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  EXPECT_NE(
      log.find("this process now holds the lease (" + format::LeaseKey(2)),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("the previous holder is gone (its process " +
                     std::to_string(dead) + " is gone)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("it was held by job \"the-old-job\""), std::string::npos)
      << log;
  EXPECT_EQ(log.find("it is held"), std::string::npos) << log;

  // Expired, on another host.
  job.reset();
  PlantLease(3, Record("some-other-host", 1, NowMs() - 1000));
  auto next = Open(NoWait());
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Save(*next, 6).ok());
  const std::string expired = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(expired.find("the previous holder is gone (expired at "),
            std::string::npos)
      << expired;
  EXPECT_NE(expired.find("this process now holds the lease"), std::string::npos)
      << expired;
}

TEST_P(LeaseTest, AnExpiredLeaseOfAnotherHostIsTakenOver) {
  PlantLease(3, Record("some-other-host", 1, NowMs() - 1000));
  auto job = Open(NoWait());
  ASSERT_TRUE(Save(*job, 5).ok());
  Result<std::unique_ptr<Storage>> storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  // The next generation; the one before stays until the next takeover,
  // which removes it.
  EXPECT_TRUE((*storage)->Stat(format::LeaseKey(4)).ok());
  EXPECT_TRUE((*storage)->Stat(format::LeaseKey(3)).ok());
  job.reset();
  auto next = Open(NoWait());
  ASSERT_TRUE(Save(*next, 6).ok());
  EXPECT_TRUE((*storage)->Stat(format::LeaseKey(5)).ok());
  EXPECT_TRUE((*storage)->Stat(format::LeaseKey(4)).ok());
  EXPECT_EQ((*storage)->Stat(format::LeaseKey(3)).status().code(),
            ErrorCode::kNotFound);
}

// A holder that died while it deleted the generations before its own left a
// gap; the next taker removes every generation before the previous one all
// the same, so that they do not pile up.
TEST_P(LeaseTest, OldGenerationsGoEvenPastAGap) {
  format::LeaseRecord released = Record("some-other-host", 1, NowMs() - 1000);
  released.released = true;
  PlantLease(1, released);
  PlantLease(3, released);
  auto job = Open(NoWait());
  ASSERT_TRUE(Save(*job, 5).ok());
  Result<std::unique_ptr<Storage>> storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  Result<std::vector<ObjectInfo>> leases =
      (*storage)->List(format::LeasePrefix());
  ASSERT_TRUE(leases.ok());
  std::vector<std::string> keys;
  for (const ObjectInfo& o : *leases) keys.push_back(o.key);
  EXPECT_EQ(keys, (std::vector<std::string>{format::LeaseKey(3),
                                            format::LeaseKey(4)}));
}

// Counts listings of the lease generations, and fails deletes of the keys
// in `undeletable`.
class LeaseListings : public StorageWrapper {
 public:
  LeaseListings(std::unique_ptr<Storage> target,
                std::set<std::string> undeletable = {})
      : StorageWrapper(std::move(target)),
        undeletable_(std::move(undeletable)) {}
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    if (prefix == format::LeasePrefix()) ++listings;
    return StorageWrapper::List(prefix);
  }
  Status Delete(std::string_view key) override {
    if (undeletable_.count(std::string(key))) {
      return IOError("delete " + std::string(key) + ": refused by the test");
    }
    return StorageWrapper::Delete(key);
  }
  std::atomic<int> listings{0};

 private:
  const std::set<std::string> undeletable_;
};

// The fence before each commit does not list the generations (a listing of
// the whole root, which holds every checkpoint): a save's cost must not
// grow with the number of checkpoints. It still finds a takeover.
TEST_P(LeaseTest, TheFenceListsNothingWhileTheLeaseIsHeld) {
  Result<std::unique_ptr<Storage>> storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  auto counting = std::make_unique<LeaseListings>(*std::move(storage));
  LeaseListings* listings = counting.get();
  auto mgr = CheckpointManager::Open(std::move(counting), Leased()).value();
  ASSERT_TRUE(Save(*mgr, 1).ok());  // takes the lease: lists
  const int after_first = listings->listings;
  for (int step = 2; step <= 6; ++step) ASSERT_TRUE(Save(*mgr, step).ok());
  EXPECT_EQ(listings->listings, after_first);
  Options breaking = NoWait();
  breaking.break_lease = true;
  auto other = Open(breaking);
  ASSERT_TRUE(Save(*other, 7).ok());
  const Status s = Save(*mgr, 8);
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "taken over")) << s.ToString();
}

// A takeover removes old generations lowest first and stops at one it
// cannot remove: a newer generation never goes while an older one stays
// (which the fence's quick check relies on).
TEST_P(LeaseTest, OldGenerationsGoLowestFirstStoppingAtAFailure) {
  format::LeaseRecord released = Record("some-other-host", 1, NowMs() - 1000);
  released.released = true;
  for (int64_t g : {1, 2, 3, 4}) PlantLease(g, released);
  Result<std::unique_ptr<Storage>> storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  auto mgr =
      CheckpointManager::Open(
          std::make_unique<LeaseListings>(
              *std::move(storage), std::set<std::string>{format::LeaseKey(2)}),
          NoWait())
          .value();
  ASSERT_TRUE(Save(*mgr, 1).ok());
  Result<std::unique_ptr<Storage>> plain = root_.Open();
  ASSERT_TRUE(plain.ok());
  Result<std::vector<ObjectInfo>> leases =
      (*plain)->List(format::LeasePrefix());
  ASSERT_TRUE(leases.ok());
  std::vector<std::string> keys;
  for (const ObjectInfo& o : *leases) keys.push_back(o.key);
  // 1 went; 2 could not, so 3 stayed too; 4 is the previous generation.
  EXPECT_EQ(keys, (std::vector<std::string>{
                      format::LeaseKey(2), format::LeaseKey(3),
                      format::LeaseKey(4), format::LeaseKey(5)}));
}

// Shows no lease generation in the first listing of them, after running
// `meanwhile`: a listing that another party's takeover (a new generation
// created, an older one deleted) overtook on both ends.
class OvertakenListing : public StorageWrapper {
 public:
  OvertakenListing(Storage* target, std::function<void()> meanwhile)
      : StorageWrapper(target), meanwhile_(std::move(meanwhile)) {}
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    if (prefix != format::LeasePrefix() || !meanwhile_) {
      return StorageWrapper::List(prefix);
    }
    std::function<void()> meanwhile = std::move(meanwhile_);
    meanwhile_ = nullptr;
    meanwhile();
    return std::vector<ObjectInfo>();
  }

 private:
  std::function<void()> meanwhile_;
};

// Of two takers of a released lease, one whose listing missed the other's
// takeover (and so saw no lease at all) must not believe it won as well:
// the generation it would create is still there (the previous one is kept),
// and had it gone too, the listing after the create shows the newer one.
TEST_P(LeaseTest, ATakerWhoseListingWasOvertakenDoesNotWinToo) {
  for (const bool previous_gone : {false, true}) {
    SCOPED_TRACE(previous_gone ? "generation 1 gone" : "generation 1 kept");
    testing::TestRoot root(GetParam(), "lease-race");
    Result<std::unique_ptr<Storage>> storage = root.Open();
    ASSERT_TRUE(storage.ok());
    {
      RootLease first(**storage, LeaseSettings{.job_id = "first"});
      ASSERT_TRUE(first.Acquire("save").ok());
    }  // released: generation 1 is free to take
    RootLease winner(**storage, LeaseSettings{.job_id = "winner"});
    OvertakenListing racing(storage->get(), [&] {
      ASSERT_TRUE(winner.Acquire("save").ok());
      EXPECT_EQ(winner.generation(), 2);
      if (previous_gone) {
        ASSERT_TRUE((*storage)->Delete(format::LeaseKey(1)).ok());
      }
    });
    RootLease loser(racing, LeaseSettings{.job_id = "loser"});
    const Status s = loser.Acquire("save");
    EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
    EXPECT_TRUE(Mentions(s, "winner")) << s.ToString();
    EXPECT_EQ(loser.generation(), -1);
    EXPECT_TRUE(winner.Check().ok());
    // The loser left no generation of its own behind.
    Result<std::vector<ObjectInfo>> leases =
        (*storage)->List(format::LeasePrefix());
    ASSERT_TRUE(leases.ok());
    for (const ObjectInfo& o : *leases) {
      Result<std::string> bytes = (*storage)->ReadAll(o.key);
      ASSERT_TRUE(bytes.ok());
      EXPECT_EQ(bytes->find("\"loser\""), std::string::npos) << o.key;
    }
  }
}

TEST_P(LeaseTest, ALiveLeaseOfAnotherHostIsWaitedForThenRefused) {
  PlantLease(1, Record("some-other-host", 1, NowMs() + 3600'000));
  Options o = Leased();
  o.lease_wait_seconds = 1;
  auto job = Open(o);
  Status s = Save(*job, 5);
  ASSERT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "the-old-job")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "some-other-host")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "after waiting 1 s")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "Stop that process")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "--break-lease")) << s.ToString();
  EXPECT_FALSE(Mentions(s, "this process")) << s.ToString();
  EXPECT_TRUE(DataObjects().empty());
  // Half a second is said as such, not "0 s".
  o.lease_wait_seconds = 0.5;
  auto brief = Open(o);
  s = Save(*brief, 5);
  EXPECT_TRUE(Mentions(s, "after waiting 0.5 s")) << s.ToString();
}

TEST_P(LeaseTest, ADamagedLeaseIsRefusedUntilBroken) {
  Result<std::unique_ptr<Storage>> storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  ASSERT_TRUE((*storage)->PutString(format::LeaseKey(2), "{not json").ok());
  auto job = Open(NoWait());
  Status s = Save(*job, 1);
  ASSERT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "LEASE-000000000002")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "never expires")) << s.ToString();
  EXPECT_FALSE(Mentions(s, "frees itself")) << s.ToString();
  Options force = NoWait();
  force.break_lease = true;
  auto breaker = Open(force);
  ASSERT_TRUE(Save(*breaker, 1).ok());
  ExpectLoads(*breaker, 1, Model(1));
}

// The fence: a job whose lease was broken (it stalled; an operator judged it
// dead) commits nothing, and its data is gone with it.
TEST_P(LeaseTest, AHolderWhoseLeaseWasBrokenCommitsNothing) {
  auto stalled = Open();
  ASSERT_TRUE(Save(*stalled, 1).ok());
  Options force = NoWait();
  force.break_lease = true;
  auto breaker = Open(force);
  ASSERT_TRUE(Save(*breaker, 2).ok());
  Status s = Save(*stalled, 3);
  ASSERT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "taken over")) << s.ToString();
  EXPECT_EQ(breaker->LoadAll(3).status().code(), ErrorCode::kNotFound);
  for (const std::string& key : DataObjects()) {
    EXPECT_NE(format::StepOfKey(key), 3) << key;
  }
  ExpectLoads(*breaker, 1, Model(1));
  ExpectLoads(*breaker, 2, Model(2));
}

// The same when the holder's renewing thread finds the takeover first and
// the new holder is done (its lease given back) before the old one saves
// again: that save still fails, rather than take the free lease as if
// nothing had happened; only the one after it starts over like anyone's.
TEST_P(LeaseTest, AHolderWhoseRenewalFoundTheTakeoverFailsItsNextCommit) {
  Options quick = Leased();
  quick.lease_seconds = 1;  // renewed every third of a second
  auto stalled = Open(quick);
  ASSERT_TRUE(Save(*stalled, 1).ok());
  {
    Options force = NoWait();
    force.break_lease = true;
    auto breaker = Open(force);
    ASSERT_TRUE(Save(*breaker, 2).ok());
  }
  // Time for the stalled holder's renewals to find the lease taken over.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  Status s = Save(*stalled, 3);
  ASSERT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "taken over")) << s.ToString();
  auto reader = Open(NoWait());
  EXPECT_EQ(reader->LoadAll(3).status().code(), ErrorCode::kNotFound);
  for (const std::string& key : DataObjects()) {
    EXPECT_NE(format::StepOfKey(key), 3) << key;
  }
  ASSERT_TRUE(Save(*stalled, 4).ok());
  ExpectLoads(*reader, 2, Model(2));
  ExpectLoads(*reader, 4, Model(4));
}

// What a holder that lost the lease tries.
enum class Removal { kDelete, kDeleteForce, kGcDeadAttempts, kGcRetention };

// A holder of a root (steps 1 to 4, 2 and 3 incremental on 1, and a dead
// attempt) loses the lease through `take` (which returns the new holder's
// lease, if any, to keep until the end), then tries `removal`: refused as
// taken over, it must have deleted nothing. Each removal gets a fresh root,
// since a refused holder that tries again takes the lease anew.
void ExpectALostLeaseDeletesNothing(
    Backend backend, Removal removal,
    const std::function<std::unique_ptr<RootLease>(Storage&)>& take) {
  testing::TestRoot root(backend, "lease-lost");
  Options o;
  o.job_id = "holder";
  o.lease_wait_seconds = 0;
  o.chunk_size = 4096;
  auto holder = CheckpointManager::Open(root.url(), o);
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  for (int64_t step : {1, 2, 3, 4}) {
    testing::StepModel m(step, 1);
    const bool incremental = step == 2 || step == 3;
    ASSERT_TRUE(
        (*holder)->Save(step, m.ForRank(0), {.incremental = incremental}).ok());
  }
  Result<std::unique_ptr<Storage>> storage = root.Open();
  ASSERT_TRUE(storage.ok());
  // A dead attempt, which the holder would remove while it owns the root.
  ASSERT_TRUE((*storage)
                  ->PutString(format::DataObjectKey(9, 0, "0123456789abcdef"),
                              "dead attempt")
                  .ok());
  const std::set<std::string> before = testing::CheckpointObjectKeys(**storage);
  const std::unique_ptr<RootLease> taker = take(**storage);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  Status s;
  switch (removal) {
    case Removal::kDelete:
      s = (*holder)->Delete(3).status();
      break;
    case Removal::kDeleteForce:  // steps 2 and 3 depend on it
      s = (*holder)->Delete(1, {.rewrite_dependants = true}).status();
      break;
    case Removal::kGcDeadAttempts:
      s = (*holder)->GarbageCollect().status();
      break;
    case Removal::kGcRetention: {
      RetentionPolicy keep_one;
      keep_one.keep_last = 1;
      s = (*holder)->GarbageCollect({.retention = keep_one}).status();
      break;
    }
  }
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "taken over")) << s.ToString();
  EXPECT_TRUE(Mentions(s, "nothing was deleted")) << s.ToString();
  EXPECT_EQ(testing::CheckpointObjectKeys(**storage), before);
  for (int64_t step : {1, 2, 3, 4}) {
    EXPECT_EQ(testing::CheckStep(**holder, step, 1), "") << "step " << step;
  }
}

constexpr Removal kRemovals[] = {Removal::kDelete, Removal::kDeleteForce,
                                 Removal::kGcDeadAttempts,
                                 Removal::kGcRetention};

TEST_P(LeaseTest, AHolderWhoseLeaseWasBrokenDeletesNothing) {
  for (Removal removal : kRemovals) {
    SCOPED_TRACE("removal " + std::to_string(static_cast<int>(removal)));
    ExpectALostLeaseDeletesNothing(GetParam(), removal, [](Storage& storage) {
      auto breaker = std::make_unique<RootLease>(
          storage, LeaseSettings{.break_lease = true, .job_id = "breaker"});
      EXPECT_TRUE(breaker->Acquire("gc").ok());
      return breaker;
    });
  }
}

// Two takers racing on a store without an atomic create-if-absent may both
// believe they won one generation; the record that landed last is the
// lease, and the other party finds that out before it deletes anything.
TEST_P(LeaseTest, ATakerWhoseWriteWasOverwrittenDeletesNothing) {
  for (Removal removal : kRemovals) {
    SCOPED_TRACE("removal " + std::to_string(static_cast<int>(removal)));
    ExpectALostLeaseDeletesNothing(GetParam(), removal, [](Storage& storage) {
      Result<std::vector<ObjectInfo>> leases =
          storage.List(format::LeasePrefix());
      EXPECT_TRUE(leases.ok() && leases->size() == 1);
      if (!leases.ok() || leases->size() != 1)
        return std::unique_ptr<RootLease>();
      format::LeaseRecord other =
          Record(LeaseHostName(), getpid(), NowMs() + 3600'000);
      other.job_id = "the-other-taker";
      EXPECT_TRUE(
          storage.PutString(leases->front().key, format::EncodeLease(other))
              .ok());
      return std::unique_ptr<RootLease>();
    });
  }
}

// Nothing to turn on: two jobs opened with the default options on one root
// do not both write.
TEST_P(LeaseTest, ByDefaultASecondWriterIsRefused) {
  EXPECT_EQ(Options().lease_seconds, 60);
  auto a = Open(Options());
  Options no_wait;
  no_wait.lease_wait_seconds = 0;
  auto b = Open(no_wait);
  ASSERT_TRUE(Save(*a, 1).ok());
  Status s = Save(*b, 2);
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(Mentions(s, "another party owns the root")) << s.ToString();
  // Both managers are this process's: said so, with advice that applies
  // (stopping "that process" would stop this one).
  EXPECT_TRUE(Mentions(s, "pid " + std::to_string(getpid()) + ")"))
      << s.ToString();
  EXPECT_TRUE(Mentions(s, "that pid is this process: another manager of it"))
      << s.ToString();
  EXPECT_TRUE(Mentions(s, "Close that manager first")) << s.ToString();
  EXPECT_FALSE(Mentions(s, "Stop that process")) << s.ToString();
  ExpectLoads(*b, 1, Model(1));
}

TEST_P(LeaseTest, TurnedOffNothingIsWrittenForIt) {
  Options o;
  o.lease_seconds = 0;  // ownership off: one writer is the caller's promise
  auto a = Open(o);
  auto b = Open(o);
  ASSERT_TRUE(Save(*a, 1).ok());
  ASSERT_TRUE(Save(*b, 2).ok());
  Result<std::unique_ptr<Storage>> storage = root_.Open();
  ASSERT_TRUE(storage.ok());
  Result<std::vector<ObjectInfo>> leases =
      (*storage)->List(format::LeasePrefix());
  ASSERT_TRUE(leases.ok());
  EXPECT_TRUE(leases->empty());
}

TEST(LeaseOptionsTest, NonsenseIsRefusedAtOpen) {
  for (auto [seconds, wait] :
       {std::pair{-1.0, -1.0},
        {0.5, -1.0},
        {60.0, -2.0},
        {60.0, -0.5},
        {1e301, 0.0},
        {60.0, 1e301},
        {std::numeric_limits<double>::infinity(), 0.0},
        {std::numeric_limits<double>::quiet_NaN(), 0.0},
        {60.0, std::numeric_limits<double>::quiet_NaN()}}) {
    Options o;
    o.lease_seconds = seconds;
    o.lease_wait_seconds = wait;
    testing::TestRoot root(Backend::kMemory, "lease-options");
    auto mgr = CheckpointManager::Open(root.url(), o);
    ASSERT_FALSE(mgr.ok()) << seconds << " " << wait;
    EXPECT_EQ(mgr.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(Mentions(mgr.status(), "lease_seconds"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, LeaseTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile),
                         testing::BackendTestName);

}  // namespace
}  // namespace ckpt
