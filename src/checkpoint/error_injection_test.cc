// Storage errors injected at every mutating call of a save, once and
// persistently: ENOSPC, EIO (what a failed fsync returns), EDQUOT and short
// writes, on 1 and 4 ranks. Each gives a clear error on every rank (no hang,
// no crash); an error before the commit fails the save, and the catalog has
// not advanced; an error after it (the LATEST hint, garbage collection) is
// only a warning. The previous checkpoint still verifies and loads, and once
// the storage works again the next save succeeds.
#include <cerrno>
#include <cstring>
#include <future>

#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "gtest/gtest.h"
#include "testing/fault_storage.h"
#include "testing/step_model.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

using testing::CheckStep;
using testing::FaultStorage;
using testing::RunRanks;
using testing::StepModel;

struct ErrorCase {
  int err;           // the errno injected
  bool short_write;  // a failed append writes half its bytes first
  bool persistent;   // every later call fails too
  int ranks;
};

std::string Name(const ErrorCase& c) {
  std::string n = c.err == ENOSPC   ? "ENOSPC"
                  : c.err == EIO    ? "EIO"
                  : c.err == EDQUOT ? "EDQUOT"
                                    : std::to_string(c.err);
  if (c.short_write) n += "_short_write";
  n += c.persistent ? "_persistent" : "_once";
  return n + "_" + std::to_string(c.ranks) + "_ranks";
}

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << Name(c); }

class ErrorInjectionTest : public ::testing::TestWithParam<ErrorCase> {
 protected:
  // A fresh root holding step 1, and a fresh catalog that recorded it.
  void Prepare(int round) {
    root_ = "file://" + dir_ + "/root-" + std::to_string(round);
    auto catalog =
        OpenCatalog(dir_ + "/catalog-" + std::to_string(round) + ".sqlite");
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    catalog_ = std::move(catalog).value();
    auto base = OpenStorage(root_);
    ASSERT_TRUE(base.ok());
    std::vector<Status> saved = Save(base->get(), 1, nullptr);
    for (const Status& s : saved) ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Saves `step` on every rank through `storage`; every rank's status.
  std::vector<Status> Save(Storage* storage, int64_t step,
                           FaultStorage* fault) {
    const int ranks = GetParam().ranks;
    StepModel model(step, ranks);
    std::vector<Status> out(ranks);
    RunRanks(ranks, [&](int rank, Communicator* comm) {
      Options o;
      o.communicator = comm;
      o.chunk_size = 4096;
      o.job_id = "errors";
      o.catalog = catalog_;
      o.retention.keep_last = 1;  // the save also deletes: more calls
      auto mgr =
          CheckpointManager::Open(std::make_unique<StorageWrapper>(storage), o);
      if (!mgr.ok()) {
        out[rank] = mgr.status();
        return;
      }
      out[rank] = (*mgr)->Save(step, model.ForRank(rank)).status();
    });
    return out;
  }

  std::optional<int64_t> CatalogLatest() {
    auto latest = catalog_->Latest("errors");
    EXPECT_TRUE(latest.ok()) << latest.status().ToString();
    if (!latest.ok() || !latest->has_value()) return std::nullopt;
    return (*latest)->step;
  }

  const testing::TempDir temp_{"errors", "/dev/shm"};
  const std::string dir_ = temp_.string();
  std::string root_;
  std::shared_ptr<Catalog> catalog_;
};

TEST_P(ErrorInjectionTest, AtEveryCall) {
  const ErrorCase& c = GetParam();
  Prepare(0);
  uint64_t total;
  {
    auto base = OpenStorage(root_);
    FaultStorage counter(base->get());
    for (const Status& s : Save(&counter, 2, &counter)) {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    total = counter.operations();
  }
  ASSERT_GE(total, 5u);
  const std::string text = std::strerror(c.err);
  for (uint64_t n = 0; n < total; ++n) {
    Prepare(static_cast<int>(n) + 1);
    if (HasFatalFailure()) return;
    auto base = OpenStorage(root_);
    ASSERT_TRUE(base.ok());
    FaultStorage fault(base->get());
    fault.set_short_writes(c.short_write);
    Status injected =
        ErrnoError(c.err, "injected at call " + std::to_string(n));
    if (c.persistent) {
      fault.FailFrom(n, injected);
    } else {
      fault.FailOnce(n, injected);
    }
    // No hang: the save must end, on every rank, within a minute.
    auto running =
        std::async(std::launch::async, [&] { return Save(&fault, 2, &fault); });
    if (running.wait_for(std::chrono::seconds(60)) !=
        std::future_status::ready) {
      ADD_FAILURE() << "save hung with an error at call " << n;
      std::_Exit(1);  // the hung threads cannot be joined
    }
    const std::vector<Status> statuses = running.get();
    const std::vector<std::string> log = fault.log();
    ASSERT_LT(n, log.size());
    const std::string where = "error at call " + std::to_string(n) + " (" +
                              log[n] + ") of " + std::to_string(total);
    SCOPED_TRACE(where);
    // The commit is the put of the manifest; only what comes after it (the
    // LATEST hint, retention) may fail without failing the save.
    size_t commit = log.size();
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].starts_with("put ") &&
          log[i].ends_with(format::kManifestName)) {
        commit = i;
      }
    }
    const bool after_commit = n > commit;
    // The winner of a lease generation deletes the earlier ones as history;
    // one that stays behind costs nothing (the next winner retries), so a
    // single failure there does not fail the save.
    const bool history = !c.persistent && log[n].starts_with("delete LEASE-");
    for (size_t r = 0; r < statuses.size(); ++r) {
      EXPECT_EQ(statuses[r].code(), statuses[0].code())
          << "ranks disagree: " << statuses[r].ToString();
      if (after_commit || history) {
        EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      } else {
        ASSERT_FALSE(statuses[r].ok()) << "rank " << r << " reported success";
        // Clear: it says what failed, and in which save.
        EXPECT_NE(statuses[r].message().find(text), std::string::npos)
            << statuses[r].ToString();
        EXPECT_NE(statuses[r].message().find("step 2"), std::string::npos)
            << statuses[r].ToString();
      }
    }
    auto mgr = CheckpointManager::Open(root_);
    ASSERT_TRUE(mgr.ok());
    auto latest = (*mgr)->Latest();
    ASSERT_TRUE(latest.ok() && latest->has_value());
    if (after_commit || history) {
      EXPECT_EQ(**latest, 2);
      EXPECT_EQ(CatalogLatest(), 2);
      EXPECT_EQ(CheckStep(**mgr, 2, c.ranks), "");
    } else {
      EXPECT_EQ(**latest, 1);
      EXPECT_EQ(CatalogLatest(), 1) << "the catalog advanced";
      auto report = (*mgr)->Verify(1);
      ASSERT_TRUE(report.ok());
      EXPECT_TRUE(report->ok()) << report->problems.front();
      EXPECT_EQ(CheckStep(**mgr, 1, c.ranks), "");
      // The storage works again: the save goes through.
      for (const Status& s : Save(base->get(), 2, nullptr)) {
        EXPECT_TRUE(s.ok()) << "after recovery: " << s.ToString();
      }
      EXPECT_EQ(CatalogLatest(), 2);
    }
  }
  std::printf("[ errors ] %s: %llu calls, each failed\n", Name(c).c_str(),
              static_cast<unsigned long long>(total));
}

std::vector<ErrorCase> Cases() {
  std::vector<ErrorCase> out;
  for (int ranks : {1, 4}) {
    for (bool persistent : {false, true}) {
      out.push_back({ENOSPC, false, persistent, ranks});
      out.push_back({EIO, false, persistent, ranks});
      out.push_back({EDQUOT, false, persistent, ranks});
      out.push_back({ENOSPC, true, persistent, ranks});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Errors, ErrorInjectionTest,
                         ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return Name(info.param); });

}  // namespace
}  // namespace ckpt
