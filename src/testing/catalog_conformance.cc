#include "testing/catalog_conformance.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "catalog/schema.h"
#include "catalog/sql_catalog.h"

namespace ckpt {

void PrintTo(const CatalogConformanceParams& params, std::ostream* os) {
  *os << params.name;
}

std::string CatalogConformanceTestName(
    const ::testing::TestParamInfo<CatalogConformanceParams>& info) {
  return info.param.name;
}

Result<std::string> CatalogConformanceTest::NewDatabase() const {
  return testing::NewCatalogDatabase(GetParam().database, dir_.path());
}

void CatalogConformanceTest::SetUp() {
  Result<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  url_ = *url;
  Result<std::unique_ptr<Catalog>> catalog = OpenCatalog(url_);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  ASSERT_NE(*catalog, nullptr);
  catalog_ = std::move(catalog).value();
}

namespace {

CatalogCheckpoint Checkpoint(std::string job, std::string root, int64_t step) {
  CatalogCheckpoint c;
  c.job_id = std::move(job);
  c.root = std::move(root);
  c.step = step;
  c.epoch = step / 10;
  c.scheme = "file";
  c.world_size = 2;
  c.hosts = {"node-a", "node-b"};
  c.bytes = 1000 + static_cast<uint64_t>(step);
  c.manifest_checksum =
      "0123456789abcdef0123456789abcd" + std::to_string(10 + step % 90);
  c.created_unix_ms = 1'700'000'000'000 + step * 1000;
  return c;
}

std::vector<int64_t> Steps(const std::vector<CatalogCheckpoint>& list) {
  std::vector<int64_t> out;
  for (const auto& c : list) out.push_back(c.step);
  return out;
}

// Every field but updated_unix_ms, which the catalog sets.
void ExpectSame(const CatalogCheckpoint& got, const CatalogCheckpoint& want) {
  EXPECT_EQ(got.job_id, want.job_id);
  EXPECT_EQ(got.root, want.root);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.scheme, want.scheme);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.hosts, want.hosts);
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(got.manifest_checksum, want.manifest_checksum);
  EXPECT_EQ(got.metrics, want.metrics);
  EXPECT_EQ(got.created_unix_ms, want.created_unix_ms);
  EXPECT_EQ(got.state, want.state);
  EXPECT_EQ(got.tier, want.tier);
}

TEST_P(CatalogConformanceTest, EmptyCatalogHasNothing) {
  auto jobs = catalog().Jobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_TRUE(jobs->empty());
  auto latest = catalog().Latest("job");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_FALSE(latest->has_value());
  auto list = catalog().List({});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_TRUE(list->empty());
  auto best = catalog().Best("job", "loss", MetricGoal::kMin);
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  EXPECT_FALSE(best->has_value());
  auto marked = catalog().MarkDeleted("file:///nowhere", 1);
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  EXPECT_FALSE(*marked);
}

TEST_P(CatalogConformanceTest, EveryFieldRoundTrips) {
  CatalogCheckpoint c = Checkpoint("job-é", "file:///data/run 42", 7);
  c.epoch = -1;  // not given
  c.world_size = 3;
  c.hosts = {"a", "b.example.org", "ç"};
  c.bytes = uint64_t{1} << 40;
  c.metrics = {{"loss", 0.1 + 0.2},
               {"acc", -1.0 / 3},
               {"tiny", 4.9e-324},
               {"huge", std::numeric_limits<double>::max()},
               {"zero", 0.0}};
  ASSERT_TRUE(catalog().Record(c).ok());
  auto latest = catalog().Latest("job-é");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  ExpectSame(**latest, c);
  EXPECT_GT((*latest)->updated_unix_ms, 0);

  // A second handle (another process) reads the same row.
  auto again = OpenCatalog(url_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto list = (*again)->List({.job_id = "job-é"});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  ExpectSame(list->front(), c);
}

TEST_P(CatalogConformanceTest, LatestIsTheHighestCommittedStepOfTheJob) {
  for (int64_t step : {3, 1, 2}) {
    ASSERT_TRUE(catalog().Record(Checkpoint("a", "file:///a", step)).ok());
  }
  ASSERT_TRUE(catalog().Record(Checkpoint("b", "file:///b", 9)).ok());
  auto latest = catalog().Latest("a");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 3);
  EXPECT_EQ((*latest)->root, "file:///a");

  auto marked = catalog().MarkDeleted("file:///a", 3);
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  EXPECT_TRUE(*marked);
  latest = catalog().Latest("a");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 2);
  EXPECT_FALSE(catalog().Latest("nobody")->has_value());
}

TEST_P(CatalogConformanceTest, RecordingAgainReplacesTheRow) {
  CatalogCheckpoint c = Checkpoint("job", "file:///r", 5);
  c.metrics = {{"loss", 1.5}, {"acc", 0.5}};
  ASSERT_TRUE(catalog().Record(c).ok());
  ASSERT_TRUE(catalog().MarkDeleted("file:///r", 5).ok());
  // The root was recreated: another commit of step 5.
  c.manifest_checksum = "ffffffffffffffffffffffffffffffff";
  c.metrics = {{"loss", 0.25}};
  c.hosts = {"solo"};
  c.world_size = 1;
  ASSERT_TRUE(catalog().Record(c).ok());
  auto list = catalog().List({.state = std::nullopt});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  ExpectSame(list->front(), c);  // committed again, old metric gone
}

TEST_P(CatalogConformanceTest, MarkDeletedOnlyMarksThatRootAndStep) {
  ASSERT_TRUE(catalog().Record(Checkpoint("j", "file:///one", 1)).ok());
  ASSERT_TRUE(catalog().Record(Checkpoint("j", "file:///one", 2)).ok());
  ASSERT_TRUE(catalog().Record(Checkpoint("k", "file:///two", 1)).ok());
  auto marked = catalog().MarkDeleted("file:///one", 1);
  ASSERT_TRUE(marked.ok() && *marked);
  marked = catalog().MarkDeleted("file:///one", 1);  // already deleted
  ASSERT_TRUE(marked.ok());
  EXPECT_FALSE(*marked);

  auto committed = catalog().List({});
  ASSERT_TRUE(committed.ok());
  ASSERT_EQ(committed->size(), 2u);  // oldest step first
  EXPECT_EQ(committed->at(0).root, "file:///two");
  EXPECT_EQ(committed->at(1).root, "file:///one");
  EXPECT_EQ(committed->at(1).step, 2);
  auto deleted = catalog().List({.state = CheckpointState::kDeleted});
  ASSERT_TRUE(deleted.ok());
  ASSERT_EQ(deleted->size(), 1u);
  EXPECT_EQ(deleted->front().state, CheckpointState::kDeleted);
  EXPECT_EQ(deleted->front().step, 1);
  EXPECT_EQ(deleted->front().root, "file:///one");
}

TEST_P(CatalogConformanceTest, ListFilters) {
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_TRUE(catalog().Record(Checkpoint("x", "file:///x", step)).ok());
  }
  ASSERT_TRUE(catalog().Record(Checkpoint("y", "file:///y", 4)).ok());
  ASSERT_TRUE(catalog().MarkDeleted("file:///x", 2).ok());

  auto steps = [&](const CatalogFilter& f) {
    auto list = catalog().List(f);
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    return list.ok() ? Steps(*list) : std::vector<int64_t>{-1};
  };
  EXPECT_EQ(steps({.job_id = "x"}), (std::vector<int64_t>{1, 3, 4, 5, 6}));
  EXPECT_EQ(steps({.job_id = "x", .state = std::nullopt}),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(steps({.job_id = "x", .state = CheckpointState::kDeleted}),
            (std::vector<int64_t>{2}));
  EXPECT_EQ(steps({.root = "file:///y"}), (std::vector<int64_t>{4}));
  EXPECT_EQ(steps({.job_id = "x", .min_step = 3, .max_step = 5}),
            (std::vector<int64_t>{3, 4, 5}));
  // A limit keeps the newest, still listed oldest first.
  EXPECT_EQ(steps({.job_id = "x", .limit = 2}), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(steps({}), (std::vector<int64_t>{1, 3, 4, 4, 5, 6}));
  EXPECT_TRUE(steps({.job_id = "x", .root = "file:///y"}).empty());
}

TEST_P(CatalogConformanceTest, BestByMetricMinAndMax) {
  const std::vector<std::pair<int64_t, double>> losses = {
      {1, 0.9}, {2, 0.3}, {3, 0.5}, {4, 0.3}, {5, 0.7}};
  for (auto [step, loss] : losses) {
    CatalogCheckpoint c = Checkpoint("job", "file:///j", step);
    c.metrics = {{"loss", loss}, {"acc", 1 - loss}};
    ASSERT_TRUE(catalog().Record(c).ok());
  }
  ASSERT_TRUE(catalog().Record(Checkpoint("job", "file:///j", 6)).ok());
  CatalogCheckpoint other = Checkpoint("other", "file:///o", 1);
  other.metrics = {{"loss", 0.0}};
  ASSERT_TRUE(catalog().Record(other).ok());

  auto best = catalog().Best("job", "loss", MetricGoal::kMin);
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  ASSERT_TRUE(best->has_value());
  EXPECT_EQ((*best)->step, 4);  // ties go to the newest step
  EXPECT_EQ((*best)->metrics.at("loss"), 0.3);
  best = catalog().Best("job", "loss", MetricGoal::kMax);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->step, 1);
  best = catalog().Best("job", "acc", MetricGoal::kMax);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->step, 4);
  // Ranked: every row with the metric, in Best's order (its first is
  // Best's), for the next best where the best is gone from storage.
  const auto ranked = [&](std::string_view metric, MetricGoal goal) {
    std::vector<int64_t> out;
    auto rows = catalog().Ranked("job", metric, goal);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    if (rows.ok()) {
      for (const CatalogCheckpoint& c : *rows) out.push_back(c.step);
    }
    return out;
  };
  EXPECT_EQ(ranked("loss", MetricGoal::kMin),
            (std::vector<int64_t>{4, 2, 3, 5, 1}));
  EXPECT_EQ(ranked("loss", MetricGoal::kMax),
            (std::vector<int64_t>{1, 5, 3, 4, 2}));
  EXPECT_TRUE(ranked("perplexity", MetricGoal::kMin).empty());

  // A deleted checkpoint is never the best.
  ASSERT_TRUE(catalog().MarkDeleted("file:///j", 4).ok());
  best = catalog().Best("job", "loss", MetricGoal::kMin);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->step, 2);
  EXPECT_EQ(ranked("loss", MetricGoal::kMin),
            (std::vector<int64_t>{2, 3, 5, 1}));

  best = catalog().Best("job", "perplexity", MetricGoal::kMin);
  ASSERT_TRUE(best.ok());
  EXPECT_FALSE(best->has_value());
}

TEST_P(CatalogConformanceTest, JobsAreSeenThroughTheirCheckpoints) {
  CatalogCheckpoint c = Checkpoint("train", "file:///old", 2);
  ASSERT_TRUE(catalog().Record(c).ok());
  c = Checkpoint("train", "file:///new", 5);
  ASSERT_TRUE(catalog().Record(c).ok());
  // An older checkpoint found later (a sync) does not move the job's root.
  c = Checkpoint("train", "file:///old", 1);
  ASSERT_TRUE(catalog().Record(c).ok());
  ASSERT_TRUE(catalog().Record(Checkpoint("eval", "file:///e", 3)).ok());

  auto jobs = catalog().Jobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  const CatalogJob& eval = jobs->at(0);
  const CatalogJob& train = jobs->at(1);
  EXPECT_EQ(eval.job_id, "eval");
  EXPECT_EQ(train.job_id, "train");
  EXPECT_EQ(train.root, "file:///new");
  EXPECT_EQ(train.first_seen_unix_ms, Checkpoint("", "", 1).created_unix_ms);
  EXPECT_EQ(train.last_seen_unix_ms, Checkpoint("", "", 5).created_unix_ms);
  EXPECT_EQ(train.committed, 3);
  EXPECT_EQ(train.latest_step, 5);

  ASSERT_TRUE(catalog().MarkDeleted("file:///e", 3).ok());
  jobs = catalog().Jobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->at(0).committed, 0);
  EXPECT_FALSE(jobs->at(0).latest_step.has_value());
}

TEST_P(CatalogConformanceTest, LocalTierRowsAreListedButNeverOfferedToResume) {
  // A tiered job: durable step 8, local steps 8 to 12 recorded later and
  // rooted at the local tier's URL.
  CatalogCheckpoint durable = Checkpoint("train", "file:///data/run", 8);
  durable.metrics = {{"loss", 0.5}};
  ASSERT_TRUE(catalog().Record(durable).ok());
  std::vector<CatalogCheckpoint> local;
  for (int64_t step : {8, 10, 12}) {
    CatalogCheckpoint c = Checkpoint("train", "file:///dev/shm/run", step);
    c.tier = CatalogTier::kLocal;
    c.metrics = {{"loss", 0.1}};
    ASSERT_TRUE(catalog().Record(c).ok());
    local.push_back(c);
  }
  auto latest = catalog().Latest("train");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  ExpectSame(**latest, durable);
  auto best = catalog().Best("train", "loss", MetricGoal::kMin);
  ASSERT_TRUE(best.ok() && best->has_value());
  ExpectSame(**best, durable);
  auto ranked = catalog().Ranked("train", "loss", MetricGoal::kMin);
  ASSERT_TRUE(ranked.ok()) << ranked.status().ToString();
  ASSERT_EQ(ranked->size(), 1u);
  ExpectSame(ranked->front(), durable);

  auto all = catalog().List({.job_id = "train"});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 4u);
  auto only_local = catalog().List({.tier = CatalogTier::kLocal});
  ASSERT_TRUE(only_local.ok());
  ASSERT_EQ(only_local->size(), 3u);
  for (size_t i = 0; i < 3; ++i) ExpectSame(only_local->at(i), local[i]);
  auto only_durable = catalog().List({.tier = CatalogTier::kDurable});
  ASSERT_TRUE(only_durable.ok());
  ASSERT_EQ(only_durable->size(), 1u);
  ExpectSame(only_durable->front(), durable);

  // The job's root stays the durable one; its counts are of durable rows.
  auto jobs = catalog().Jobs();
  ASSERT_TRUE(jobs.ok() && jobs->size() == 1u);
  EXPECT_EQ(jobs->front().root, "file:///data/run");
  EXPECT_EQ(jobs->front().committed, 1);
  EXPECT_EQ(jobs->front().latest_step, 8);
  EXPECT_EQ(jobs->front().last_seen_unix_ms, local.back().created_unix_ms);

  // Pruning the local tier marks its row; the durable row of the same step
  // (another root) stays.
  ASSERT_TRUE(*catalog().MarkDeleted("file:///dev/shm/run", 8));
  only_local = catalog().List({.tier = CatalogTier::kLocal});
  ASSERT_EQ(Steps(*only_local), (std::vector<int64_t>{10, 12}));
  EXPECT_EQ((*catalog().Latest("train"))->step, 8);

  // A job seen first through its local tier has no durable checkpoint.
  CatalogCheckpoint first = Checkpoint("fresh", "file:///dev/shm/f", 3);
  first.tier = CatalogTier::kLocal;
  ASSERT_TRUE(catalog().Record(first).ok());
  EXPECT_FALSE(catalog().Latest("fresh")->has_value());
  // Its first durable row, recorded late (a sync after an outage) with an
  // older time than the local one, still becomes the job's root: a local
  // URL is never where another machine looks for the job.
  CatalogCheckpoint late = Checkpoint("fresh", "file:///data/f", 2);
  late.created_unix_ms = first.created_unix_ms - 1000;
  ASSERT_TRUE(catalog().Record(late).ok());
  jobs = catalog().Jobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  for (const CatalogJob& j : *jobs) {
    if (j.job_id == "fresh") {
      EXPECT_EQ(j.root, "file:///data/f");
    }
  }
  // A newer local row does not take it back, nor an older durable row of
  // another root.
  first.step = 4;
  first.created_unix_ms += 5000;
  ASSERT_TRUE(catalog().Record(first).ok());
  CatalogCheckpoint older = Checkpoint("fresh", "file:///data/g", 1);
  older.created_unix_ms = late.created_unix_ms - 1000;
  ASSERT_TRUE(catalog().Record(older).ok());
  jobs = catalog().Jobs();
  ASSERT_TRUE(jobs.ok());
  for (const CatalogJob& j : *jobs) {
    if (j.job_id == "fresh") {
      EXPECT_EQ(j.root, "file:///data/f");
    }
  }
}

TEST_P(CatalogConformanceTest, AVersionOneCatalogMigratesWithItsRowsDurable) {
  // A database as a build of schema version 1 left it, with one row.
  Result<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  {
    auto conn = catalog::ConnectSql(*url);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    ASSERT_TRUE((*conn)->Exec(catalog::kCreateSchemaTable).ok());
    ASSERT_TRUE(
        (*conn)->Exec(catalog::Migrations((*conn)->dialect()).at(0)).ok());
    ASSERT_TRUE(
        (*conn)->Query("INSERT INTO ckpt_schema (version) VALUES (1)").ok());
    ASSERT_TRUE((*conn)
                    ->Query("INSERT INTO ckpt_jobs VALUES ('old', "
                            "'file:///old', 5, 5)")
                    .ok());
    ASSERT_TRUE((*conn)
                    ->Query("INSERT INTO ckpt_checkpoints (root, step, job_id, "
                            "scheme, world_size, hosts, bytes, "
                            "manifest_checksum, created_unix_ms, "
                            "updated_unix_ms, state) VALUES ('file:///old', 4, "
                            "'old', 'file', 1, '[]', 9, 'x', 5, 5, "
                            "'committed')")
                    .ok());
  }
  auto opened = OpenCatalog(*url);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto latest = (*opened)->Latest("old");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 4);
  EXPECT_EQ((*latest)->tier, CatalogTier::kDurable);
  auto conn = catalog::ConnectSql(*url);
  ASSERT_TRUE(conn.ok());
  auto rows = (*conn)->Query("SELECT version FROM ckpt_schema");
  ASSERT_TRUE(rows.ok() && rows->size() == 1u);
  EXPECT_EQ(*catalog::SqlInt(rows->at(0)[0], "version"),
            catalog::kSchemaVersion);
  // The new column's check holds in the migrated table too.
  EXPECT_FALSE(
      (*conn)->Query("UPDATE ckpt_checkpoints SET tier = 'elsewhere'").ok());
}

TEST_P(CatalogConformanceTest, ValuesNeverBecomeSql) {
  const std::string evil = "x'); DROP TABLE ckpt_checkpoints; --";
  CatalogCheckpoint c = Checkpoint(evil, "file:///it's \"quoted\"", 1);
  c.hosts = {evil};
  c.metrics = {{evil, 1.0}};
  c.scheme = "a'b";
  ASSERT_TRUE(catalog().Record(c).ok());
  auto latest = catalog().Latest(evil);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  ExpectSame(**latest, c);
  auto best = catalog().Best(evil, evil, MetricGoal::kMax);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->step, 1);
  auto list = catalog().List({.job_id = "' OR '1'='1"});
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  EXPECT_FALSE(catalog().Latest("' OR '1'='1")->has_value());
}

TEST_P(CatalogConformanceTest, InvalidRecordsAreRefusedWithTheCatalogNamed) {
  std::vector<CatalogCheckpoint> bad(5, Checkpoint("job", "file:///r", 1));
  bad[0].job_id = "";
  bad[1].root = "";
  bad[2].step = -1;
  bad[3].metrics = {{"loss", std::numeric_limits<double>::quiet_NaN()}};
  bad[4].job_id = std::string("nul\0byte", 8);
  for (const CatalogCheckpoint& c : bad) {
    Status s = catalog().Record(c);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(catalog().url()), std::string::npos)
        << s.ToString();
  }
  EXPECT_TRUE(catalog().List({.state = std::nullopt})->empty());
}

TEST_P(CatalogConformanceTest, OpenCreatesTheCurrentSchemaOnce) {
  auto conn = catalog::ConnectSql(url_);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto rows = (*conn)->Query("SELECT version FROM ckpt_schema");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(*catalog::SqlInt(rows->at(0)[0], "version"),
            catalog::kSchemaVersion);
  // Opening again changes nothing and keeps the rows.
  ASSERT_TRUE(catalog().Record(Checkpoint("j", "file:///r", 1)).ok());
  auto again = OpenCatalog(url_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->List({})->size(), 1u);
  rows = (*conn)->Query("SELECT version FROM ckpt_schema");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 1u);
}

TEST_P(CatalogConformanceTest, NewerSchemaIsRefusedAtOpen) {
  auto conn = catalog::ConnectSql(url_);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE((*conn)
                  ->Query("UPDATE ckpt_schema SET version = $1",
                          {int64_t{catalog::kSchemaVersion + 1}})
                  .ok());
  auto reopened = OpenCatalog(url_);
  ASSERT_FALSE(reopened.ok());
  const Status& s = reopened.status();
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("newer"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(catalog().url()), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(catalog::kSchemaVersion + 1)),
            std::string::npos)
      << s.ToString();
}

TEST_P(CatalogConformanceTest, ThreadsShareOneCatalog) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t step = 1; step <= 10; ++step) {
        Status s = catalog().Record(
            Checkpoint("threads", "file:///t" + std::to_string(t), step));
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(catalog().List({.job_id = "threads"})->size(), 40u);
}

// 8 processes open one new catalog at once (racing to create its schema)
// and each records its checkpoints, one transaction apiece; not one row may
// be lost.
TEST_P(CatalogConformanceTest, EightProcessesWritingAtOnceLoseNoRow) {
  constexpr int kProcesses = 8;
  constexpr int kRowsEach = 25;
  Result<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child: its own connection, and _exit, never the test's exit.
      auto mine = OpenCatalog(*url);
      if (!mine.ok()) {
        std::fprintf(stderr, "child %d: %s\n", p,
                     mine.status().ToString().c_str());
        _exit(1);
      }
      for (int64_t step = 1; step <= kRowsEach; ++step) {
        CatalogCheckpoint c =
            Checkpoint("shared", "file:///w" + std::to_string(p), step);
        c.metrics = {{"loss", 1.0 / static_cast<double>(step)}};
        Status s = (*mine)->Record(c);
        if (s.ok() && step % 5 == 0) {
          s = (*mine)->MarkDeleted(c.root, step).status();
        }
        if (!s.ok()) {
          std::fprintf(stderr, "child %d: %s\n", p, s.ToString().c_str());
          _exit(1);
        }
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a writer failed (its error is above)";
  }
  auto catalog = OpenCatalog(*url);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  auto all = (*catalog)->List({.job_id = "shared", .state = std::nullopt});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), size_t{kProcesses * kRowsEach});
  std::set<std::pair<std::string, int64_t>> distinct;
  size_t deleted = 0;
  for (const auto& c : *all) {
    distinct.insert({c.root, c.step});
    if (c.state == CheckpointState::kDeleted) ++deleted;
    EXPECT_EQ(c.metrics.size(), 1u);
  }
  EXPECT_EQ(distinct.size(), size_t{kProcesses * kRowsEach});
  EXPECT_EQ(deleted, size_t{kProcesses * kRowsEach / 5});
  auto jobs = (*catalog)->Jobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->front().committed, kProcesses * kRowsEach * 4 / 5);
}

}  // namespace
}  // namespace ckpt
