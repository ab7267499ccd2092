// The manager with a catalog: what a save records and when, what deletes
// mark, that a catalog failure never undoes a commit, and that SyncCatalog
// repairs a catalog from storage. Each case runs on SQLite and on a
// PostgreSQL server this binary starts.

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "catalog/sql_catalog.h"
#include "checkpoint/catalog_record.h"
#include "ckpt/catalog_sync.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/tiered.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/catalog_databases.h"
#include "testing/temp_dir.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::TestModel;

class CatalogManagerTest
    : public ::testing::TestWithParam<testing::CatalogDatabase> {
 protected:
  void SetUp() override {
    Result<std::string> url = testing::NewCatalogDatabase(GetParam(), dir_);
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    catalog_url_ = *url;
    auto catalog = OpenCatalog(catalog_url_);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    catalog_ = std::move(catalog).value();
  }

  std::unique_ptr<CheckpointManager> Open(Options options = {}) {
    if (!options.catalog) options.catalog = catalog_;
    options.job_id = "job";
    auto mgr = CheckpointManager::Open(root_, std::move(options));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  // Saves steps [first, last], each with a loss metric.
  void SaveSteps(CheckpointManager& mgr, int64_t first, int64_t last) {
    for (int64_t step = first; step <= last; ++step) {
      TestModel model(step, 256);
      auto saved =
          mgr.Save(step, model.MakeState(),
                   {.epoch = step - 1, .metrics = {{"loss", 1.0 / step}}});
      ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    }
  }

  std::vector<int64_t> CommittedSteps() {
    auto rows = catalog_->List({.job_id = "job"});
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    std::vector<int64_t> out;
    if (rows.ok()) {
      for (const auto& r : *rows) out.push_back(r.step);
    }
    return out;
  }

  // Runs SQL on the catalog's database behind its back.
  void RawSql(const std::string& sql, const std::vector<catalog::SqlValue>& p) {
    auto conn = catalog::ConnectSql(catalog_url_);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    auto done = (*conn)->Query(sql, p);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
  }

  const testing::TempDir temp_{"catalog-manager"};
  const std::string dir_ = temp_.string();
  const std::string root_ = "file://" + dir_ + "/root";
  std::string catalog_url_;
  std::shared_ptr<Catalog> catalog_;
};

INSTANTIATE_TEST_SUITE_P(Databases, CatalogManagerTest,
                         testing::AllCatalogDatabases(),
                         testing::CatalogDatabaseTestName);

TEST_P(CatalogManagerTest, EverySaveIsRecordedAfterItsCommit) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 3);
  auto latest = catalog_->Latest("job");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  const CatalogCheckpoint& row = **latest;
  EXPECT_EQ(row.step, 3);
  EXPECT_EQ(row.epoch, 2);
  EXPECT_EQ(row.root, root_);
  EXPECT_EQ(row.scheme, "file");
  EXPECT_EQ(row.state, CheckpointState::kCommitted);
  EXPECT_EQ(row.metrics, (std::map<std::string, double>{{"loss", 1.0 / 3}}));
  // The row describes exactly the committed manifest.
  auto info = mgr->Describe(3);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(row.bytes, info->info.bytes);
  EXPECT_EQ(row.world_size, info->info.world_size);
  EXPECT_EQ(row.hosts, info->info.hosts);
  EXPECT_EQ(row.created_unix_ms, info->info.created_unix_ms);
  auto manifest = mgr->storage().ReadAll(format::ManifestKey(3));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(row.manifest_checksum, ManifestChecksum(*manifest));
  EXPECT_EQ(row.manifest_checksum.size(), 32u);
  EXPECT_TRUE(CheckAgainstStorage(row).ok());
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{1, 2, 3}));
}

TEST_P(CatalogManagerTest, APlainPathRootIsRecordedAsAFileUrl) {
  Options options;
  options.catalog = catalog_;
  options.job_id = "plain";
  auto mgr = CheckpointManager::Open(dir_ + "/./plain/", options);
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
  TestModel model(1, 64);
  ASSERT_TRUE((*mgr)->Save(1, model.MakeState()).ok());
  auto latest = catalog_->Latest("plain");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->root, "file://" + dir_ + "/plain");
}

// Storage on which every manifest write fails: no save can commit.
class NoManifestStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    if (key.ends_with("MANIFEST.json")) return IOError("disk full");
    return StorageWrapper::Put(key, data, mode);
  }
};

TEST_P(CatalogManagerTest, NothingIsRecordedWithoutACommit) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 1);
  TestModel model(9, 64);
  // The step exists: the save fails before any commit.
  EXPECT_FALSE(mgr->Save(1, model.MakeState()).ok());
  // Skipped by min_seconds_between_saves.
  mgr.reset();  // one writer at a time: the job that saved step 1 ends
  auto throttled = Open({.min_seconds_between_saves = 3600});
  auto skipped = throttled->Save(2, model.MakeState());
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_TRUE(skipped->skipped);
  throttled.reset();
  // A manifest write that fails is no commit.
  auto storage = OpenStorage(root_);
  ASSERT_TRUE(storage.ok());
  Options options;
  options.job_id = "job";
  options.catalog = catalog_;
  auto failing = CheckpointManager::Open(
      std::make_unique<NoManifestStorage>(std::move(storage).value()), options);
  ASSERT_TRUE(failing.ok()) << failing.status().ToString();
  auto failed = (*failing)->Save(3, model.MakeState());
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("disk full"), std::string::npos)
      << failed.status().ToString();
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{1}));
}

TEST_P(CatalogManagerTest, RetentionAndDeleteMarkRowsDeleted) {
  auto mgr = Open({.retention = {.keep_last = 2}});
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 4);
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{3, 4}));
  ASSERT_TRUE(mgr->Delete(3).ok());
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{4}));
  auto deleted =
      catalog_->List({.job_id = "job", .state = CheckpointState::kDeleted});
  ASSERT_TRUE(deleted.ok());
  std::vector<int64_t> steps;
  for (const auto& r : *deleted) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
  // A dry run deletes nothing and marks nothing.
  auto report = mgr->GarbageCollect(
      {.dry_run = true, .retention = RetentionPolicy{.keep_last = 0}});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{4}));
}

// A catalog that fails every write, as a database that went away would.
class BrokenCatalog : public Catalog {
 public:
  const std::string& url() const override { return url_; }
  Status Record(const CatalogCheckpoint&) override { return Gone(); }
  Result<bool> MarkDeleted(std::string_view, int64_t) override {
    return Gone();
  }
  Result<std::optional<CatalogCheckpoint>> Latest(std::string_view) override {
    return Gone();
  }
  Result<std::vector<CatalogCheckpoint>> List(const CatalogFilter&) override {
    return Gone();
  }
  Result<std::optional<CatalogCheckpoint>> Best(std::string_view,
                                                std::string_view,
                                                MetricGoal) override {
    return Gone();
  }
  Result<std::vector<CatalogCheckpoint>> Ranked(std::string_view,
                                                std::string_view,
                                                MetricGoal) override {
    return Gone();
  }
  Result<std::vector<CatalogJob>> Jobs() override { return Gone(); }

 private:
  Status Gone() const {
    return UnavailableError("catalog " + url_ + ": the server went away");
  }
  std::string url_ = "postgresql://gone.example/ckpt";
};

TEST_P(CatalogManagerTest, ACatalogFailureAfterTheCommitIsOnlyAWarning) {
  auto mgr = Open({.retention = {.keep_last = 1},
                   .catalog = std::make_shared<BrokenCatalog>()});
  ASSERT_NE(mgr, nullptr);
  TestModel model(1, 256);
  ::testing::internal::CaptureStderr();
  auto first = mgr->Save(1, model.MakeState());
  auto second = mgr->Save(2, model.MakeState());  // retention deletes 1
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(log.find("step 2 is committed in " + root_), std::string::npos)
      << log;
  EXPECT_NE(log.find("the server went away"), std::string::npos) << log;
  EXPECT_NE(log.find("ckpt catalog sync " + root_), std::string::npos) << log;
  EXPECT_NE(log.find("step 1 is deleted from " + root_), std::string::npos)
      << log;
  auto latest = mgr->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, 2);

  // The real catalog never heard of step 2; a sync repairs that.
  EXPECT_TRUE(CommittedSteps().empty());
  auto report = SyncCatalog(*mgr, *catalog_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->added, (std::vector<int64_t>{2}));
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{2}));
}

// Another process that holds the catalog locked while a Hold() lives (or a
// minute passes): SQLite's write lock (BEGIN EXCLUSIVE), or PostgreSQL's
// lock on the tables every write needs. The process is forked when the
// locker is made, before the test opens a manager: forked while a
// manager's catalog thread is inside SQLite, a child inherits SQLite's
// in-process lock state of that moment and can never lock (the test then
// failed on a busy machine).
class CatalogLocker {
 public:
  explicit CatalogLocker(const std::string& url) : url_(url) {
    int to_child[2];
    int from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) {
      ADD_FAILURE() << "pipe failed";
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      close(to_child[1]);
      close(from_child[0]);
      Serve(url, to_child[0], from_child[1]);
      _exit(0);  // a lock still held goes with the process
    }
    close(to_child[0]);
    close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
  }
  ~CatalogLocker() {
    if (pid_ <= 0) return;
    close(to_child_);
    close(from_child_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  // Locks the catalog until the returned object goes.
  class [[nodiscard]] Held {
   public:
    explicit Held(CatalogLocker& locker) : locker_(locker) {
      EXPECT_EQ(locker_.Ask('L'), 1)
          << "the child could not lock " << locker_.url_;
    }
    ~Held() { EXPECT_EQ(locker_.Ask('U'), 1) << "unlock " << locker_.url_; }

   private:
    CatalogLocker& locker_;
  };
  Held Hold() { return Held(*this); }

 private:
  // The child: 'L' locks (a new connection), 'U' lets go; each answered
  // with 1 or 0; ends when the pipe closes (or after a minute idle).
  static void Serve(const std::string& url, int in, int out) {
    std::unique_ptr<catalog::SqlConnection> conn;
    while (true) {
      pollfd p{in, POLLIN, 0};
      char command = 0;
      if (poll(&p, 1, 60'000) != 1 || read(in, &command, 1) != 1) return;
      char ok = 0;
      if (command == 'L') {
        auto opened = catalog::ConnectSql(url);
        if (opened.ok()) {
          conn = std::move(opened).value();
          const bool sqlite = conn->dialect() == catalog::Dialect::kSqlite;
          ok = sqlite
                   ? conn->Exec("BEGIN EXCLUSIVE").ok()
                   : conn->Begin().ok() && conn->Exec(
                                                   "LOCK TABLE ckpt_jobs, "
                                                   "ckpt_checkpoints IN ACCESS "
                                                   "EXCLUSIVE MODE")
                                               .ok();
        }
      } else if (command == 'U') {
        conn.reset();  // a closed connection's transaction is rolled back
        ok = 1;
      }
      if (write(out, &ok, 1) != 1) return;
    }
  }
  char Ask(char command) {
    char answer = 0;
    if (write(to_child_, &command, 1) != 1 ||
        read(from_child_, &answer, 1) != 1) {
      return 0;
    }
    return answer;
  }

  std::string url_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

size_t Count(const std::string& text, std::string_view part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos;
       at = text.find(part, at + part.size())) {
    ++n;
  }
  return n;
}

TEST_P(CatalogManagerTest, ALockedCatalogHoldsASaveUpOneTimeoutAtMost) {
  CatalogLocker locker(catalog_url_);  // before any manager
  using Clock = std::chrono::steady_clock;
  auto mgr = Open({.retention = {.keep_last = 2}});
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 2);
  // The save's own time, with the catalog free (retention deletes step 1).
  Clock::time_point start = Clock::now();
  SaveSteps(*mgr, 3, 3);
  const Clock::duration own = Clock::now() - start;
  ASSERT_EQ(CommittedSteps(), (std::vector<int64_t>{2, 3}));
  // The catalog's timeout, plus the save's own time, plus a margin for a
  // busy machine.
  const Clock::duration bound =
      std::chrono::milliseconds(CatalogOptions{}.timeout_ms) + own +
      std::chrono::seconds(3);
  {
    auto held = locker.Hold();
    ::testing::internal::CaptureStderr();
    start = Clock::now();
    SaveSteps(*mgr, 4, 4);  // commits; retention deletes step 2
    const Clock::duration took = Clock::now() - start;
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_LT(took, bound) << "the save took "
                           << std::chrono::duration<double>(took).count()
                           << " s";
    // Warned once, naming everything the catalog missed.
    EXPECT_EQ(Count(log, "ckpt warning:"), 1u) << log;
    EXPECT_NE(log.find("step 4 is committed in " + root_), std::string::npos)
        << log;
    EXPECT_NE(log.find("step 2 is deleted from " + root_), std::string::npos)
        << log;
    EXPECT_NE(log.find("ckpt catalog sync " + root_), std::string::npos) << log;
  }
  auto latest = mgr->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, 4);
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{2, 3}));
  // The lock is gone: the next save writes what the catalog missed.
  SaveSteps(*mgr, 5, 5);  // retention deletes step 3
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{4, 5}));
  auto deleted =
      catalog_->List({.job_id = "job", .state = CheckpointState::kDeleted});
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  std::vector<int64_t> steps;
  for (const auto& r : *deleted) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));

  // Or `ckpt catalog sync` does.
  {
    auto held = locker.Hold();
    start = Clock::now();
    SaveSteps(*mgr, 6, 6);  // retention deletes step 4
    EXPECT_LT(Clock::now() - start, bound);
  }
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{4, 5}));
  auto report = SyncCatalog(*mgr, *catalog_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->added, (std::vector<int64_t>{6}));
  EXPECT_EQ(report->marked_deleted, (std::vector<int64_t>{4}));
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{5, 6}));
}

// The catalog's timeout in the tests below: short, so that a save that
// waits for it once is told apart from one that waits for it per call.
constexpr int kShortTimeoutMs = 1000;

std::shared_ptr<Catalog> ShortTimeoutCatalog(const std::string& url) {
  auto catalog = OpenCatalog(url, {.timeout_ms = kShortTimeoutMs});
  EXPECT_TRUE(catalog.ok()) << catalog.status().ToString();
  return catalog.ok() ? std::shared_ptr<Catalog>(std::move(*catalog)) : nullptr;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// A tiered save records a local row, marks the pruned local step deleted
// and records the durable row: with the catalog locked it waits for it
// once, not once per call, and warns once.
TEST_P(CatalogManagerTest, ALockedCatalogHoldsATieredSaveUpOneTimeoutAtMost) {
  CatalogLocker locker(catalog_url_);  // before any manager
  auto mgr =
      Open({.lease_seconds = 0, .catalog = ShortTimeoutCatalog(catalog_url_)});
  ASSERT_NE(mgr, nullptr);
  TierOptions t;
  t.local_url = "mem://catalog-tiered-" + std::to_string(getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name();
  t.local_keep = 1;  // each local save prunes (and marks) the one before
  t.replicas = 0;
  auto tiers = TieredManager::Open(*mgr, t);
  ASSERT_TRUE(tiers.ok()) << tiers.status().ToString();
  TestModel model(1, 256);
  auto save = [&](int64_t step) {
    auto r = (*tiers)->Save(step, model.MakeState(), {.durable = true});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->local && r->durable) << r->local_error;
  };
  auto start = std::chrono::steady_clock::now();
  save(1);
  const double own = SecondsSince(start);
  {
    auto held = locker.Hold();
    ::testing::internal::CaptureStderr();
    start = std::chrono::steady_clock::now();
    save(2);
    const double took = SecondsSince(start);
    const std::string log = ::testing::internal::GetCapturedStderr();
    // One timeout, the save's own time, and a margin below a second
    // timeout.
    EXPECT_LT(took, 2 * kShortTimeoutMs / 1000.0 + own)
        << "the save took " << took << " s";
    EXPECT_EQ(Count(log, "ckpt warning:"), 1u) << log;
    EXPECT_NE(log.find("local step 2 is committed"), std::string::npos) << log;
    EXPECT_NE(log.find("step 2 is committed in " + root_), std::string::npos)
        << log;
  }
  // Free again: the next save brings the durable rows up to date.
  save(3);
  auto steps_of = [&](CatalogTier tier, std::optional<CheckpointState> state) {
    auto rows = catalog_->List({.job_id = "job", .state = state, .tier = tier});
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    std::vector<int64_t> steps;
    if (rows.ok()) {
      for (const CatalogCheckpoint& r : *rows) steps.push_back(r.step);
    }
    return steps;
  };
  EXPECT_EQ(steps_of(CatalogTier::kDurable, CheckpointState::kCommitted),
            (std::vector<int64_t>{1, 2, 3}));
  // And the local rows the locked catalog missed (step 2 recorded, step 1
  // pruned): no sync can read node memory, so the recorder made them
  // again. Only step 3 is still in node memory.
  EXPECT_EQ(steps_of(CatalogTier::kLocal, CheckpointState::kCommitted),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(steps_of(CatalogTier::kLocal, CheckpointState::kDeleted),
            (std::vector<int64_t>{1, 2}));
}

// An asynchronous save records in the catalog off the caller's path: with
// the catalog locked, neither it nor the next call waits for the catalog,
// and the rows are written once the catalog is free again.
TEST_P(CatalogManagerTest, ALockedCatalogNeverHoldsUpTheCallAfterASaveAsync) {
  CatalogLocker locker(catalog_url_);  // before any manager
  auto mgr = Open({.catalog = ShortTimeoutCatalog(catalog_url_)});
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 1);
  TestModel model(2, 256);
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(mgr->SaveAsync(2, model.MakeState()).Wait().ok());
  const double own = SecondsSince(start);
  // Step 2's row lands after its handle is done: waited for, so that the
  // lock below holds up only the saves made under it.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (CommittedSteps() != std::vector<int64_t>{1, 2} &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(CommittedSteps(), (std::vector<int64_t>{1, 2}));
  {
    auto held = locker.Hold();
    start = std::chrono::steady_clock::now();
    SaveHandle third = mgr->SaveAsync(3, model.MakeState());
    ASSERT_TRUE(third.Wait().ok());
    // The next call waits for the save in flight, not for its catalog.
    SaveHandle fourth = mgr->SaveAsync(4, model.MakeState());
    ASSERT_TRUE(fourth.Wait().ok());
    auto listed = mgr->List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    const double took = SecondsSince(start);
    EXPECT_LT(took, kShortTimeoutMs / 1000.0 / 2 + 2 * own)
        << "two saves and a listing took " << took << " s";
  }
  SaveSteps(*mgr, 5, 5);
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST_P(CatalogManagerTest, AForcedDeleteRecordsTheDependantsItRewrites) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  TestModel model(1, 256);
  ASSERT_TRUE(mgr->Save(1, model.MakeState()).ok());
  // Unchanged: steps 2 and 3 reference step 1's bytes.
  for (int64_t step : {2, 3}) {
    auto saved = mgr->Save(step, model.MakeState(), {.incremental = true});
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    ASSERT_FALSE(saved->info.depends_on.empty());
  }
  ASSERT_TRUE(mgr->Delete(1, DeleteOptions{.rewrite_dependants = true}).ok());
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{2, 3}));
  auto rows = catalog_->List({.job_id = "job"});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  for (const CatalogCheckpoint& row : *rows) {
    // The row is the rewritten manifest's: `ckpt catalog latest` takes it.
    Status check = CheckAgainstStorage(row);
    EXPECT_TRUE(check.ok()) << check.ToString();
    auto described = mgr->Describe(row.step);
    ASSERT_TRUE(described.ok()) << described.status().ToString();
    EXPECT_EQ(row.bytes, described->info.bytes) << "step " << row.step;
  }
  auto latest = catalog_->Latest("job");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 3);
  EXPECT_TRUE(CheckAgainstStorage(**latest).ok());
}

// A process killed between its commit and the commit's row (or between a
// delete and its mark) leaves the catalog behind with no failure for
// anyone to remember: the next manager's first save finds the catalog's
// steps of the root unlike storage's and syncs them. Its later saves record
// one row each again.
TEST_P(CatalogManagerTest, TheFirstSaveAfterAKillBringsTheCatalogUpToDate) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 3);
  ASSERT_TRUE(mgr->Delete(1).ok());
  mgr.reset();
  // What the killed process never told the catalog: step 3 committed, step
  // 1 deleted.
  RawSql("DELETE FROM ckpt_checkpoints WHERE root = $1 AND step = 3", {root_});
  RawSql(
      "UPDATE ckpt_checkpoints SET state = 'committed' WHERE root = $1 AND "
      "step = 1",
      {root_});
  ASSERT_EQ(CommittedSteps(), (std::vector<int64_t>{1, 2}));

  mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 4, 4);
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{2, 3, 4}));
  // In step again: the next save records its row alone.
  RawSql("DELETE FROM ckpt_checkpoints WHERE root = $1 AND step = 2", {root_});
  SaveSteps(*mgr, 5, 5);
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{3, 4, 5}));
}

TEST_P(CatalogManagerTest, SyncRestoresRowsDeletedByHand) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 4);
  auto before = catalog_->List({.job_id = "job"});
  ASSERT_TRUE(before.ok());
  RawSql("DELETE FROM ckpt_checkpoints WHERE root = $1 AND step IN (2, 3)",
         {root_});
  // And a row that no longer matches its manifest (another commit).
  RawSql("UPDATE ckpt_checkpoints SET manifest_checksum = $1 WHERE step = 4",
         {std::string(32, '0')});
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{1, 4}));

  auto report = SyncCatalog(*mgr, *catalog_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->root, root_);
  EXPECT_EQ(report->added, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(report->updated, (std::vector<int64_t>{4}));
  EXPECT_TRUE(report->marked_deleted.empty());
  EXPECT_EQ(report->unchanged, 1u);

  auto after = catalog_->List({.job_id = "job"});
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), before->size());
  for (size_t i = 0; i < after->size(); ++i) {
    const auto& a = after->at(i);
    const auto& b = before->at(i);
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.manifest_checksum, b.manifest_checksum);
    EXPECT_EQ(a.metrics, b.metrics);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.hosts, b.hosts);
    EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
  }
  // Again: nothing left to do.
  report = SyncCatalog(*mgr, *catalog_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->added.empty() && report->updated.empty() &&
              report->marked_deleted.empty());
  EXPECT_EQ(report->unchanged, 4u);
}

TEST_P(CatalogManagerTest, SyncMarksRowsWhoseCheckpointsAreGone) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 4);
  // Removed behind ckpt's back, and a manifest damaged.
  fs::remove_all(dir_ + "/root/step-000000000002");
  fs::remove_all(dir_ + "/root/step-000000000004");
  fs::resize_file(dir_ + "/root/step-000000000003/MANIFEST.json", 10);
  auto report = SyncCatalog(*mgr, *catalog_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->marked_deleted, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(report->added.empty());
  EXPECT_EQ(CommittedSteps(), (std::vector<int64_t>{1}));
  auto latest = catalog_->Latest("job");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 1);
}

TEST_P(CatalogManagerTest, ARowNeverMakesALoadTrustACheckpoint) {
  auto mgr = Open();
  ASSERT_NE(mgr, nullptr);
  SaveSteps(*mgr, 1, 2);
  // A row for a step that was never committed on storage.
  auto real = catalog_->Latest("job");
  ASSERT_TRUE(real.ok() && real->has_value());
  CatalogCheckpoint ghost = **real;
  ghost.step = 9;
  ASSERT_TRUE(catalog_->Record(ghost).ok());
  auto latest = mgr->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, 2);  // storage says so
  TestModel loaded(0, 256);
  State state = loaded.MakeState();
  auto info = mgr->Load(std::nullopt, state);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->step, 2);
  EXPECT_EQ(mgr->Load(9, state).status().code(), ErrorCode::kNotFound);

  Status ghost_check = CheckAgainstStorage(ghost);
  EXPECT_EQ(ghost_check.code(), ErrorCode::kNotFound) << ghost_check.ToString();
  EXPECT_NE(ghost_check.message().find("ckpt catalog sync " + root_),
            std::string::npos)
      << ghost_check.ToString();
  // A damaged manifest, and a row of another commit, are caught too.
  CatalogCheckpoint other = **real;
  other.manifest_checksum = std::string(32, 'f');
  EXPECT_EQ(CheckAgainstStorage(other).code(), ErrorCode::kFailedPrecondition);
  fs::resize_file(dir_ + "/root/step-000000000002/MANIFEST.json", 10);
  EXPECT_EQ(CheckAgainstStorage(**real).code(), ErrorCode::kDataLoss);
}

}  // namespace
}  // namespace ckpt
