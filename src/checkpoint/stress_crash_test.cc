// The pairs of stress_test.cc in one process, over the crash-simulating
// storage (testing/crash_storage.h) on mem://: the same eight operations
// (delete and gc as the CLI runs them, through the manager), the same root
// to start from and the same reader's judgement (stress_util.h).
//
// Each ordered pair (outer, inner) is interleaved at the level of storage
// calls: the inner party runs whole just before the outer party's call
// number K (reads included). K is first 0 (the inner party first), then
// past the last call (the inner party after), then random, each run once
// without a power loss. For a few more random K per pair the power is then
// cut during every mutating call of both parties in turn, the crash-
// simulating storage keeps what was durable (dropping, applying or keeping
// at random what was uncertain, with stray temporary files), and the root
// is judged as after a kill: a party that returned success before the power
// went is held to it, one the power cut may have done anything in between.
// Damage beyond the storage contract (torn objects) is powerloss_test's.
// CKPT_STRESS_INTERLEAVINGS=N runs N values of K per pair without a power
// loss (default 6, under a sanitizer 3), CKPT_STRESS_POWERLOSS_INTERLEAVINGS
// =M cuts the power at every call of M (default 2, under a sanitizer 1);
// CKPT_STRESS_SEED=S replays a run.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/crash_storage.h"
#include "testing/stress_util.h"

namespace ckpt {
namespace {

using testing::Backend;
using testing::CrashStorage;
using testing::Damage;
using testing::stress::End;
using testing::stress::Op;
using testing::stress::OpName;
using testing::stress::Outcome;
using testing::stress::Party;

// Thousands of simulated crashes each leave warnings (a lease that cannot be
// given back, a LATEST hint that cannot be written): errors only, unless
// asked otherwise. Before main, so before the first log line fixes the level.
[[maybe_unused]] const bool kQuiet = [] {
  return setenv("CKPT_LOG", "error", 0) == 0;
}();

// Runs `run_inner` once, just before this party's storage call number `at`
// (reads included; at or past the last call: never, the caller runs it
// after). Calls from several threads of the party are numbered as they
// come.
class Interleaver : public StorageWrapper {
 public:
  Interleaver(Storage* target, int64_t at, std::function<void()> run_inner)
      : StorageWrapper(target), at_(at), run_inner_(std::move(run_inner)) {}

  int64_t calls() const { return calls_.load(); }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    Point();
    return StorageWrapper::NewWritable(key);
  }
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    Point();
    return StorageWrapper::Put(key, data, mode);
  }
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    Point();
    return StorageWrapper::ReadRange(key, offset, out);
  }
  Result<std::string> ReadAll(std::string_view key) override {
    Point();
    return StorageWrapper::ReadAll(key);
  }
  Result<ObjectInfo> Stat(std::string_view key) override {
    Point();
    return StorageWrapper::Stat(key);
  }
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    Point();
    return StorageWrapper::List(prefix);
  }
  Status Delete(std::string_view key) override {
    Point();
    return StorageWrapper::Delete(key);
  }
  Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) override {
    Point();
    return StorageWrapper::AbortIncompleteWrites(prefix, dead);
  }

 private:
  void Point() {
    if (calls_.fetch_add(1) == at_) run_inner_();
  }

  const int64_t at_;
  const std::function<void()> run_inner_;
  std::atomic<int64_t> calls_{0};
};

// Runs `p` through `storage` as its program would (ckpt_stress_party, or
// the CLI's delete and gc), refused at once by a lease another holds.
Outcome RunParty(const Party& p, std::unique_ptr<Storage> storage,
                 const CrashStorage& crash) {
  Outcome o;
  o.party = p;
  Options options = testing::stress::PartyOptions();
  options.lease_wait_seconds = 0;
  if (p.op == Op::kRetention) {
    options.retention.keep_last = testing::stress::kRetentionKeepLast;
  }
  Status s;
  {
    auto mgr = CheckpointManager::Open(std::move(storage), options);
    if (!mgr.ok()) {
      s = mgr.status();
    } else if (p.op == Op::kDelete || p.op == Op::kDeleteForce) {
      s = (*mgr)
              ->Delete(p.step, {.rewrite_dependants = p.op == Op::kDeleteForce})
              .status();
    } else if (p.op == Op::kGc) {
      s = (*mgr)->GarbageCollect({.retention = RetentionPolicy()}).status();
    } else {
      testing::StepModel model(p.step, 1);
      SaveOptions save{.incremental = p.incremental};
      Result<SaveResult> r =
          p.op == Op::kAsync
              ? (*mgr)->SaveAsync(p.step, model.ForRank(0), save).Wait()
              : (*mgr)->Save(p.step, model.ForRank(0), save);
      s = r.status();
      if (r.ok()) o.deleted = r->deleted_steps;
    }
  }  // the program ends: its lease is given back
  if (s.ok()) {
    o.end = End::kDone;
    o.retention_cut = crash.crashed();
  } else {
    o.end = crash.crashed() ? End::kCut : End::kFailed;
    o.error = s.ToString();
  }
  return o;
}

struct Totals {
  int interleavings = 0;
  int power_losses = 0;
  int operations = 0;
  int committed = 0;
  int refused = 0;
  int cut = 0;
  int lost = 0;
};

class StressCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Storage>> storage = prepared_.Open();
    ASSERT_TRUE(storage.ok());
    Status s = testing::stress::Prepare(**storage);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Copies what Prepare left in `prepared_` into `root`.
  void CopyPrepared(const testing::TestRoot& root) {
    auto from = prepared_.Open();
    auto to = root.Open();
    ASSERT_TRUE(from.ok() && to.ok());
    Result<std::vector<ObjectInfo>> all = (*from)->List("");
    ASSERT_TRUE(all.ok());
    for (const ObjectInfo& o : *all) {
      Result<std::string> bytes = (*from)->ReadAll(o.key);
      ASSERT_TRUE(bytes.ok());
      ASSERT_TRUE((*to)->PutString(o.key, *bytes).ok());
    }
  }

  struct Run {
    std::vector<Outcome> outcomes;
    int64_t outer_calls = 0;
    uint64_t mutating_calls = 0;
  };

  // `outer` with `inner` run whole before the outer's call `at`, the power
  // cut during mutating call `crash_at` (none: not at all); then judged.
  Run Interleave(const Party& outer, const Party& inner, int64_t at,
                 std::optional<uint64_t> crash_at, const Damage& damage,
                 Totals& totals, const std::string& where) {
    Run run;
    const testing::TestRoot root(Backend::kMemory, "crash");
    CopyPrepared(root);
    Result<std::unique_ptr<Storage>> base = root.Open();
    EXPECT_TRUE(base.ok());
    if (!base.ok()) return run;
    Result<std::unique_ptr<CrashStorage>> crash =
        CrashStorage::Wrap(base->get());
    EXPECT_TRUE(crash.ok());
    if (!crash.ok()) return run;
    if (crash_at) (*crash)->CrashAt(*crash_at);
    std::optional<Outcome> inner_outcome;
    auto run_inner = [&] {
      inner_outcome = RunParty(
          inner, std::make_unique<StorageWrapper>(crash->get()), **crash);
    };
    auto interleaver =
        std::make_unique<Interleaver>(crash->get(), at, run_inner);
    Interleaver* counted = interleaver.get();
    // The outer party's manager goes with it, so its storage must not.
    const Outcome outer_outcome =
        RunParty(outer, std::make_unique<StorageWrapper>(counted), **crash);
    run.outer_calls = counted->calls();
    if (!inner_outcome) run_inner();  // `at` was past the outer's last call
    run.outcomes = {outer_outcome, *inner_outcome};
    run.mutating_calls = (*crash)->operations();
    Result<int> applied = (*crash)->PowerLoss(damage);
    EXPECT_TRUE(applied.ok()) << applied.status().ToString();

    for (const Outcome& o : run.outcomes) {
      ++totals.operations;
      if (o.end == End::kDone && testing::stress::Saves(o.party.op)) {
        ++totals.committed;
      }
      if (o.end == End::kFailed) ++totals.refused;
      if (o.end == End::kCut) ++totals.cut;
    }
    auto reader = CheckpointManager::Open(std::move(base).value());
    EXPECT_TRUE(reader.ok());
    if (!reader.ok()) return run;
    const testing::stress::Judgement j =
        testing::stress::Judge(**reader, run.outcomes, /*atomic_create=*/true);
    totals.lost += j.lost;
    if (!j.problems.empty()) {
      std::string what = where;
      const char* ends[] = {"done", "failed", "cut"};
      for (const Outcome& o : run.outcomes) {
        what += "\n  " + std::string(OpName(o.party.op)) + " of step " +
                std::to_string(o.party.step) +
                (o.party.incremental ? " (incremental)" : "") + ": " +
                ends[static_cast<int>(o.end)] + " " + o.error;
      }
      for (const std::string& p : j.problems) what += "\n  " + p;
      ADD_FAILURE() << what;
    }
    return run;
  }

  testing::TestRoot prepared_{Backend::kMemory, "prepared"};
};

TEST_F(StressCrashTest, EveryPairInterleavedWithAPowerLossAtEveryCall) {
  auto from_env = [](const char* name, int by_default) {
    const char* n = std::getenv(name);
    return n != nullptr ? std::max(1, std::atoi(n)) : by_default;
  };
  const int per_pair = from_env("CKPT_STRESS_INTERLEAVINGS",
                                testing::stress::kSanitized ? 3 : 6);
  const int cut_per_pair = from_env("CKPT_STRESS_POWERLOSS_INTERLEAVINGS",
                                    testing::stress::kSanitized ? 1 : 2);
  const char* s = std::getenv("CKPT_STRESS_SEED");
  const uint64_t seed =
      s != nullptr ? std::strtoull(s, nullptr, 10) : std::random_device()();
  std::printf(
      "[ stress ] crash: %d interleavings per pair, "
      "CKPT_STRESS_SEED=%llu\n",
      per_pair, static_cast<unsigned long long>(seed));
  std::mt19937_64 gen(seed);
  const auto start = std::chrono::steady_clock::now();
  Totals totals;
  for (Op a : testing::stress::kAllOps) {
    for (Op b : testing::stress::kAllOps) {
      const std::array<Party, 2> parties =
          testing::stress::PickParties(a, b, gen, /*wait=*/false);
      const std::string pair = std::string(OpName(a)) + " around " + OpName(b);
      // How many calls the outer party makes when the inner one runs
      // first.
      const Damage none{Damage::Uncertain::kDrop, false, false, 0};
      const int64_t calls = Interleave(parties[0], parties[1], 0, std::nullopt,
                                       none, totals, pair + ", inner first")
                                .outer_calls;
      ++totals.interleavings;
      if (HasFatalFailure()) return;
      std::vector<int64_t> points = {calls};  // the inner one last
      for (int i = 2; i < per_pair; ++i) {
        points.push_back(static_cast<int64_t>(gen() % (calls + 1)));
      }
      for (int64_t at : points) {
        Interleave(parties[0], parties[1], at, std::nullopt, none, totals,
                   pair + ", inner before call " + std::to_string(at));
        ++totals.interleavings;
      }
      // The power cut at every mutating call of a few interleavings.
      for (int i = 0; i < cut_per_pair; ++i) {
        const int64_t at = static_cast<int64_t>(gen() % (calls + 1));
        const std::string where =
            pair + ", inner before call " + std::to_string(at);
        const uint64_t mutating = Interleave(parties[0], parties[1], at,
                                             std::nullopt, none, totals, where)
                                      .mutating_calls;
        ++totals.interleavings;
        for (uint64_t crash_at = 0; crash_at < mutating; ++crash_at) {
          const Damage damage[] = {
              {Damage::Uncertain::kDrop, false, true, crash_at},
              {Damage::Uncertain::kApply, false, false, crash_at},
              {Damage::Uncertain::kRandom, false, true, gen()},
          };
          const Damage& d = damage[crash_at % 3];
          Interleave(parties[0], parties[1], at, crash_at, d, totals,
                     where + ", power lost during mutating call " +
                         std::to_string(crash_at) + " of " +
                         std::to_string(mutating) + ", damage " +
                         std::to_string(crash_at % 3));
          ++totals.power_losses;
          if (HasFailure()) return;
        }
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "[ stress ] crash: %d interleavings and %d power losses, %d "
      "operations: %d saves committed, %d refused, %d cut by the power; %d "
      "lost, %.0f s\n",
      totals.interleavings, totals.power_losses, totals.operations,
      totals.committed, totals.refused, totals.cut, totals.lost, seconds);
  EXPECT_EQ(totals.lost, 0);
  EXPECT_GT(totals.power_losses, 0);
}

}  // namespace
}  // namespace ckpt
