// StepsToDelete: which committed checkpoints a RetentionPolicy removes.
#include "checkpoint/retention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ckpt {
namespace {

using Steps = std::vector<int64_t>;

CheckpointInfo Ckpt(int64_t step, int64_t created_unix_ms = 0,
                    std::map<std::string, double> metrics = {},
                    std::vector<int64_t> depends_on = {}) {
  CheckpointInfo info;
  info.step = step;
  info.created_unix_ms = created_unix_ms;
  info.metrics = std::move(metrics);
  info.depends_on = std::move(depends_on);
  return info;
}

// Steps 1..n, one minute apart.
std::vector<CheckpointInfo> Series(int64_t n) {
  std::vector<CheckpointInfo> out;
  for (int64_t s = 1; s <= n; ++s) out.push_back(Ckpt(s, s * 60'000));
  return out;
}

std::vector<int64_t> Kept(const std::vector<CheckpointInfo>& all,
                          const std::vector<int64_t>& deleted) {
  std::vector<int64_t> out;
  for (const CheckpointInfo& c : all) {
    if (std::find(deleted.begin(), deleted.end(), c.step) == deleted.end()) {
      out.push_back(c.step);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RetentionTest, RulesOffDeleteNothing) {
  RetentionPolicy off;
  ASSERT_FALSE(off.enabled());
  EXPECT_EQ(StepsToDelete(Series(20), off), Steps{});
  // best_metric alone does not switch a rule on.
  off.best_metric = "loss";
  EXPECT_EQ(StepsToDelete(Series(20), off), Steps{});
}

TEST(RetentionTest, NoCheckpointsDeleteNothing) {
  RetentionPolicy p;
  p.keep_last = 1;
  EXPECT_EQ(StepsToDelete({}, p), Steps{});
}

TEST(RetentionTest, KeepLastKeepsTheNewestN) {
  RetentionPolicy p;
  p.keep_last = 2;
  EXPECT_EQ(StepsToDelete(Series(5), p), (Steps{1, 2, 3}));
  p.keep_last = 5;
  EXPECT_EQ(StepsToDelete(Series(5), p), Steps{});
  p.keep_last = 100;
  EXPECT_EQ(StepsToDelete(Series(5), p), Steps{});
}

// A step the listing found incomplete is no resume point: it neither
// counts as one of the newest nor goes.
TEST(RetentionTest, IncompleteStepsNeitherCountNorGo) {
  std::vector<CheckpointInfo> all = Series(5);
  all[4].incomplete = "data object step-5/x is missing";
  all[1].incomplete = "data object step-2/x is 10 bytes but ...";
  RetentionPolicy p;
  p.keep_last = 1;
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 3}));
  p.keep_last = 2;
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1}));
  for (CheckpointInfo& c : all) c.incomplete = "gone";
  EXPECT_EQ(StepsToDelete(all, p), Steps{});
}

TEST(RetentionTest, InputOrderDoesNotMatterAndOutputIsOldestFirst) {
  std::vector<CheckpointInfo> shuffled = {Ckpt(40), Ckpt(10), Ckpt(50),
                                          Ckpt(20), Ckpt(30)};
  RetentionPolicy p;
  p.keep_last = 1;
  EXPECT_EQ(StepsToDelete(shuffled, p), (Steps{10, 20, 30, 40}));
}

TEST(RetentionTest, KeepEveryNSteps) {
  RetentionPolicy p;
  p.keep_every_n_steps = 3;
  // 3, 6 and 9 are multiples; 10 is the newest.
  EXPECT_EQ(StepsToDelete(Series(10), p), (Steps{1, 2, 4, 5, 7, 8}));
}

TEST(RetentionTest, KeepEveryNStepsKeepsStepZero) {
  RetentionPolicy p;
  p.keep_every_n_steps = 100;
  std::vector<CheckpointInfo> all = {Ckpt(0), Ckpt(50), Ckpt(100), Ckpt(150),
                                     Ckpt(160)};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{50, 150}));
}

TEST(RetentionTest, KeepEverySecondsKeepsTheFirstOfEachWindow) {
  RetentionPolicy p;
  p.keep_every_seconds = 3600;
  const int64_t base = int64_t{1'700'000'000} / 3600 * 3600 * 1000;
  const int64_t s = 1000;
  std::vector<CheckpointInfo> all = {
      Ckpt(1, base + 0 * s),    Ckpt(2, base + 1000 * s),
      Ckpt(3, base + 3000 * s),                            // window 0
      Ckpt(4, base + 3700 * s), Ckpt(5, base + 5000 * s),  // window 1
      Ckpt(6, base + 7300 * s),                            // window 2
  };
  EXPECT_EQ(StepsToDelete(all, p), (Steps{2, 3, 5}));
}

TEST(RetentionTest, KeepEverySecondsFirstOfWindowStaysAsNewerOnesArrive) {
  RetentionPolicy p;
  p.keep_every_seconds = 60;
  // A checkpoint every 25 s; after every save retention runs on what is left,
  // as the manager does.
  std::vector<CheckpointInfo> live;
  std::set<int64_t> first_of_window;
  std::set<int64_t> windows_seen;
  for (int64_t step = 1; step <= 30; ++step) {
    const int64_t t = 1'000'000'020'000 + step * 25'000;
    live.push_back(Ckpt(step, t));
    if (windows_seen.insert(t / 60'000).second) first_of_window.insert(step);
    const std::vector<int64_t> doomed = StepsToDelete(live, p);
    for (int64_t d : doomed) {
      EXPECT_FALSE(first_of_window.count(d))
          << "step " << d << " was the first of its window, deleted at save "
          << step;
      EXPECT_NE(d, step) << "the newest checkpoint was deleted";
    }
    std::erase_if(live, [&](const CheckpointInfo& c) {
      return std::find(doomed.begin(), doomed.end(), c.step) != doomed.end();
    });
  }
  std::vector<int64_t> kept;
  for (const CheckpointInfo& c : live) kept.push_back(c.step);
  std::vector<int64_t> expected(first_of_window.begin(), first_of_window.end());
  if (expected.back() != 30) expected.push_back(30);
  EXPECT_EQ(kept, expected);
}

TEST(RetentionTest, KeepBestLowerIsBetter) {
  RetentionPolicy p;
  p.keep_best = 2;
  p.best_metric = "loss";
  std::vector<CheckpointInfo> all = {
      Ckpt(1, 0, {{"loss", 0.5}}), Ckpt(2, 0, {{"loss", 0.1}}),
      Ckpt(3, 0, {{"loss", 0.3}}), Ckpt(4, 0, {{"loss", 0.2}}),
      Ckpt(5, 0, {{"loss", 0.4}})};
  // 2 and 4 are best; 5 is the newest.
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 3}));
}

TEST(RetentionTest, KeepBestHigherIsBetter) {
  RetentionPolicy p;
  p.keep_best = 2;
  p.best_metric = "accuracy";
  p.best_higher_is_better = true;
  std::vector<CheckpointInfo> all = {
      Ckpt(1, 0, {{"accuracy", 0.5}}), Ckpt(2, 0, {{"accuracy", 0.1}}),
      Ckpt(3, 0, {{"accuracy", 0.9}}), Ckpt(4, 0, {{"accuracy", 0.7}}),
      Ckpt(5, 0, {{"accuracy", 0.2}})};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 2}));
}

TEST(RetentionTest, KeepBestIgnoresCheckpointsWithoutTheMetric) {
  RetentionPolicy p;
  p.keep_best = 3;
  p.best_metric = "loss";
  std::vector<CheckpointInfo> all = {
      Ckpt(1),                       // no metrics at all
      Ckpt(2, 0, {{"loss", 0.5}}),   //
      Ckpt(3, 0, {{"other", 0.0}}),  // another metric only
      Ckpt(4, 0, {{"loss", 0.7}}),   //
      Ckpt(5)};                      // newest, no metric
  // Only two have the metric: keep_best = 3 does not make 1 or 3 "best".
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 3}));
  p.best_higher_is_better = true;
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 3}));
}

TEST(RetentionTest, KeepBestByAMetricNoneHasDeletesNothing) {
  RetentionPolicy p;
  p.keep_last = 1;
  p.keep_best = 1;
  p.best_metric = "Loss";  // saved as "loss": a misspelling
  std::vector<CheckpointInfo> all = {Ckpt(1, 0, {{"loss", 0.1}}),
                                     Ckpt(2, 0, {{"loss", 0.5}}),
                                     Ckpt(3, 0, {{"loss", 0.9}, {"acc", 1}})};
  // Ranked by nothing, step 1 (the best) would go with step 2.
  EXPECT_EQ(StepsToDelete(all, p), Steps{});
  Status ranks = RetentionRanks(all, p);
  EXPECT_EQ(ranks.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(ranks.message().find("metric \"Loss\""), std::string::npos)
      << ranks.ToString();
  EXPECT_NE(ranks.message().find("\"acc\", \"loss\""), std::string::npos)
      << ranks.ToString();
  EXPECT_NE(ranks.message().find("3 checked"), std::string::npos)
      << ranks.ToString();
  // Once one checkpoint has it, the rule ranks those that do.
  all.push_back(Ckpt(4, 0, {{"Loss", 0.3}}));
  EXPECT_TRUE(RetentionRanks(all, p).ok());
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 2, 3}));
  // Without keep_best, or with no checkpoint, there is nothing to rank.
  p.keep_best = 0;
  EXPECT_TRUE(RetentionRanks({Ckpt(1)}, p).ok());
  p.keep_best = 1;
  EXPECT_TRUE(RetentionRanks({}, p).ok());
  EXPECT_NE(RetentionRanks({Ckpt(1)}, p).message().find("no metrics"),
            std::string::npos);
}

TEST(RetentionTest, KeepBestTiesGoToTheNewer) {
  RetentionPolicy p;
  p.keep_best = 1;
  p.best_metric = "loss";
  std::vector<CheckpointInfo> all = {
      Ckpt(1, 0, {{"loss", 0.2}}), Ckpt(2, 0, {{"loss", 0.2}}),
      Ckpt(3, 0, {{"loss", 0.2}}), Ckpt(4, 0, {{"loss", 0.9}})};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 2}));
  p.keep_best = 2;
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1}));
  p.best_higher_is_better = true;
  p.keep_best = 2;
  // 4 is best; of the tied rest the newest, 3, is second.
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 2}));
}

TEST(RetentionTest, RulesAreUnited) {
  RetentionPolicy p;
  p.keep_last = 1;
  p.keep_every_n_steps = 5;
  p.keep_best = 1;
  p.best_metric = "loss";
  std::vector<CheckpointInfo> all;
  for (int64_t s = 1; s <= 12; ++s) {
    all.push_back(Ckpt(s, s * 1000, {{"loss", s == 3 ? 0.01 : 1.0 / s}}));
  }
  // 12: last; 5 and 10: every 5th; 3: best.
  const std::vector<int64_t> doomed = StepsToDelete(all, p);
  EXPECT_EQ(Kept(all, doomed), (Steps{3, 5, 10, 12}));
  EXPECT_EQ(doomed, (Steps{1, 2, 4, 6, 7, 8, 9, 11}));
}

TEST(RetentionTest, NewestIsAlwaysKept) {
  RetentionPolicy p;
  p.keep_best = 1;
  p.best_metric = "loss";
  std::vector<CheckpointInfo> all = {
      Ckpt(1, 0, {{"loss", 0.3}}), Ckpt(2, 0, {{"loss", 0.1}}),
      Ckpt(3, 0, {{"loss", 0.2}}), Ckpt(4, 0, {{"loss", 9.0}})};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 3}));

  RetentionPolicy every;
  every.keep_every_n_steps = 10;
  EXPECT_EQ(Kept(Series(7), StepsToDelete(Series(7), every)), (Steps{7}));

  // The newest by step, even when its clock says otherwise.
  RetentionPolicy window;
  window.keep_every_seconds = 1;
  std::vector<CheckpointInfo> skewed = {Ckpt(1, 5000), Ckpt(2, 5100),
                                        Ckpt(3, 5200)};
  EXPECT_EQ(StepsToDelete(skewed, window), (Steps{2}));
}

TEST(RetentionTest, DependenciesOfKeptCheckpointsAreKept) {
  RetentionPolicy p;
  p.keep_last = 1;
  // 5 -> 3 -> 2 -> 1 (incremental chain); 4 is a full checkpoint.
  std::vector<CheckpointInfo> all = {Ckpt(1), Ckpt(2, 0, {}, {1}),
                                     Ckpt(3, 0, {}, {2}), Ckpt(4),
                                     Ckpt(5, 0, {}, {3})};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{4}));
}

TEST(RetentionTest, DependenciesOfDeletedCheckpointsAreNotKept) {
  RetentionPolicy p;
  p.keep_last = 1;
  // 3 depends on 1 and 2 but is not kept; 4 is full and newest.
  std::vector<CheckpointInfo> all = {Ckpt(1), Ckpt(2, 0, {}, {1}),
                                     Ckpt(3, 0, {}, {1, 2}), Ckpt(4)};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{1, 2, 3}));
}

TEST(RetentionTest, DependencyOnAStepThatIsGoneIsHarmless) {
  RetentionPolicy p;
  p.keep_last = 1;
  std::vector<CheckpointInfo> all = {Ckpt(5), Ckpt(7, 0, {}, {3, 5})};
  EXPECT_EQ(StepsToDelete(all, p), Steps{});
}

TEST(RetentionTest, DependencyKeptByOneRuleProtectsItsChain) {
  RetentionPolicy p;
  p.keep_best = 1;
  p.best_metric = "loss";
  // The best, 3, is incremental on 2, which is incremental on 1.
  std::vector<CheckpointInfo> all = {
      Ckpt(1, 0, {{"loss", 0.9}}), Ckpt(2, 0, {{"loss", 0.8}}, {1}),
      Ckpt(3, 0, {{"loss", 0.1}}, {2}), Ckpt(4, 0, {{"loss", 0.7}}),
      Ckpt(5, 0, {{"loss", 0.6}})};
  EXPECT_EQ(StepsToDelete(all, p), (Steps{4}));
}

}  // namespace
}  // namespace ckpt
