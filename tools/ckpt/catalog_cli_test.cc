// `ckpt catalog` as a scheduler and a person use it, on SQLite and on a
// PostgreSQL server this binary starts: jobs killed after each of their
// checkpoints are resumed from exactly that checkpoint by asking
// `ckpt catalog latest`, and `ckpt catalog sync` repairs a catalog.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catalog/sql_catalog.h"
#include "catalog/sqlite/sqlite_connection.h"
#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/tiered.h"
#include "gtest/gtest.h"
#include "testing/catalog_databases.h"
#include "testing/files.h"
#include "testing/postgres_server.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Contains;
using testing::RunResult;
using testing::TestModel;

class CatalogCliTest
    : public ::testing::TestWithParam<testing::CatalogDatabase> {
 protected:
  void SetUp() override {
    auto url = testing::NewCatalogDatabase(GetParam(), dir_);
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    catalog_url_ = *url;
    // Commands run without --catalog must not touch the user's catalog.
    setenv("CKPT_CATALOG", catalog_url_.c_str(), 1);
  }
  void TearDown() override { unsetenv("CKPT_CATALOG"); }

  std::string Root(const std::string& name) const {
    return "file://" + dir_ + "/" + name;
  }

  RunResult Ckpt(const std::vector<std::string>& args) {
    return testing::RunProgram(CKPT_CLI_PATH, args, dir_);
  }

  // `ckpt catalog ARGS... --catalog URL`.
  RunResult Catalog(std::vector<std::string> args) {
    args.insert(args.begin(), "catalog");
    args.push_back("--catalog");
    args.push_back(catalog_url_);
    return Ckpt(args);
  }

  std::unique_ptr<CheckpointManager> Open(const std::string& root,
                                          const std::string& job,
                                          Options options = {}) {
    auto catalog = OpenCatalog(catalog_url_);
    EXPECT_TRUE(catalog.ok()) << catalog.status().ToString();
    if (!catalog.ok()) return nullptr;
    options.job_id = job;
    options.catalog = std::move(catalog).value();
    auto mgr = CheckpointManager::Open(root, std::move(options));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  void Save(CheckpointManager& mgr, int64_t step, double loss) {
    TestModel model(step, 256);
    auto saved = mgr.Save(step, model.MakeState(),
                          {.epoch = step - 1, .metrics = {{"loss", loss}}});
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  }

  const testing::TempDir temp_{"catalog-cli"};
  const std::string dir_ = temp_.string();
  std::string catalog_url_;
};

INSTANTIATE_TEST_SUITE_P(Databases, CatalogCliTest,
                         testing::AllCatalogDatabases(),
                         testing::CatalogDatabaseTestName);

// The model a job holds after its step `step`.
TestModel ModelAt(int64_t job, int64_t step) {
  return TestModel(static_cast<uint64_t>(job * 1000 + step), 512);
}

TEST_P(CatalogCliTest, AKilledJobResumesFromExactlyItsLastCheckpoint) {
  constexpr int64_t kSteps = 4;
  for (int64_t k = 1; k <= kSteps; ++k) {
    const std::string job = "train-" + std::to_string(k);
    const std::string root = Root(job);
    std::fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The job: saves after every step, and is killed after step k.
      auto catalog = OpenCatalog(catalog_url_);
      if (!catalog.ok() || *catalog == nullptr) _exit(3);
      Options options;
      options.job_id = job;
      options.catalog = std::move(catalog).value();
      auto mgr = CheckpointManager::Open(root, options);
      if (!mgr.ok()) _exit(4);
      for (int64_t step = 1; step <= kSteps; ++step) {
        TestModel model = ModelAt(k, step);
        if (!(*mgr)->Save(step, model.MakeState(), {.epoch = step - 1}).ok()) {
          _exit(5);
        }
        if (step == k) raise(SIGKILL);
      }
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "job " << job << " ended with status " << status;

    // The scheduler asks the catalog where to resume...
    RunResult r = Catalog({"latest", job});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, root + "\t" + std::to_string(k) + "\n");
    r = Catalog({"latest", job, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json row = json::parse(r.out);
    ASSERT_EQ(row["root"], root);
    ASSERT_EQ(row["step"], k);

    // ...and the job resumes from exactly that checkpoint.
    auto mgr = Open(row["root"].get<std::string>(), job);
    ASSERT_NE(mgr, nullptr);
    TestModel resumed(0, 512);
    State state = resumed.MakeState();
    auto loaded = mgr->Load(row["step"].get<int64_t>(), state);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->step, k);
    EXPECT_EQ(loaded->epoch, k - 1);
    const TestModel expected = ModelAt(k, k);
    EXPECT_EQ(resumed.weights, expected.weights) << "after step " << k;
    EXPECT_EQ(resumed.moments, expected.moments);
    EXPECT_EQ(resumed.counters, expected.counters);
    // It goes on, and the catalog follows.
    TestModel next = ModelAt(k, k + 1);
    ASSERT_TRUE(mgr->Save(k + 1, next.MakeState()).ok());
    r = Catalog({"latest", job});
    EXPECT_EQ(r.out, root + "\t" + std::to_string(k + 1) + "\n") << r.err;
  }
}

TEST_P(CatalogCliTest, SyncRepairsRowsDeletedByHandAndMarksRemovedOnes) {
  const std::string root = Root("run");
  auto mgr = Open(root, "run");
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 4; ++step) Save(*mgr, step, 1.0 / step);
  {
    // Rows deleted by hand...
    auto conn = catalog::ConnectSql(catalog_url_);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    ASSERT_TRUE((*conn)
                    ->Query("DELETE FROM ckpt_checkpoints WHERE root = $1 AND "
                            "step IN (1, 3)",
                            {root})
                    .ok());
  }
  // ...and a checkpoint removed from storage behind ckpt's back.
  fs::remove_all(dir_ + "/run/step-000000000004");
  RunResult r = Catalog({"latest", "run", "--no-check"});
  EXPECT_EQ(r.out, root + "\t4\n");  // the stale row

  r = Catalog({"sync", root, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(r.out);
  EXPECT_EQ(report["root"], root);
  EXPECT_EQ(report["added"], json({1, 3}));
  EXPECT_EQ(report["updated"], json::array());
  EXPECT_EQ(report["marked_deleted"], json({4}));
  EXPECT_EQ(report["unchanged"], 1);

  r = Catalog({"list", "run", "--all", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json rows = json::parse(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i]["step"], i + 1);
    EXPECT_EQ(rows[i]["state"], i == 3 ? "deleted" : "committed") << r.out;
    EXPECT_EQ(rows[i]["job_id"], "run");
  }
  EXPECT_EQ(rows[0]["metrics"]["loss"], 1.0);
  EXPECT_EQ(rows[2]["metrics"]["loss"], 1.0 / 3);
  r = Catalog({"latest", "run"});
  EXPECT_EQ(r.out, root + "\t3\n") << r.err;

  // Once repaired, a sync finds nothing to do.
  r = Catalog({"sync", root});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            root + ": 0 added, 0 updated, 0 marked deleted, 3 unchanged\n");
}

TEST_P(CatalogCliTest, LatestSkipsARowWhoseCheckpointIsGone) {
  const std::string root = Root("gone");
  auto mgr = Open(root, "gone");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.5);
  Save(*mgr, 2, 0.4);
  fs::remove_all(dir_ + "/gone/step-000000000002");
  RunResult r = Catalog({"latest", "gone"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, root + "\t1\n");
  EXPECT_TRUE(Contains(r.err, "skipping step 2"));
  EXPECT_TRUE(Contains(r.err, "ckpt catalog sync " + root));
  fs::remove_all(dir_ + "/gone/step-000000000001");
  r = Catalog({"latest", "gone"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "2 rows did not check out"));
}

// One row that does not check out is said as one.
TEST_P(CatalogCliTest, OneRowThatDidNotCheckOutIsSaidAsOne) {
  auto mgr = Open(Root("one"), "one");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.5);
  fs::remove_all(dir_ + "/one/step-000000000001");
  for (const std::vector<std::string>& query :
       {std::vector<std::string>{"latest", "one"},
        {"best", "one", "--metric", "loss"}}) {
    RunResult r = Catalog(query);
    EXPECT_EQ(r.exit_code, 1) << query[0];
    EXPECT_TRUE(Contains(r.err, "(1 row did not check out against storage)"))
        << r.err;
  }
}

TEST_P(CatalogCliTest, JobsListAndBest) {
  auto a = Open(Root("a"), "alpha");
  auto b = Open(Root("b"), "beta");
  ASSERT_TRUE(a && b);
  Save(*a, 1, 0.9);
  Save(*a, 2, 0.2);
  Save(*a, 3, 0.5);
  Save(*b, 10, 0.1);

  RunResult r = Catalog({"jobs"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "JOB"));
  EXPECT_TRUE(Contains(r.out, "alpha"));
  EXPECT_TRUE(Contains(r.out, Root("b")));
  r = Catalog({"jobs", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json jobs = json::parse(r.out);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]["job_id"], "alpha");
  EXPECT_EQ(jobs[0]["committed"], 3);
  EXPECT_EQ(jobs[0]["latest_step"], 3);
  EXPECT_EQ(jobs[1]["root"], Root("b"));

  r = Catalog({"list", "alpha"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "loss=0.2"));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
  r = Catalog({"list", "--json", "--limit", "1", "alpha"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 1u);
  EXPECT_EQ(json::parse(r.out)[0]["step"], 3);
  r = Catalog({"list", "--root", dir_ + "/b"});  // a plain path works too
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "beta"));
  EXPECT_FALSE(Contains(r.out, "alpha"));

  r = Catalog({"best", "alpha", "--metric", "loss", "--min"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Root("a") + "\t2\t0.2\n");
  r = Catalog({"best", "alpha", "--metric", "loss", "--max", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["step"], 1);
  r = Catalog({"best", "alpha", "--metric", "accuracy"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "metric \"accuracy\""));
}

TEST_P(CatalogCliTest, ATieredJobsLocalStepsAreListedAndNeverResumedFrom) {
  const std::string durable_root = Root("durable");
  const std::string local_root = Root("local");
  {
    auto durable = Open(durable_root, "tiered");
    ASSERT_NE(durable, nullptr);
    auto tiers = TieredManager::Open(*durable, {.local_url = local_root,
                                                .local_every_steps = 1,
                                                .durable_every_steps = 2,
                                                .replicas = 0});
    ASSERT_TRUE(tiers.ok()) << tiers.status().ToString();
    for (int64_t step = 1; step <= 3; ++step) {
      TestModel model(step, 256);
      State state = model.MakeState();
      ASSERT_TRUE((*tiers)->Save(step, state).ok());
    }
  }
  RunResult r = Catalog({"list", "tiered", "--tier", "local"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "TIER")) << r.out;
  EXPECT_TRUE(Contains(r.out, local_root)) << r.out;
  EXPECT_FALSE(Contains(r.out, durable_root + "\n")) << r.out;
  r = Catalog({"list", "tiered", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const json& row : json::parse(r.out)) {
    rows.push_back(
        {row["step"].get<int64_t>(), row["tier"].get<std::string>()});
  }
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<std::pair<int64_t, std::string>>{
                      {2, "durable"}, {2, "local"}, {3, "local"}}))
      << r.out;
  // A scheduler resumes from the durable tier: step 2, not local step 3.
  r = Catalog({"latest", "tiered"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, durable_root + "\t2\n");
  r = Catalog({"jobs", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)[0]["root"], durable_root);
  EXPECT_EQ(json::parse(r.out)[0]["latest_step"], 2);
  // A sync of the local tier is refused and changes nothing.
  r = Catalog({"sync", local_root});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "is a local tier")) << r.err;
  r = Catalog({"list", "tiered", "--tier", "local", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 2u) << r.out;
  r = Catalog({"list", "--tier", "memory"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "--tier")) << r.err;
}

TEST_P(CatalogCliTest, GcAndImportKeepTheCatalogCurrent) {
  const std::string root = Root("kept");
  auto mgr = Open(root, "kept");
  ASSERT_NE(mgr, nullptr);
  for (int64_t step = 1; step <= 3; ++step) Save(*mgr, step, 1.0);
  // The job ends (a running one owns the root: gc beside it is refused).
  mgr.reset();
  // The default catalog ($CKPT_CATALOG here) records what gc deletes...
  RunResult r = Ckpt({"gc", root, "--keep-last", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Catalog({"list", "kept", "--deleted", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 2u) << r.out;
  // ...and what import commits.
  const std::string file = dir_ + "/model.safetensors";
  r = Ckpt({"export", root, file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string other = Root("imported");
  r = Ckpt({"import", file, other, "--step", "7", "--catalog", catalog_url_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Catalog({"latest", other});  // the job id defaults to the root
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, other + "\t7\n");
}

// A row whose storage cannot be reached says nothing of the row: latest and
// best stop with Unavailable (a scheduler must tell an outage from a job
// with no checkpoint), list marks the row "unchecked", not "stale".
TEST_P(CatalogCliTest, AnUnreachableStoreIsAnErrorNotAStaleRow) {
  {
    auto catalog = OpenCatalog(catalog_url_);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    CatalogCheckpoint row;
    row.job_id = "far";
    row.root = "s3://ckpt-unreachable/far";
    row.step = 5;
    row.state = CheckpointState::kCommitted;
    row.tier = CatalogTier::kDurable;
    row.metrics = {{"loss", 0.5}};
    row.manifest_checksum = std::string(32, '0');
    ASSERT_TRUE((*catalog)->Record(row).ok());
  }
  // A port nothing listens on, one try: refused at once.
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
  setenv("AWS_MAX_ATTEMPTS", "1", 1);
  RunResult latest = Catalog({"latest", "far"});
  RunResult best = Catalog({"best", "far", "--metric", "loss", "--min"});
  RunResult list = Catalog({"list", "far"});
  unsetenv("AWS_ENDPOINT_URL");
  unsetenv("AWS_MAX_ATTEMPTS");
  for (const RunResult& r : {latest, best}) {
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_TRUE(Contains(r.err, "Unavailable")) << r.err;
    EXPECT_TRUE(Contains(r.err, "nothing is known to be stale")) << r.err;
    EXPECT_FALSE(Contains(r.err, "skipping")) << r.err;
    EXPECT_FALSE(Contains(r.err, "NotFound")) << r.err;
  }
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(Contains(list.out, "unchecked")) << list.out;
  EXPECT_FALSE(Contains(list.out, "stale")) << list.out;
}

// A row whose checkpoint is gone from storage is skipped by best for the
// next best, as latest skips it, and list marks it stale.
TEST_P(CatalogCliTest, BestAndListSkipOrMarkAStaleRow) {
  auto mgr = Open(Root("a"), "alpha");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.9);
  Save(*mgr, 2, 0.2);
  Save(*mgr, 3, 0.5);
  fs::remove_all(dir_ + "/a/step-000000000002");

  RunResult r = Catalog({"best", "alpha", "--metric", "loss", "--min"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Root("a") + "\t3\t0.5\n");
  EXPECT_TRUE(Contains(r.err, "skipping step 2")) << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt catalog sync " + Root("a"))) << r.err;
  r = Catalog({"best", "alpha", "--metric", "loss", "--no-check"});
  EXPECT_EQ(r.out, Root("a") + "\t2\t0.2\n");  // the stale row

  r = Catalog({"list", "alpha"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "stale")) << r.out;
  EXPECT_TRUE(Contains(r.err, "step 2 of job alpha is stale")) << r.err;
  r = Catalog({"list", "alpha", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json rows = json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_FALSE(rows[0].contains("stale"));
  EXPECT_TRUE(rows[1].contains("stale")) << r.out;
  EXPECT_FALSE(rows[2].contains("stale"));

  fs::remove_all(dir_ + "/a");
  r = Catalog({"best", "alpha", "--metric", "loss"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "3 rows did not check out")) << r.err;
}

// A step whose data object was truncated or grown (its manifest intact) is
// one a resume skips (`ckpt ls` marks it incomplete): latest and best skip
// it too, saying why, rather than name a step that cannot be loaded.
TEST_P(CatalogCliTest, LatestAndBestSkipAStepAResumeSkips) {
  auto mgr = Open(Root("inc"), "incjob");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.9);
  Save(*mgr, 2, 0.2);
  mgr.reset();
  bool grown = false;
  for (const auto& e :
       fs::directory_iterator(dir_ + "/inc/step-000000000002")) {
    if (e.path().extension() == ".safetensors") {
      std::ofstream(e.path(), std::ios::app) << "XXXX";
      grown = true;
    }
  }
  ASSERT_TRUE(grown);
  RunResult r = Catalog({"latest", "incjob"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Root("inc") + "\t1\n");
  EXPECT_TRUE(Contains(r.err, "skipping step 2")) << r.err;
  EXPECT_TRUE(Contains(r.err, "incomplete")) << r.err;
  EXPECT_TRUE(Contains(r.err, "bytes but the manifest records")) << r.err;
  r = Catalog({"best", "incjob", "--metric", "loss"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Root("inc") + "\t1\t0.9\n");
  // What a resume of the root loads is the step latest names.
  auto reopened = Open(Root("inc"), "incjob");
  ASSERT_NE(reopened, nullptr);
  auto latest = reopened->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, std::optional<int64_t>(1));
}

// A root deleted altogether: sync marks its rows deleted, as its help says.
TEST_P(CatalogCliTest, SyncOfADeletedRootMarksItsRowsDeleted) {
  const std::string root = Root("doomed");
  auto mgr = Open(root, "doomed");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.5);
  Save(*mgr, 2, 0.4);
  mgr.reset();
  fs::remove_all(dir_ + "/doomed");
  RunResult r = Catalog({"sync", root, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(r.out);
  EXPECT_EQ(report["root"], root);
  EXPECT_EQ(report["marked_deleted"], json({1, 2}));
  r = Catalog({"latest", "doomed"});
  EXPECT_EQ(r.exit_code, 1);
  r = Catalog({"list", "doomed", "--deleted", "--json"});
  EXPECT_EQ(json::parse(r.out).size(), 2u) << r.out;
  // A root the catalog never heard of is still an error.
  r = Catalog({"sync", Root("never-was")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "never-was")) << r.err;
}

// However the root's path is spelled, a job named by it is one job, under
// the root's absolute file:// URL.
TEST_P(CatalogCliTest, AJobIdGivenAsAPathIsTheRootsUrl) {
  fs::create_directories(dir_ + "/sub");
  // The default job id: the root, given as a path with a detour.
  auto mgr = Open(dir_ + "/sub/../run/", "");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.5);
  mgr.reset();
  // A job id given as a relative path.
  const std::string cwd = fs::current_path();
  fs::current_path(dir_);
  mgr = Open(Root("run"), "./run");
  fs::current_path(cwd);
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 2, 0.4);
  mgr.reset();

  RunResult r = Catalog({"jobs", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json jobs = json::parse(r.out);
  ASSERT_EQ(jobs.size(), 1u) << r.out;
  EXPECT_EQ(jobs[0]["job_id"], Root("run"));
  EXPECT_EQ(jobs[0]["committed"], 2);
  // Asked for by any spelling of the path (the tool runs in dir_).
  fs::current_path(dir_);
  for (const std::string& job : {Root("run"), dir_ + "/run",
                                 std::string("./run"), dir_ + "/sub/../run/"}) {
    r = Catalog({"latest", job});
    EXPECT_EQ(r.out, Root("run") + "\t2\n") << job << ": " << r.err;
  }
  fs::current_path(cwd);
}

// A job that set its own id is found by the root it saved under too; a
// root two jobs saved into is ambiguous, and the error names both.
TEST_P(CatalogCliTest, AJobWithItsOwnIdIsFoundByItsRoot) {
  auto mgr = Open(Root("own"), "run42");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 5, 0.3);
  Save(*mgr, 6, 0.2);
  mgr.reset();
  const std::string cwd = fs::current_path();
  fs::current_path(dir_);
  for (const std::string& root :
       {Root("own"), dir_ + "/own", std::string("./own")}) {
    RunResult r = Catalog({"latest", root});
    EXPECT_EQ(r.out, Root("own") + "\t6\n") << root << ": " << r.err;
    r = Catalog({"best", root, "--metric", "loss"});
    EXPECT_EQ(r.out, Root("own") + "\t6\t0.2\n") << root << ": " << r.err;
    r = Catalog({"list", root, "--json"});
    ASSERT_EQ(r.exit_code, 0) << root << ": " << r.err;
    const json rows = json::parse(r.out);
    ASSERT_EQ(rows.size(), 2u) << r.out;
    EXPECT_EQ(rows[0]["job_id"], "run42");
  }
  fs::current_path(cwd);

  // The same job id saves under another root too (the job moved, or a copy
  // of the root runs): asked by its id, the job's newest is there; asked by
  // the first root, the answer stays in that root.
  mgr = Open(Root("moved"), "run42");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 9, 0.1);
  mgr.reset();
  RunResult r = Catalog({"latest", "run42"});
  EXPECT_EQ(r.out, Root("moved") + "\t9\n") << r.err;
  for (const std::vector<std::string>& no_check :
       {std::vector<std::string>{}, std::vector<std::string>{"--no-check"}}) {
    std::vector<std::string> args = {"latest", Root("own")};
    args.insert(args.end(), no_check.begin(), no_check.end());
    r = Catalog(args);
    EXPECT_EQ(r.out, Root("own") + "\t6\n") << r.err;
    args = {"best", Root("own"), "--metric", "loss"};
    args.insert(args.end(), no_check.begin(), no_check.end());
    r = Catalog(args);
    EXPECT_EQ(r.out, Root("own") + "\t6\t0.2\n") << r.err;
  }
  r = Catalog({"list", Root("own"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 2u) << r.out;
  r = Catalog({"list", "run42", "--json"});
  EXPECT_EQ(json::parse(r.out).size(), 3u) << r.out;

  // A second job saves into the same root under another id.
  mgr = Open(Root("own"), "run43");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 7, 0.1);
  mgr.reset();
  for (const char* sub : {"latest", "list"}) {
    RunResult r = Catalog({sub, dir_ + "/own"});
    EXPECT_EQ(r.exit_code, 1) << sub << ": " << r.out;
    EXPECT_TRUE(Contains(r.err, "\"run42\"") && Contains(r.err, "\"run43\""))
        << sub << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, "name the job by its id")) << r.err;
  }
  r = Catalog({"latest", "run43"});
  EXPECT_EQ(r.out, Root("own") + "\t7\n") << r.err;
}

// A root whose path holds '%', '?' or '#' is written in the catalog as a
// file URL that opens the same folder: latest checks it against storage
// and answers with it, and a scheduler can open what it prints.
TEST_P(CatalogCliTest, ARootWithUrlCharactersInItsPathIsFoundAgain) {
  const std::string path = dir_ + "/odd%41b?x#y";
  auto mgr = Open(path, "oddjob");
  ASSERT_NE(mgr, nullptr);
  Save(*mgr, 1, 0.5);
  mgr.reset();
  const std::string url = "file://" + dir_ + "/odd%2541b%3Fx%23y";
  for (const std::string& job : {std::string("oddjob"), path}) {
    RunResult r = Catalog({"latest", job});
    EXPECT_EQ(r.out, url + "\t1\n") << job << ": " << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  RunResult r = Ckpt({"ls", url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/oddAb"));
}

TEST_P(CatalogCliTest, NothingToReportIsExitOne) {
  // An empty catalog: made by opening it, as a job's first save does.
  ASSERT_TRUE(OpenCatalog(catalog_url_).ok());
  RunResult r = Catalog({"latest", "nobody"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "ckpt catalog latest: NotFound"));
  EXPECT_TRUE(Contains(r.err, "\"nobody\""));
  r = Catalog({"jobs"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "no jobs"));
  // A job the catalog has no row of is most likely a mistyped id.
  r = Catalog({"list", "nobody"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.err, "no job \"nobody\"")) << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt catalog jobs")) << r.err;
  r = Catalog({"list"});  // every job: none, which is an answer
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "no checkpoints")) << r.out;
  r = Ckpt({"catalog", "jobs", "--catalog", "none"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "turned off"));
}

// A query names a SQLite file that is not there (a typo): it says so and
// creates nothing, neither the file nor its folders.
TEST(CatalogCliQueryTest, AMistypedSqlitePathIsNotFoundAndCreatesNothing) {
  const testing::TempDir dir("catalog-typo");
  const std::string typo = dir.path().string() + "/typo/dir/catalog.sqlite";
  for (const std::vector<std::string>& query :
       std::vector<std::vector<std::string>>{
           {"catalog", "jobs", "--catalog", "sqlite://" + typo},
           {"catalog", "list", "somejob", "--catalog", typo},
           {"catalog", "latest", "somejob", "--catalog", typo},
           {"catalog", "best", "somejob", "--metric", "loss", "--min",
            "--catalog", typo}}) {
    RunResult r = testing::RunProgram(CKPT_CLI_PATH, query, dir.path());
    EXPECT_EQ(r.exit_code, 1) << query[1] << ": " << r.out << r.err;
    EXPECT_TRUE(Contains(r.err, "NotFound")) << r.err;
    EXPECT_TRUE(Contains(r.err, typo + " is not there")) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "typo"));
}

// `catalog sync` of a ROOT that is not there (a typo) into a catalog that
// is not there yet is an error naming the root, and creates no catalog:
// with no root there is nothing to record, and no row to mark deleted.
TEST(CatalogCliQueryTest, SyncOfAMissingRootCreatesNoCatalog) {
  const testing::TempDir dir("catalog-sync-typo");
  const std::string catalog = dir.path().string() + "/state/catalog.sqlite";
  const std::string typo = dir.path().string() + "/no-such-root";
  RunResult r = testing::RunProgram(
      CKPT_CLI_PATH, {"catalog", "sync", typo, "--catalog", catalog},
      dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.err, "NotFound")) << r.err;
  EXPECT_TRUE(Contains(r.err, "no-such-root")) << r.err;
  EXPECT_TRUE(Contains(r.err, "neither is the catalog")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "state"));
}

// A query names a file that is there but holds no catalog: an empty one (a
// `touch`) or another program's SQLite database. It is NotFound, and the
// file is left as it was: no schema written into it, no journal mode
// changed.
TEST(CatalogCliQueryTest, AFileThatHoldsNoCatalogIsNotFoundAndLeftAsItWas) {
  const testing::TempDir dir("catalog-none");
  const std::string empty = dir.path().string() + "/empty.sqlite";
  ASSERT_TRUE(testing::WriteFile(empty, ""));
  const std::string other = dir.path().string() + "/other.sqlite";
  {
    auto made = catalog::OpenSqlite(other, {});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    ASSERT_TRUE((*made)->Exec("CREATE TABLE notes (x TEXT)").ok());
  }
  const std::string before = testing::ReadFile(other);
  for (const std::string& file : {empty, other}) {
    for (const std::vector<std::string>& query :
         std::vector<std::vector<std::string>>{
             {"catalog", "jobs", "--catalog", file},
             {"catalog", "latest", "somejob", "--catalog", file}}) {
      RunResult r = testing::RunProgram(CKPT_CLI_PATH, query, dir.path());
      EXPECT_EQ(r.exit_code, 1) << query[1] << ": " << r.out << r.err;
      EXPECT_TRUE(Contains(r.err, "NotFound")) << r.err;
      EXPECT_TRUE(Contains(r.err, "holds none")) << r.err;
    }
  }
  EXPECT_EQ(std::filesystem::file_size(empty), 0u);
  EXPECT_EQ(testing::ReadFile(other), before);
}

TEST(CatalogCliUsageTest, HelpAndUsageErrors) {
  const std::string program = CKPT_CLI_PATH;
  auto run = [&](std::vector<std::string> args) {
    std::string command = program;
    for (const auto& a : args) command += " '" + a + "'";
    command += " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
    const int status = pclose(pipe);
    return std::make_pair(WEXITSTATUS(status), out);
  };
  auto [code, top] = run({"catalog", "--help"});
  EXPECT_EQ(code, 0) << top;
  for (const char* sub : {"jobs", "list", "latest", "best", "sync"}) {
    EXPECT_TRUE(Contains(top, sub));
    auto [c, help] = run({"catalog", sub, "--help"});
    EXPECT_EQ(c, 0) << help;
    EXPECT_TRUE(Contains(help, "--json")) << sub;
    EXPECT_TRUE(Contains(help, "--catalog")) << sub;
    EXPECT_TRUE(Contains(help, "Examples:")) << sub;
  }
  const std::vector<std::vector<std::string>> usage = {
      {"catalog"},
      {"catalog", "latest"},
      {"catalog", "best", "job"},
      {"catalog", "best", "job", "--metric", "x", "--min", "--max"},
      {"catalog", "list", "--all", "--deleted"},
      // A limit of 0 would list everything: a usage error, as gc's 0s are.
      {"catalog", "list", "--limit", "0"},
      {"catalog", "sync"},
  };
  for (const auto& args : usage) {
    auto [c, out] = run(args);
    EXPECT_EQ(c, 2) << out;
    EXPECT_TRUE(Contains(out, "--help"));
  }
}

TEST(CatalogCliPostgresTest, AWrongPasswordIsAClearError) {
  auto server = ckpt::testing::SharedPostgresServer();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string url = (*server)->PasswordUrl("wrong-secret");
  const std::string command =
      std::string(CKPT_CLI_PATH) + " catalog jobs --catalog '" + url + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(pclose(pipe)), 1) << out;
  EXPECT_TRUE(Contains(out,
                       "ckpt catalog jobs: InvalidArgument: open catalog "
                       "postgresql://ckpt_pw:***@127.0.0.1"));
  EXPECT_TRUE(Contains(out, "password authentication failed"));
  EXPECT_FALSE(Contains(out, "wrong-secret"));
}

// A catalog URL with a password, used to save and then to report and list:
// what ckpt writes for people (the report page, --json output, the
// catalog's own rows) holds the password nowhere.
TEST(CatalogCliPostgresTest, APasswordInTheCatalogUrlIsWrittenNowhere) {
  auto server = ckpt::testing::SharedPostgresServer();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string secret(testing::PostgresServer::kPassword);
  const std::string url = (*server)->PasswordUrl(secret);
  const testing::TempDir dir("catalog-secret");
  const std::string root = dir.string() + "/run";
  {
    auto catalog = OpenCatalog(url);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    Options options;
    options.job_id = "secret-job";
    options.catalog = std::move(catalog).value();
    auto mgr = CheckpointManager::Open(root, std::move(options));
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    TestModel model(1, 256);
    ASSERT_TRUE((*mgr)->Save(1, model.MakeState()).ok());
  }
  const std::string page = dir.string() + "/run.html";
  const std::string jobs_page = dir.string() + "/jobs.html";
  std::string written;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"report", root, "--catalog", url, "-o", page},
           {"report", "--catalog", url, "-o", jobs_page},
           {"catalog", "jobs", "--catalog", url, "--json"},
           {"catalog", "list", "secret-job", "--catalog", url, "--json"},
           {"ls", root, "--json"},
           {"show", root, "--json"}}) {
    RunResult r = testing::RunProgram(CKPT_CLI_PATH, args, dir.string());
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    written += r.out + r.err;
  }
  // A save by the tool, whose log goes to stderr, with the catalog reached
  // and with it unreachable (the warning names the catalog), then every
  // file ckpt wrote under the folder: roots, pages, exports.
  const std::string exported = dir.string() + "/run.safetensors";
  std::string unreachable = url;
  const size_t port = unreachable.rfind(':');
  ASSERT_NE(port, std::string::npos);
  unreachable = unreachable.substr(0, port) + ":1/nowhere";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"export", root, exported},
           {"import", exported, dir.string() + "/copy", "--step", "2",
            "--catalog", url},
           {"import", exported, dir.string() + "/copy2", "--step", "2",
            "--catalog", unreachable},
           {"gc", root, "--keep-last", "1", "--catalog", url}}) {
    RunResult r = testing::RunProgram(CKPT_CLI_PATH, args, dir.string());
    written += r.out + r.err;
  }
  EXPECT_TRUE(Contains(written, ":***@")) << "the unreachable URL is named";
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(dir.string())) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    ASSERT_TRUE(in) << entry.path();
    written += std::string(std::istreambuf_iterator<char>(in), {});
  }
  auto conn = catalog::ConnectSql(url);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  for (const char* table : {"ckpt_jobs", "ckpt_checkpoints", "ckpt_metrics"}) {
    auto rows = (*conn)->Query(std::string("SELECT * FROM ") + table);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    for (const catalog::SqlRow& row : *rows) {
      for (const catalog::SqlValue& cell : row) {
        if (const auto* text = std::get_if<std::string>(&cell)) {
          written += *text + "\n";
        }
      }
    }
  }
  EXPECT_TRUE(Contains(written, "ckpt_pw:***@")) << "the masked URL is shown";
  EXPECT_FALSE(Contains(written, secret));
}

}  // namespace
}  // namespace ckpt
